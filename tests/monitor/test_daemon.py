"""The daemon against a real broker: exact tables, crashes, bad input, unmigrated stores."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

from monitor.app import Application
from monitor.broker import EmbeddedBroker
from monitor.config import Config, load_config
from monitor.sources.kafka import source_id
from monitor.sources.topics import ensure_topics
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.helpers import oracle, produce, read_jsonl, simulated, table, wait_for
from tests.monitor.telemetry.bad_inputs import bad_input_corpus

PARTITIONS = 4
# Batching per route reorders event time inside a partition by up to a batch's span; with an
# hour of allowance nothing is late, so the oracle need not mirror partitioning.
LATENESS = 3600.0


def daemon_config(tmp_path: Path, broker: EmbeddedBroker, db_url: str) -> Path:
    name = uuid.uuid4().hex[:8]
    path = tmp_path / "specwatch.yaml"
    path.write_text(
        f"kafka:\n"
        f"  bootstrap_servers: '{broker.bootstrap_servers}'\n"
        f"  topic: telemetry-{name}\n"
        f"  dead_letter_topic: dlq-{name}\n"
        f"  group_id: group-{name}\n"
        f"  partitions: {PARTITIONS}\n"
        f"  session_timeout_ms: 6000\n"
        f"  max_poll_interval_ms: 10000\n"
        f"store:\n  url: '{db_url}'\n"
        f"ingest:\n  checkpoint_interval: 250ms\n  checkpoint_max_events: 5000\n"
        f"  allowed_lateness: {LATENESS:.0f}s\n  dedup_horizon: {LATENESS:.0f}s\n"
    )
    return path


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    # Live traffic is recent: the daemon's retention removes minute rows older than 7 days.
    return simulated(tmp_path_factory.mktemp("daemon"), duration="3h", seed=11)


def stored_offsets(store: Store, config: Config) -> int:
    states = store.load_partitions(source_id(config.kafka), range(PARTITIONS))
    return sum(s.next_offset or 0 for s in states.values())


def consume_until_checkpointed(
    config: Config, registry: CollectorRegistry, db_url: str, messages: int
) -> None:
    """Run the daemon in a thread until ``messages`` offsets are stored, then stop it."""
    app = Application(config, registry=registry)
    runner = threading.Thread(target=app.run)
    runner.start()
    try:
        with Store(db_url) as store:
            wait_for(lambda: stored_offsets(store, config) == messages, timeout=120,
                     what=f"{messages} messages checkpointed")
    finally:
        app.stop()
        runner.join(timeout=30)
    assert not runner.is_alive()


@pytest.fixture
def migrated(db_url: str) -> str:
    upgrade(db_url)
    return db_url


def test_daemon_tables_equal_produced_traffic(
    broker: EmbeddedBroker, migrated: str, tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    config = load_config(daemon_config(tmp_path, broker, migrated), env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    half = len(events) // 2
    messages = produce(broker.bootstrap_servers, config.kafka.topic, events[:half], batch=1)
    messages += produce(broker.bootstrap_servers, config.kafka.topic, events[half:], batch=50)
    registry = CollectorRegistry()
    consume_until_checkpointed(config, registry, migrated, messages)
    with Store(migrated) as store:
        assert table(store.ratios(granularity="hour")) == oracle(events, lateness=LATENESS)
    assert registry.get_sample_value("specwatch_events_total") == len(
        {e["request_id"] for e in events}
    )


def _start(config_path: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "monitor", "run", "--config", str(config_path)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


def kill_and_restart(cfg_path: Path, config: Config, store: Store,
                     events: list[dict[str, Any]], rng: random.Random) -> None:
    """Produce in four stretches; kill -9 the daemon at a random point of each of the first
    three; let the fourth daemon finish the backlog and stop it cleanly."""
    ensure_topics(config.kafka.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    bootstrap, topic = config.kafka.bootstrap_servers, config.kafka.topic
    quarter = len(events) // 4 + 1
    chunks = [events[i * quarter:(i + 1) * quarter] for i in range(4)]
    messages = 0
    for kill in range(3):
        messages += produce(bootstrap, topic, chunks[kill], batch=rng.choice([1, 20, 100]))
        daemon = _start(cfg_path)
        before = stored_offsets(store, config)
        # A random point: somewhere between the first checkpoint and the end of the
        # backlog, plus a random extra moment so the kill can land mid-transaction.
        target = before + rng.randint(1, max(1, messages - before - 1))
        wait_for(lambda t=target, d=daemon: stored_offsets(store, config) >= t or d.poll(),
                 timeout=120, what=f"progress to {target} before kill {kill + 1}")
        assert daemon.poll() is None, daemon.stderr.read().decode()[-2000:]
        threading.Event().wait(rng.random() * 0.3)
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        daemon.stderr.close()
    messages += produce(bootstrap, topic, chunks[3], batch=7)
    daemon = _start(cfg_path)
    try:
        wait_for(lambda: stored_offsets(store, config) == messages or daemon.poll(),
                 timeout=240, what=f"all {messages} messages after the restarts")
        assert daemon.poll() is None, daemon.stderr.read().decode()[-2000:]
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
        daemon.stderr.close()


def test_kill_9_three_times_loses_and_doubles_nothing(
    broker: EmbeddedBroker, migrated: str, tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    cfg_path = daemon_config(tmp_path, broker, migrated)
    config = load_config(cfg_path, env={})
    rng = random.Random(os.environ.get("SPECWATCH_TEST_SEED", "kill9"))
    with Store(migrated) as store:
        kill_and_restart(cfg_path, config, store, events, rng)
        for granularity in ("minute", "hour", "day"):
            assert table(store.ratios(granularity=granularity)) == oracle(
                events, lateness=LATENESS, granularity=granularity
            ), granularity


def test_kill_9_alerts_equal_an_uninterrupted_replay(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    from monitor.cli import main

    path = tmp_path / "incidents.jsonl"
    assert main(["simulate", "--scenario", "quiet", "--duration", "6h", "--rate", "6",
                 "--seed", "21", "--incident", "acceptance_shift:route=chat,at=2h,factor=0.8",
                 "--incident", "tokenizer_swap:route=translation,at=3h,for=1h",
                 "--incident", "eviction:route=code-assistant,at=4h,share=0.5,slowdown=3",
                 "--incident", "revision_change:route=creative-writing,at=3h,factor=0.8",
                 "--out", str(path)]) == 0
    events = list(read_jsonl(path))
    live_db, replay_db = (f"sqlite:///{tmp_path / n}" for n in ("live.db", "replay.db"))
    upgrade(live_db)
    cfg_path = daemon_config(tmp_path, broker, live_db)
    # Silence and idle pairs are judged by the wall clock when live: keep them out of the
    # comparison with a replay, which judges them in event time.
    cfg_path.write_text(cfg_path.read_text()
                        + "detection:\n  stale_after: 2d\n  idle_pair_resolve: 2d\n")
    config = load_config(cfg_path, env={})
    with Store(live_db) as store:
        kill_and_restart(cfg_path, config, store, events, random.Random("alerts"))
        live = [a.to_json() for a in store.alerts()]
        live_changes = [c.to_dict() for c in store.changes()]
    assert main(["replay", str(path), "--config", str(cfg_path), "--db", replay_db,
                 "--migrate", "--no-progress"]) == 0
    with Store(replay_db) as store:
        replayed = [a.to_json() for a in store.alerts()]
        replayed_changes = [c.to_dict() for c in store.changes()]
    assert {a["rule"] for a in replayed} >= {"acceptance_drop", "tokenizer_mismatch",
                                             "memory_contention"}
    # the fine-tune on creative-writing, judged against the revision it replaced
    assert any(a["rule"] == "acceptance_drop" and a["details"].get("previous")
               for a in replayed)
    def key(a: dict[str, Any]) -> tuple[str, str, str]:
        return (a["at"], a["fingerprint"], a["state"])

    assert sorted(live, key=key) == sorted(replayed, key=key)
    # the same changes of setup, with the live comparison's state (updated_at: event time)
    assert any(c["route"] == "creative-writing" and c["kind"] == "draft_drift"
               for c in replayed_changes)

    def by_id(c: dict[str, Any]) -> str:
        return str(c["change_id"])

    assert sorted(live_changes, key=by_id) == sorted(replayed_changes, key=by_id)


def _read_topic(bootstrap: str, topic: str, expected: int) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    parts = consumer.partitions_for_topic(topic) or {0}
    consumer.assign([TopicPartition(topic, p) for p in parts])
    out: list[dict[str, Any]] = []

    def more() -> bool:
        for records in consumer.poll(timeout_ms=200).values():
            out.extend(json.loads(r.value) for r in records)
        return len(out) >= expected

    wait_for(more, timeout=60, what=f"{expected} dead-letter records", interval=0)
    consumer.close()
    return out


def test_bad_input_ends_in_the_dead_letter_topic_and_valid_neighbours_count(
    broker: EmbeddedBroker, migrated: str, tmp_path: Path
) -> None:
    from kafka import KafkaProducer

    config = load_config(daemon_config(tmp_path, broker, migrated), env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic, config.kafka.dead_letter_topic],
                  PARTITIONS)
    corpus = bad_input_corpus(config.ingest.max_message_bytes)
    assert len({c.name for c in corpus}) >= 30
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                             max_request_size=32 << 20)
    for case in corpus:
        producer.send(config.kafka.topic, key=b"bad", value=case.message)
    producer.flush()
    producer.close()
    registry = CollectorRegistry()
    consume_until_checkpointed(config, registry, migrated, len(corpus))
    invalid = sum(c.invalid for c in corpus)
    dead = _read_topic(broker.bootstrap_servers, config.kafka.dead_letter_topic, invalid)
    assert len(dead) == invalid
    assert registry.get_sample_value("specwatch_invalid_events_total") == invalid
    assert all(r["reason"] and "offset" in r["origin"] for r in dead)
    big = [r for r in dead if r["raw_bytes"] > config.kafka.dead_letter_max_bytes]
    assert big and all(r["truncated"] and len(r["raw_sha256"]) == 64 for r in big)
    with Store(migrated) as store:
        counted = sum(r.requests for r in store.ratios(granularity="day"))
    assert counted == sum(c.valid_events for c in corpus)


def test_run_refuses_an_unmigrated_database(broker: EmbeddedBroker, db_url: str,
                                            tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "run", "--config",
         str(daemon_config(tmp_path, broker, db_url))],
        capture_output=True, timeout=60,
    )
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert "not migrated" in err and "specwatch db upgrade" in err
