"""Gathering a route's report from a replay of simulated traffic with incidents, on SQLite and
PostgreSQL: counts against the raw events, series changes, change points, episodes and the
detectors' recommendations."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.report.data import RouteReport, floor_to, gather_report
from monitor.store.store import Store
from tests.helpers import read_jsonl
from tests.monitor.report import START, replay, simulate

T0 = datetime.fromisoformat(START.replace("Z", "+00:00"))
T_END = T0 + timedelta(hours=6)
PAIR = "llama-3.1-70b-instruct-eagle3 → llama-3.1-70b-instruct"
OLD_REV, NEW_REV = "2026-10-28", "2026-11-02"  # the incident names the new one by its date
SHIFT = "acceptance_shift:route=code-assistant,at=4h,factor=0.8"


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return simulate(tmp_path_factory.mktemp("report-data") / "t.jsonl", SHIFT)


@pytest.fixture(scope="module")
def oracle(traffic: Path) -> dict[str, Any]:
    """chat's sums per target revision, straight from the JSON lines."""
    sums: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"requests": 0, "drafted": 0, "accepted": 0, "steps": 0, "pp": [0] * 4})
    first_new: datetime | None = None
    ttft: dict[tuple[str, datetime], list[float]] = defaultdict(list)
    for e in read_jsonl(traffic):
        if e["route"] != "chat":
            continue
        rev = e["target"]["revision"]
        ts = datetime.fromisoformat(e["ts"].replace("Z", "+00:00"))
        s = sums[rev]
        spec = e["spec"]
        s["requests"] += 1
        s["drafted"] += spec["drafted_tokens"]
        s["accepted"] += spec["accepted_tokens"]
        s["steps"] += spec.get("verify_steps") or 0
        for i, n in enumerate(spec.get("accepted_per_position") or []):
            s["pp"][i] += n
        if rev == NEW_REV and (first_new is None or ts < first_new):
            first_new = ts
        if e.get("ttft_ms") is not None:
            ttft[(rev, floor_to(ts, "minute"))].append(e["ttft_ms"])
    return {"sums": dict(sums), "first_new": first_new, "ttft": ttft}


@pytest.fixture
def filled(store: Store, migrated_url: str, traffic: Path) -> Store:
    replay(traffic, migrated_url)
    return store


def _chat(store: Store, **kw: Any) -> RouteReport:
    return gather_report(store, "chat", since=kw.pop("since", T0), until=T_END, **kw)


def test_report_data_from_a_replay(filled: Store, oracle: dict[str, Any]) -> None:
    # one test per database: the replay is the expensive part
    _check_chat(filled, oracle)
    _check_change_points_and_granularity(filled)
    _check_no_data_in_range(filled)


