"""Alerting inside the pipeline: replay pages no one unless asked, ``replay --deliver`` sends
through the configured sinks, an accepted baseline resolves at once, silences from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from alerts.alerting import Alerting
from monitor.cli import main
from monitor.config import load_config
from monitor.deadletter import CountingDeadLetter
from monitor.detect.engine import Detection
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.sources.replay import replay
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.alerts.receivers import PagerDutyReceiver, WebhookReceiver

PD_KEY = "0123456789abcdef0123456789ABCDEF"


@pytest.fixture(scope="module")
def incidents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("alerting") / "incidents.jsonl"
    # A fixed start: the traffic follows a daily cycle, so "now" would change what is drawn.
    assert main(["simulate", "--scenario", "quiet", "--duration", "5h", "--rate", "4",
                 "--seed", "5", "--start", "2026-11-02T14:00:00Z",
                 "--incident", "tokenizer_swap:route=translation,at=1h,for=1h",
                 "--incident", "acceptance_shift:route=chat,at=2h,factor=0.75",
                 "--out", str(path)]) == 0
    return path


def _config(tmp_path: Path) -> Path:
    cfg = tmp_path / "specwatch.yaml"
    cfg.write_text("detection:\n  stale_after: 2d\n  idle_pair_resolve: 2d\n"
                   "alerting:\n  delivery:\n    backoff_initial: 100ms\n    backoff_max: 200ms\n")
    return cfg


def test_replay_without_deliver_pages_no_one(incidents: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    with WebhookReceiver() as hook:
        monkeypatch.setenv("SPECWATCH_WEBHOOK_URL", hook.url)
        assert main(["replay", str(incidents), "--db", db, "--migrate", "--no-progress",
                     "--config", str(_config(tmp_path))]) == 0
        assert hook.requests == []
    with Store(db) as store:
        assert store.alerting.outbox() == []
        episodes = store.alerting.episodes()
    assert {e["rule"] for e in episodes} >= {"tokenizer_mismatch", "acceptance_drop"}


def test_replay_deliver_sends_every_transition(incidents: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'd.db'}"
    with WebhookReceiver() as hook, PagerDutyReceiver() as pd:
        monkeypatch.setenv("SPECWATCH_WEBHOOK_URL", hook.url + "/specwatch")
        monkeypatch.setenv("SPECWATCH_PAGERDUTY_ROUTING_KEY", PD_KEY)
        monkeypatch.setenv("SPECWATCH_PAGERDUTY_URL", pd.url)
        hook.respond(500, times=2)  # a hiccup: retried, not lost
        assert main(["replay", str(incidents), "--db", db, "--migrate", "--no-progress",
                     "--deliver", "--alerts-out", str(tmp_path / "alerts.jsonl"),
                     "--config", str(_config(tmp_path))]) == 0
        assert hook.violations == [] and pd.violations == []
        records = list(hook.records)
    assert "0 notification(s) still queued" in capsys.readouterr().err
    with Store(db) as store:
        rows = store.alerting.outbox()
        episodes = [e for e in store.alerting.episodes() if e["notified"]]
    assert rows and {r.state for r in rows} == {"delivered"}
    # Every announced episode reached the webhook firing, every ended one resolved, in order.
    for e in episodes:
        mine = [r for r in records if r["fingerprint"] == e["fingerprint"]
                and r["at"] >= e["started_at"].isoformat().replace("+00:00", "Z")[:19]]
        states = [r["state"] for r in mine]
        assert states and states[0] == "firing", e
        assert ("resolved" in states) == (e["state"] == "resolved"), e
    decided = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert {r["fingerprint"] for r in records} <= {r["fingerprint"] for r in decided}
    assert {i.dedup_key for i in pd.incidents} == {
        f"specwatch/{e['episode']}" for e in episodes if e["rule"] != "revision_mismatch"}


def _pipeline(store: Store, db: str, cfg: Path) -> tuple[Pipeline, Detection, Alerting]:
    config = load_config(cfg, env={})
    detection = Detection(config.detection, clock="event")
    alerting = Alerting(config.alerting, ["log"])
    pipeline = Pipeline(store, "replay", config.ingest, IngestMetrics(CollectorRegistry()),
                        CountingDeadLetter(), observer=detection, alerting=alerting,
                        holder="test:1")
    return pipeline, detection, alerting


def test_baseline_accept_resolves_at_once_and_starts_a_new_baseline(
    incidents: Path, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'b.db'}"
    upgrade(db)
    with Store(db) as store:
        pipeline, detection, _ = _pipeline(store, db, _config(tmp_path))
        replay(str(incidents), pipeline, progress=False)
        # chat's own drop; the tokenizer swap on translation is a change judged against the
        # draft it replaced, and may fire there too (issue 15)
        drops = [a for a in store.alerts(route="chat") if a.rule == "acceptance_drop"]
        assert [a.state for a in drops] == ["firing"]
        rid = store.alerting.request_baseline("chat", "fine-tuned target, expected", "alice",
                                              drops[0].at)
        assert not pipeline.accept_baseline(rid, "no-such-route")
        assert pipeline.accept_baseline(rid, "chat")
        assert pipeline.checkpoint()
        resolved = [a for a in store.alerts(route="chat") if a.state == "resolved"]
        assert {a.rule for a in resolved} >= {"acceptance_drop"}
        assert all(a.details["reason_resolved"] == "baseline accepted" for a in resolved)
        (req,) = store.alerting.baseline_requests()
        assert req.applied_by == "test:1" and req.applied_at is not None
        # The announced drop is resolved without waiting for the hold.
        (episode,) = [e for e in store.alerting.episodes(route="chat")
                      if e["rule"] == "acceptance_drop"]
        assert episode["state"] == "resolved"
        # A fresh detector: no baseline until new traffic builds one.
        segs = [s for s in detection._segments.values() if s.labels["route"] == "chat"]
        assert segs and all(s.acceptance.baseline is None for s in segs)


def _run(*argv: str) -> tuple[int, str]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_silence_cli_add_list_expire(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(db)
    code, out = _run("silence", "add", "--route", "batch-*", "--for", "2h", "--reason",
                     "load test <&>", "--by", "alice", "--db", db)
    assert code == 0 and out.startswith("silence 1: route batch-* rule * until ")
    code, out = _run("silence", "add", "--route", "code", "--rule", "below_breakeven",
                     "--for", "30m", "--reason", "known", "--db", db)
    assert code == 0
    code, out = _run("silence", "list", "--db", db)
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["id", "route", "rule", "starts", "ends", "state"]
    assert [ln.split()[:3] for ln in lines[1:]] == [["2", "code", "below_breakeven"],
                                                    ["1", "batch-*", "*"]]
    assert _run("silence", "expire", "2", "--db", db)[0] == 0
    code, out = _run("silence", "list", "--db", db, "--format", "json")
    (only,) = [json.loads(line) for line in out.splitlines()]
    assert only["id"] == 1 and only["reason"] == "load test <&>"
    assert main(["silence", "expire", "2", "--db", db]) == 2
    assert "no silence 2 in force" in capsys.readouterr().err
    assert main(["silence", "add", "--route", "x", "--rule", "nope", "--for", "1h",
                 "--reason", "r", "--db", db]) == 2
    assert "unknown rule 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["silence", "add", "--route", "x", "--for", "0s", "--reason", "r", "--db", db])


def test_baseline_and_alerts_cli(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    upgrade(db)
    code, out = _run("baseline", "accept", "--route", "chat", "--reason", "r3 rollout",
                     "--by", "bob", "--db", db)
    assert code == 0 and "baseline request 1 for route chat" in out
    code, out = _run("baseline", "list", "--db", db)
    assert "pending" in out and "r3 rollout" in out
    code, out = _run("alerts", "--db", db)
    assert code == 0 and out.split() == ["route", "rule", "severity", "state", "started",
                                         "resolved", "notified", "summary"]


def test_replay_deliver_pages_draft_drift_and_announces_the_revision_as_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 15: a target fine-tune the draft did not follow is a PagerDuty trigger (it
    pages), naming both revisions; the revision itself stays a change event (it does not)."""
    path = tmp_path / "drift.jsonl"
    assert main(["simulate", "--scenario", "quiet", "--duration", "4h", "--rate", "4",
                 "--seed", "15", "--start", "2026-11-02T00:00:00Z",
                 "--incident", "revision_change:route=chat,at=2h,factor=0.85",
                 "--out", str(path)]) == 0
    db = f"sqlite:///{tmp_path / 'p.db'}"
    with PagerDutyReceiver() as pd:
        monkeypatch.setenv("SPECWATCH_PAGERDUTY_ROUTING_KEY", PD_KEY)
        monkeypatch.setenv("SPECWATCH_PAGERDUTY_URL", pd.url)
        assert main(["replay", str(path), "--db", db, "--migrate", "--no-progress",
                     "--deliver", "--config", str(_config(tmp_path))]) == 0
        assert pd.violations == []
        incidents, changes = list(pd.incidents), list(pd.change_events)
    [drift] = [i for i in incidents if "draft drift" in i.summary]
    assert drift.summary.startswith("chat: acceptance ") and drift.severity == "warning"
    assert not drift.resolved
    assert any(c["payload"]["summary"].startswith("chat: target revision") for c in changes)
