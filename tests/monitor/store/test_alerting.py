"""The alerting tables on SQLite and PostgreSQL: outbox, leases, episodes, silences, baselines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from monitor.store.checkpoint import Checkpoint
from monitor.store.store import Store

T0 = datetime(2026, 11, 2, 14, 0, tzinfo=UTC)


def _episode(episode: str, state: str, *, resolved_at: datetime | None = None,
             notified: bool = True) -> dict:
    return {
        "episode": episode, "fingerprint": episode.split("-")[0], "rule": "acceptance_drop",
        "severity": "warning", "route": "code", "labels": {"route": "code"},
        "summary": "code: acceptance fell", "details": {"baseline": 0.7}, "state": state,
        "started_at": T0, "updated_at": T0, "resolved_at": resolved_at, "notified": notified,
        "silenced_by": None,
    }


def test_outbox_rows_are_written_once_per_sink_and_key(store: Store) -> None:
    rows = [("slack", "g1-1", {"n": 1}), ("pagerduty", "g1-1", {"n": 1}),
            ("slack", "g1-2", {"n": 2})]
    store.commit(Checkpoint("s", outbox=rows))
    # The same notifications re-decided after a crash: no second row.
    store.commit(Checkpoint("s", outbox=rows[:2]))
    out = store.alerting.outbox()
    assert [(r.sink, r.key, r.state, r.attempts, r.progress) for r in out] == [
        ("slack", "g1-1", "pending", 0, 0), ("pagerduty", "g1-1", "pending", 0, 0),
        ("slack", "g1-2", "pending", 0, 0)]
    head = store.alerting.head("slack")
    assert [r.key for r in head] == ["g1-1", "g1-2"]
    alerting = store.alerting
    alerting.mark_retry(head[0].id, attempts=1, progress=0, next_at=T0, error="HTTP 500")
    alerting.mark_delivered(head[1].id, 1, T0)
    assert [(r.key, r.attempts, r.last_error) for r in alerting.head("slack")] == [
        ("g1-1", 1, "HTTP 500")]
    alerting.mark_failed(head[0].id, attempts=2, progress=0, error="HTTP 400 invalid_payload")
    assert alerting.head("slack") == []
    assert {r.key: r.state for r in alerting.outbox(sink="slack")} == {
        "g1-1": "failed", "g1-2": "delivered"}
    assert set(alerting.pending_stats()) == {"pagerduty"}


def test_sink_lease_has_one_holder_until_it_expires(store: Store) -> None:
    a = store.alerting
    assert a.acquire_lease("slack", "host-a:1", T0, 30)
    assert not a.acquire_lease("slack", "host-b:2", T0 + timedelta(seconds=10), 30)
    assert a.acquire_lease("slack", "host-a:1", T0 + timedelta(seconds=20), 30)  # renew
    assert not a.acquire_lease("slack", "host-b:2", T0 + timedelta(seconds=40), 30)
    assert a.acquire_lease("slack", "host-b:2", T0 + timedelta(seconds=51), 30)  # expired
    a.release_lease("slack", "host-b:2")
    assert a.acquire_lease("slack", "host-a:1", T0 + timedelta(seconds=52), 30)
    assert a.acquire_lease("pagerduty", "host-b:2", T0, 30)  # leases are per sink


def test_episodes_upsert_and_select_for_resend(store: Store) -> None:
    store.commit(Checkpoint("s", episodes=[_episode("aa-1", "firing"),
                                           _episode("bb-1", "firing")]))
    store.commit(Checkpoint("s", episodes=[
        _episode("bb-1", "resolved", resolved_at=T0 + timedelta(minutes=10))]))
    a = store.alerting
    assert [e["episode"] for e in a.episodes(states=("firing",))] == ["aa-1"]
    recent = a.episodes(states=("firing",), resolved_since=T0 + timedelta(minutes=8))
    assert {e["episode"]: e["state"] for e in recent} == {"aa-1": "firing", "bb-1": "resolved"}
    assert [e["episode"] for e in a.episodes(
        states=("firing",), resolved_since=T0 + timedelta(minutes=11))] == ["aa-1"]
    (bb,) = [e for e in a.episodes() if e["episode"] == "bb-1"]
    assert bb["resolved_at"] == T0 + timedelta(minutes=10) and bb["notified"] is True


def test_silences_add_list_expire(store: Store) -> None:
    a = store.alerting
    s1 = a.add_silence("batch-*", None, T0, T0 + timedelta(hours=2), "load test", "alice", T0)
    s2 = a.add_silence("code", "below_breakeven", T0, T0 + timedelta(hours=1), "known", "bob", T0)
    assert [s.id for s in a.silences(active_at=T0)] == [s2.id, s1.id]
    assert a.expire_silence(s2.id, T0 + timedelta(minutes=5))
    assert not a.expire_silence(s2.id, T0 + timedelta(minutes=6))  # already over
    assert [s.id for s in a.silences(active_at=T0 + timedelta(minutes=6))] == [s1.id]
    assert len(a.silences()) == 2
    (s1_again,) = [s for s in a.silences() if s.id == s1.id]
    assert s1_again == s1


def test_baseline_requests_are_marked_applied_by_the_checkpoint(store: Store) -> None:
    a = store.alerting
    r1 = a.request_baseline("code", "fine-tuned target r3", "alice", T0)
    r2 = a.request_baseline("chat", "expected", "bob", T0)
    assert [r.id for r in a.baseline_requests(pending_only=True)] == [r1, r2]
    store.commit(Checkpoint("s", applied_baselines=[(r1, "host:1")]))
    assert [r.id for r in a.baseline_requests(pending_only=True)] == [r2]
    (done,) = [r for r in a.baseline_requests() if r.id == r1]
    assert done.applied_by == "host:1" and done.applied_at is not None