def _check_chat(filled: Store, oracle: dict[str, Any]) -> None:
    report = _chat(filled)
    assert report.granularity == "minute"  # six hours of data: minute buckets
    assert not report.empty and report.first == T0 and report.last == T_END
    assert [p.pair.label for p in report.pairs] == [PAIR]
    view = report.pairs[0]

    # one series per target revision, exactly the raw sums
    assert [s.key.target_revision for s in view.series] == [OLD_REV, NEW_REV]
    for s in view.series:
        want = oracle["sums"][s.key.target_revision]
        assert (s.total_requests, s.drafted_tokens, s.accepted_tokens, s.verify_steps) == (
            want["requests"], want["drafted"], want["accepted"], want["steps"])
        assert s.per_position == want["pp"]
        assert s.survival is not None and s.survival == sorted(s.survival, reverse=True)
        assert sum(s.requests) == s.total_requests and len(s.times) == len(s.acceptance)
    old, new = view.series
    assert new.acceptance_rate / old.acceptance_rate == pytest.approx(0.7, abs=0.05)

    # the revision change is the new series' first minute
    assert len(view.changes) == 1
    change = view.changes[0]
    assert change.at == floor_to(oracle["first_new"], "minute")
    assert change.what == f"target revision {OLD_REV} → {NEW_REV}"

    # latency quantiles of one minute: within the sketch's 1% of the raw order statistic
    minute = T0 + timedelta(hours=1, minutes=30)
    i = old.times.index(minute)
    raw = sorted(oracle["ttft"][(OLD_REV, minute)])
    for q, got in ((0.5, old.ttft_p50[i]), (0.99, old.ttft_p99[i])):
        exact = raw[math.floor(q * (len(raw) - 1))]
        assert got == pytest.approx(exact, rel=0.0101)
    assert all(v is not None and v > 0 for v in old.tps_p50 + old.tps_p25)

    # what the on-call saw: the revision mismatch, still firing at the end of the replay
    [episode] = [e for e in view.episodes if e.rule == "revision_mismatch"]
    assert episode.end is None and episode.state == "firing"
    assert change.at <= episode.start < change.at + timedelta(minutes=2)
    assert episode in report.episodes

    # the detectors' view: the new revision is current, the old one idle; both still pay
    assert view.cutoffs == [0.4]
    current = [s for s in view.segments if not s.idle]
    idle = [s for s in view.segments if s.idle]
    assert {s.labels["target_revision"] for s in current} == {NEW_REV}
    assert {s.labels["target_revision"] for s in idle} == {OLD_REV}
    for seg in current:
        assert seg.recommendation == "on" and seg.source == "replay"
        assert seg.line.startswith("speculation on   chat  llama-3.1-70b-instruct-eagle3")
        assert seg.breakeven["rate"] > seg.cutoff == 0.4
        assert seg.knee is not None and 1 <= seg.knee <= 4
        assert seg.last_event is not None and T_END - seg.last_event < timedelta(minutes=1)
    # Issue 15: the new revision is compared with the one it replaced, so its fall (x 0.7: the
    # draft drifting from the fine-tuned target) is an acceptance_drop naming both revisions;
    # it used to start a fresh baseline and raise nothing.
    [drop] = view.change_points
    assert drop.rule == "acceptance_drop" and drop.labels["target_revision"] == NEW_REV
    assert OLD_REV in drop.summary and NEW_REV in drop.summary
    assert change.at <= drop.decided_at < change.at + timedelta(minutes=15)
    # ... and the report's Changes section judges the change from the rollups: worse.
    [judged] = report.changes
    assert (judged.record.kind, judged.verdict) == ("draft_drift", "worse")
    assert judged.record.changed == {"target_revision": [OLD_REV, NEW_REV]}
    acc = judged.metric("acceptance")
    assert acc.verdict == "worse" and acc.change == pytest.approx(-0.3, abs=0.05)


def _check_change_points_and_granularity(filled: Store) -> None:
    code = gather_report(filled, "code-assistant", since=T0, until=T_END)
    [view] = code.pairs
    [drop] = view.change_points
    shift = T0 + timedelta(hours=4)
    assert drop.rule == "acceptance_drop"
    # the detector's estimate of the start lies at the incident, the decision just after
    assert shift - timedelta(minutes=5) <= drop.at <= drop.decided_at
    assert drop.decided_at - shift < timedelta(minutes=30)
    assert any(e.rule == "acceptance_drop" for e in view.episodes)

    # hour buckets hold the same counts; a range after the change has no change in it
    by_minute = _chat(filled)
    by_hour = _chat(filled, granularity="hour")
    assert by_hour.granularity == "hour"
    assert [(s.key, s.total_requests, s.accepted_tokens) for s in by_hour.pairs[0].series] == [
        (s.key, s.total_requests, s.accepted_tokens) for s in by_minute.pairs[0].series]
    late = _chat(filled, since=T0 + timedelta(hours=4))
    assert [s.key.target_revision for s in late.pairs[0].series] == [NEW_REV]
    assert late.pairs[0].changes == []
    assert late.first == T0 + timedelta(hours=4)


def _check_no_data_in_range(filled: Store) -> None:
    before = gather_report(filled, "chat", since=T0 - timedelta(days=2),
                           until=T0 - timedelta(days=1))
    assert before.empty and before.pairs == []
    assert before.no_data_message().startswith(
        "no telemetry for route 'chat' between 2026-10-31 00:00:00 UTC and "
        "2026-11-01 00:00:00 UTC")
    typo = gather_report(filled, "chatt", since=T0, until=T_END, now=T_END)
    assert typo.empty and "chat" in typo.other_routes and "code-assistant" in typo.other_routes
    assert "routes with telemetry then: 'chat'" in typo.no_data_message()

