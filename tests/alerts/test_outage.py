"""The daemon pages through an outage and three kill -9s: nothing lost, nothing doubled.

Slack and PagerDuty are local receivers that check the documented formats. They answer 500
for a stretch covering several alert transitions, during which the daemon is killed with
``kill -9`` three times at random points; then they recover and the fourth daemon runs.
Afterwards every transition has arrived, PagerDuty's dedup rules leave exactly one incident
per episode, and every resolve came after its trigger.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from monitor.broker import EmbeddedBroker
from monitor.config import load_config
from monitor.sources.topics import ensure_topics
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.alerts.receivers import PagerDutyReceiver, SlackReceiver
from tests.helpers import produce, read_jsonl, wait_for
from tests.monitor.test_daemon import PARTITIONS, daemon_config, stored_offsets

PD_KEY = "0123456789abcdef0123456789ABCDEF"


def _start(cfg: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "monitor", "run", "--config", str(cfg)],
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def _traffic(tmp_path: Path) -> list[dict[str, Any]]:
    from monitor.cli import main

    path = tmp_path / "incidents.jsonl"
    assert main(["simulate", "--scenario", "quiet", "--duration", "6h", "--rate", "4",
                 "--seed", "33",
                 "--incident", "tokenizer_swap:route=translation,at=1h,for=50m",
                 "--incident", "eviction:route=code-assistant,at=2h,for=1h,share=0.5,slowdown=3",
                 "--incident", "revision_change:route=chat,at=3h,factor=0.7",
                 "--incident", "tokenizer_swap:route=creative-writing,at=4h,for=40m",
                 "--out", str(path)]) == 0
    return list(read_jsonl(path))


def test_outage_and_restarts_deliver_every_transition_once(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    events = _traffic(tmp_path)
    db = f"sqlite:///{tmp_path / 'live.db'}"
    upgrade(db)
    cfg = daemon_config(tmp_path, broker, db)
    # Silence is judged by the wall clock live; this traffic is history. Retries are kept
    # short so the recovered receivers are reached quickly.
    cfg.write_text(cfg.read_text()
                   + "detection:\n  stale_after: 2d\n  idle_pair_resolve: 2d\n"
                   + "alerting:\n  lifecycle:\n    group_interval: 1s\n"
                   + "  delivery:\n    backoff_initial: 200ms\n"
                   + "    backoff_max: 1s\n    poll_interval: 200ms\n")
    config = load_config(cfg, env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    rng = random.Random(os.environ.get("SPECWATCH_TEST_SEED", "outage"))

    with SlackReceiver() as slack, PagerDutyReceiver() as pd, Store(db) as store:
        env = {"SPECWATCH_SLACK_WEBHOOK_URL": slack.webhook_url,
               "SPECWATCH_PAGERDUTY_ROUTING_KEY": PD_KEY, "SPECWATCH_PAGERDUTY_URL": pd.url}
        slack.respond(500, body=b"rollup_error", times=100_000)  # the outage
        pd.respond(503, times=100_000)
        quarter = len(events) // 4 + 1
        chunks = [events[i * quarter:(i + 1) * quarter] for i in range(4)]
        messages = 0
        for kill in range(3):
            sent = produce(broker.bootstrap_servers, config.kafka.topic, chunks[kill],
                           batch=rng.choice([1, 20, 100]))
            messages += sent
            daemon = _start(cfg, env)
            target = stored_offsets(store, config) + rng.randint(1, sent)
            wait_for(lambda t=target, d=daemon: stored_offsets(store, config) >= t or d.poll(),
                     timeout=120, what=f"progress before kill {kill + 1}")
            if kill == 1:
                # Once in the middle: let the worker hit the outage before the kill.
                wait_for(lambda d=daemon: any(r.attempts for r in store.alerting.outbox())
                         or d.poll(), timeout=60, what="a refused delivery")
            assert daemon.poll() is None, daemon.stderr.read().decode()[-2000:]
            threading.Event().wait(rng.random() * 0.5)
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
            daemon.stderr.close()
        queued = store.alerting.outbox(state="pending")
        # The outage covered transitions: rows were decided and refused while it lasted.
        assert len(queued) >= 3 and any(r.attempts > 0 for r in queued)
        refused = len(slack.requests) + len(pd.requests)
        assert refused > 0 and not slack.messages and not pd.incidents

        slack.clear()
        pd.clear()
        messages += produce(broker.bootstrap_servers, config.kafka.topic, chunks[3], batch=7)
        daemon = _start(cfg, env)
        try:
            wait_for(lambda: stored_offsets(store, config) == messages or daemon.poll(),
                     timeout=240, what=f"all {messages} messages")

            def settled() -> bool:
                # Every episode that ended has had its resolve decided and delivered.
                ended = [e for e in store.alerting.episodes()
                         if e["notified"] and e["state"] == "resolved"
                         and e["rule"] != "revision_mismatch"]
                closed = {i.dedup_key for i in pd.incidents if i.resolved}
                return (not store.alerting.outbox(state="pending")
                        and all(f"specwatch/{e['episode']}" in closed for e in ended))

            wait_for(lambda: settled() or daemon.poll(), timeout=120,
                     what="every decided notification delivered")
            assert daemon.poll() is None, daemon.stderr.read().decode()[-2000:]
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=60) == 0
            daemon.stderr.close()

        rows = store.alerting.outbox()
        every = store.alerting.episodes()
        alerts = [(a.rule, a.state, a.labels["route"], a.at.isoformat()) for a in store.alerts()]
        episodes = [e for e in every if e["notified"]]

    assert slack.violations == [] and pd.violations == []
    assert {r.state for r in rows} == {"delivered"}
    # Slack: one message per notification, each exactly once after the outage.
    assert len(slack.messages) == sum(1 for r in rows if r.sink == "slack")
    assert len(slack.messages) == len({r.key for r in rows if r.sink == "slack"})

    # PagerDuty: one incident per episode, resolved exactly when the episode is, the
    # resolve after the trigger; revision changes as change events only.
    paged = [e for e in episodes if e["rule"] != "revision_mismatch"]
    assert {e["rule"] for e in paged} >= {"tokenizer_mismatch", "memory_contention"}, (
        [(e["rule"], e["route"], e["state"], e["notified"]) for e in every], alerts)
    by_key = {}
    for inc in pd.incidents:
        assert inc.dedup_key not in by_key, f"second incident for {inc.dedup_key}"
        by_key[inc.dedup_key] = inc
    assert set(by_key) == {f"specwatch/{e['episode']}" for e in paged}
    for e in paged:
        inc = by_key[f"specwatch/{e['episode']}"]
        assert inc.resolved == (e["state"] == "resolved"), e
        actions = [ev["event_action"] for ev in inc.events]
        assert actions[0] == "trigger" and actions.count("resolve") == int(inc.resolved)
        if inc.resolved:
            assert actions[-1] == "resolve"
    assert any(e["state"] == "resolved" for e in paged)
    assert pd.dropped == []  # no resolve ever arrived for an unknown or closed incident
    changes = [e for e in episodes if e["rule"] == "revision_mismatch"]
    assert changes and len(pd.change_events) == len(changes)
