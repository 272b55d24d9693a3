"""The daemon and the wall clock: future-dated events refused without silencing their
partition, and an old backlog with a firing alert catches up without a reminder storm."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from prometheus_client import CollectorRegistry

from monitor.app import Application
from monitor.broker import EmbeddedBroker
from monitor.cli import main
from monitor.config import load_config
from monitor.sources.topics import ensure_topics
from monitor.store.store import Store
from monitor.telemetry.serialize import format_ts
from tests.alerts.receivers import WebhookReceiver
from tests.helpers import _ts, assert_exact, produce, read_jsonl, simulated, wait_for
from tests.monitor.test_daemon import (
    LATENESS,
    PARTITIONS,
    _read_topic,
    consume_until_checkpointed,
    daemon_config,
)

DAY = 86400.0


def test_future_events_are_refused_and_their_partition_goes_on_counting(
    broker: EmbeddedBroker, migrated_url: str, tmp_path: Path
) -> None:
    config = load_config(daemon_config(tmp_path, broker, migrated_url), env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic, config.kafka.dead_letter_topic],
                  PARTITIONS)
    events = simulated(tmp_path, duration="20m", seed=31)  # recent: it ends now
    first, later = events[: len(events) // 2], events[len(events) // 2:]
    # Ahead of the wall clock by 2 days and 70 years, on a route with traffic after them.
    route = first[200]["route"]
    ahead = [{**first[200], "request_id": f"future-{name}",
              "ts": format_ts(time.time() + seconds)}
             for name, seconds in (("2d", 2 * DAY), ("70y", 70 * 365 * DAY))]
    poisoned = [*first[:201], ahead[0], *first[201:400], ahead[1], *first[400:]]
    assert sum(e["route"] == route for e in first[401:]) > 50
    registry = CollectorRegistry()
    messages = produce(broker.bootstrap_servers, config.kafka.topic, poisoned)
    consume_until_checkpointed(config, registry, migrated_url, messages)
    with Store(migrated_url) as store:
        assert_exact(store, first, lateness=LATENESS)
    assert registry.get_sample_value("specwatch_future_events_total") == 2
    assert registry.get_sample_value("specwatch_late_events_total") == 0
    dead = _read_topic(broker.bootstrap_servers, config.kafka.dead_letter_topic, 2)
    assert sorted(r["origin"]["key"] for r in dead) == [route, route]
    assert all(r["reason"].startswith("future: ") and "wall clock" in r["reason"]
               for r in dead)
    # A restarted daemon reads the rest into the same database: all of it counts.
    messages += produce(broker.bootstrap_servers, config.kafka.topic, later)
    registry = CollectorRegistry()
    consume_until_checkpointed(config, registry, migrated_url, messages)
    with Store(migrated_url) as store:
        assert_exact(store, events, lateness=LATENESS)
    assert registry.get_sample_value("specwatch_late_events_total") == 0


def test_a_month_old_backlog_sends_at_most_one_reminder_per_episode(
    broker: EmbeddedBroker, migrated_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "backlog.jsonl"
    start = (time.time() - 30 * DAY) // 3600 * 3600
    # Two hours of traffic a month old; the translation route's draft changes tokenizer at
    # 10 min and stays changed: tokenizer_mismatch fires and never clears.
    assert main(["simulate", "--scenario", "quiet", "--duration", "2h", "--rate", "1",
                 "--seed", "5", "--incident", "tokenizer_swap:route=translation,at=10m",
                 "--start", format_ts(start), "--out", str(path)]) == 0
    events = list(read_jsonl(path))
    assert _ts(events[-1]["ts"]) < time.time() - 29 * DAY
    cfg = daemon_config(tmp_path, broker, migrated_url)
    # Reminders every hour: one-per-interval catch-up would be ~720 for the month.
    cfg.write_text(cfg.read_text()
                   + "alerting:\n  lifecycle:\n    repeat_interval: 1h\n    group_wait: 1s\n"
                   "    group_interval: 1s\n  delivery:\n    poll_interval: 100ms\n"
                   "jobs:\n  staleness_every: 500ms\n")
    config = load_config(cfg, env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    produce(broker.bootstrap_servers, config.kafka.topic, events)
    with WebhookReceiver() as hook:
        app = Application(config, registry=CollectorRegistry(),
                          env={"SPECWATCH_WEBHOOK_URL": hook.url})
        runner = threading.Thread(target=app.run)
        runner.start()
        try:
            with Store(migrated_url) as store:
                # Caught up, the clock jumped to the wall clock (the silence of a month is
                # news now), and every notification decided by then went out.
                wait_for(lambda: _kinds(hook, "telemetry_stale")["trigger"] >= 1, timeout=120,
                         what="telemetry_stale announced after the backlog")
                wait_for(lambda: all(r.state == "delivered" for r in store.alerting.outbox()),
                         timeout=60, what="the outbox delivered")
        finally:
            app.stop()
            runner.join(timeout=30)
        assert not runner.is_alive()
        assert hook.violations == []
        deliveries = list(hook.deliveries)
    assert _kinds(hook, "tokenizer_mismatch")["trigger"] == 1
    reminders = Counter(episode for _, kind, episode, _ in deliveries if kind == "reminder")
    assert all(n <= 1 for n in reminders.values()), reminders
    triggers = {episode for _, kind, episode, _ in deliveries if kind == "trigger"}
    assert len(triggers) >= 2 and set(reminders) <= triggers


def _kinds(hook: WebhookReceiver, rule: str) -> Counter[str]:
    return Counter(kind for _, kind, _, record in list(hook.deliveries)
                   if record.get("rule") == rule)


def test_events_up_to_ten_minutes_late_all_count_in_the_tables(
    broker: EmbeddedBroker, migrated_url: str, tmp_path: Path
) -> None:
    # Default ingest settings: the detectors' allowance (2 min) is not the tables' (the
    # dedup horizon, 15 min).
    path = daemon_config(tmp_path, broker, migrated_url)
    path.write_text("\n".join(line for line in path.read_text().splitlines()
                              if "allowed_lateness" not in line
                              and "dedup_horizon" not in line) + "\n")
    config = load_config(path, env={})
    assert (config.ingest.allowed_lateness, config.ingest.dedup_horizon) == (120.0, 900.0)
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic, config.kafka.dead_letter_topic],
                  PARTITIONS)
    out = tmp_path / "late.jsonl"
    assert main(["simulate", "--duration", "40m", "--rate", "3", "--seed", "17",
                 "--duplicates", "0.02", "--late", "0.05", "--late-max", "10m",
                 "--out", str(out)]) == 0
    events = list(read_jsonl(out))
    registry = CollectorRegistry()
    messages = produce(broker.bootstrap_servers, config.kafka.topic, events)
    consume_until_checkpointed(config, registry, migrated_url, messages)
    with Store(migrated_url) as store:
        assert_exact(store, events, lateness=float("inf"))  # every event, exactly once
    assert registry.get_sample_value("specwatch_late_events_total") == 0
    assert registry.get_sample_value("specwatch_late_counted_events_total") > 20
