"""Kafka client errors where they happen: retriable ones are survived with nothing lost or
counted twice; configuration ones stop the daemon with one line; and no unexpected error ends
the poll loop silently (tests/monitor/test_broker_faults.py has the real outages)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)
from kafka.future import Future
from prometheus_client import CollectorRegistry

import monitor.app
from monitor.app import Application
from monitor.broker import EmbeddedBroker
from monitor.config import Config, IngestConfig, KafkaConfig, load_config
from monitor.deadletter import CountingDeadLetter, DeadLetterUnavailableError, KafkaDeadLetter
from monitor.exceptions import LoopFailedError
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.sources.exceptions import BrokerConfigError
from monitor.sources.kafka import KafkaSource, source_id
from monitor.sources.topics import ensure_topics
from monitor.store.db import upgrade
from monitor.store.store import Store
from monitor.telemetry.event import Rejection
from tests.helpers import assert_exact, produce, simulated, wait_for
from tests.monitor.test_daemon import LATENESS, PARTITIONS, daemon_config, stored_offsets


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return simulated(tmp_path_factory.mktemp("brokererrors"), duration="20m", seed=63)


class FlakyConsumer:
    """A real consumer whose ``poll()`` raises ``KafkaConnectionError`` every third call, as
    kafka-python's coordinator lookup does when connections are reset; every other time
    after it took a batch of records (their positions moved past them: they are lost to the
    caller unless it seeks back)."""

    def __init__(self, **settings: Any) -> None:
        self.inner = KafkaConsumer(**settings)
        self.calls = 0
        self.raised = 0
        self.records_lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def poll(self, timeout_ms: int = 0) -> Any:
        self.calls += 1
        if self.calls % 3:
            return self.inner.poll(timeout_ms=timeout_ms)
        self.raised += 1
        if self.raised % 2:
            batch = self.inner.poll(timeout_ms=timeout_ms)
            self.records_lost += sum(len(records) for records in batch.values())
        raise KafkaConnectionError("injected: connection reset during the coordinator lookup")


def _pipeline(store: Store, config: KafkaConfig, registry: CollectorRegistry) -> Pipeline:
    ingest = IngestConfig(allowed_lateness=LATENESS, dedup_horizon=LATENESS,
                          checkpoint_interval=0.2)
    return Pipeline(store, source_id(config), ingest, IngestMetrics(registry),
                    CountingDeadLetter())


def _kafka(broker: EmbeddedBroker) -> KafkaConfig:
    name = uuid.uuid4().hex[:8]
    return KafkaConfig(bootstrap_servers=broker.bootstrap_servers, topic=f"t-{name}",
                       group_id=f"g-{name}", partitions=2, session_timeout_ms=6000,
                       max_poll_records=50)


def test_client_errors_escaping_poll_lose_and_double_nothing(
    broker: EmbeddedBroker, tmp_path: Path, traffic: list[dict[str, Any]]
) -> None:
    config = _kafka(broker)
    ensure_topics(config.bootstrap_servers, [config.topic], config.partitions)
    messages = produce(config.bootstrap_servers, config.topic, traffic, batch=2)
    db = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(db)
    registry = CollectorRegistry()
    consumers: list[FlakyConsumer] = []

    def factory(**settings: Any) -> FlakyConsumer:
        consumers.append(FlakyConsumer(**settings))
        return consumers[-1]

    with Store(db) as store:
        source = KafkaSource(config, _pipeline(store, config, registry),
                             consumer_factory=factory, retry_backoff=(0.01, 0.05))
        flaky = consumers[0]
        try:
            deadline = time.monotonic() + 120
            stored = 0
            while stored < messages:
                assert time.monotonic() < deadline, f"{stored} of {messages} stored"
                raised = flaky.raised
                source.poll_once(timeout_ms=200)
                if flaky.raised > raised:  # down until a poll goes through again
                    assert not source.broker_up()
                states = store.load_partitions(source.pipeline.source, range(2))
                stored = sum(s.next_offset or 0 for s in states.values())
        finally:
            source.close()
        assert flaky.records_lost > 0  # the resync was needed, not only harmless
        assert registry.get_sample_value("specwatch_broker_errors_total") == flaky.raised
        assert_exact(store, traffic, lateness=LATENESS)


class _Consumer:
    """Just enough of a consumer for a source whose every poll fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def subscribe(self, topics: list[str], listener: Any) -> None:
        return None

    def poll(self, timeout_ms: int = 0) -> Any:
        raise self.error

    def assignment(self) -> set[Any]:
        return set()

    def close(self) -> None:
        return None


@pytest.mark.parametrize("error", [
    TopicAuthorizationFailedError({"telemetry"}), GroupAuthorizationFailedError("specwatch"),
], ids=["topic", "group"])
def test_an_authorization_error_stops_the_source_with_one_line(
    error: Exception, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(db)
    config = KafkaConfig(bootstrap_servers="127.0.0.1:1")
    with Store(db) as store:
        source = KafkaSource(config, _pipeline(store, config, CollectorRegistry()),
                             consumer_factory=lambda **_: _Consumer(error))
        with pytest.raises(BrokerConfigError) as raised:
            source.poll_once()
    message = str(raised.value)
    assert type(error).__name__ in message and config.topic in message
    assert "\n" not in message


class _Producer:
    """A producer whose sends fail at once (``refuse``) or whose futures fail (``fail``)."""

    def __init__(self, refuse: Exception | None = None, fail: Exception | None = None) -> None:
        self.refuse, self.fail = refuse, fail

    def send(self, topic: str, key: bytes | None, value: bytes) -> Future:
        if self.refuse is not None:
            raise self.refuse
        future = Future()
        return future.failure(self.fail) if self.fail is not None else future.success(None)

    def flush(self, timeout: float | None = None) -> None:
        return None


@pytest.mark.parametrize("producer, expected", [
    (_Producer(refuse=TopicAuthorizationFailedError({"dlq"})), BrokerConfigError),
    (_Producer(fail=TopicAuthorizationFailedError({"dlq"})), BrokerConfigError),
    (_Producer(refuse=KafkaTimeoutError("no metadata in 10s")), DeadLetterUnavailableError),
    (_Producer(fail=KafkaConnectionError("reset")), DeadLetterUnavailableError),
], ids=["send-unauthorized", "delivery-unauthorized", "send-timeout", "delivery-reset"])
def test_the_dead_letter_topic_stops_the_daemon_only_when_waiting_cannot_help(
    producer: _Producer, expected: type[Exception]
) -> None:
    dead = KafkaDeadLetter(producer, "dlq", 1024)
    with pytest.raises(expected, match="dlq"):
        dead.send(Rejection("bad", b"x"), {"offset": 1})
        dead.flush()


def test_a_missing_topic_that_may_not_be_created_stops_run_with_one_line(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(db)
    cfg = daemon_config(tmp_path, broker, db)
    cfg.write_text(cfg.read_text().replace("kafka:\n", "kafka:\n  create_topics: false\n"))
    topic = load_config(cfg, env={}).kafka.topic
    with pytest.raises(BrokerConfigError, match=f"topic {topic}.*create_topics"):
        ensure_topics(broker.bootstrap_servers, [topic], create=False)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "monitor", "run", "--config", str(cfg)],
                          capture_output=True, timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"specwatch: Kafka at {broker.bootstrap_servers}: topic {topic}")
    assert time.monotonic() - started < 10


# -- the poll loop ---------------------------------------------------------------------------


def _app(broker: EmbeddedBroker, tmp_path: Path, events: list[dict[str, Any]]
         ) -> tuple[Config, str, int]:
    db = f"sqlite:///{tmp_path / 's.db'}"
    upgrade(db)
    config = load_config(daemon_config(tmp_path, broker, db), env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    return config, db, produce(broker.bootstrap_servers, config.kafka.topic, events, batch=5)


def test_an_unexpected_error_is_logged_counted_and_the_loop_goes_on_from_the_store(
    broker: EmbeddedBroker, tmp_path: Path, traffic: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(monitor.app, "LOOP_BACKOFF_S", (0.05, 0.1))
    config, db, messages = _app(broker, tmp_path, traffic)
    registry = CollectorRegistry()
    app = Application(config, registry=registry, env={})
    process_many = app.pipeline.process_many
    calls = 0  # messages handed to the pipeline, the failed batch's included
    failed_once = False

    def process_failing_once(partition: int, offsets: list[int], *args: Any) -> Any:
        nonlocal calls, failed_once
        calls += len(offsets)
        if not failed_once and calls >= messages // 2:  # mid-stream, with uncommitted work
            failed_once = True
            raise RuntimeError("injected: a bug met by one batch of messages")
        return process_many(partition, offsets, *args)

    # the Kafka source hands the pipeline a partition's records at a time
    monkeypatch.setattr(app.pipeline, "process_many", process_failing_once)
    runner = threading.Thread(target=app.run, name="daemon")
    with caplog.at_level(logging.ERROR, logger="monitor.app"):
        runner.start()
        try:
            with Store(db) as store:
                wait_for(lambda: runner.is_alive() and stored_offsets(store, config) == messages,
                         timeout=120, what=f"all {messages} messages checkpointed")
        finally:
            app.stop()
            runner.join(timeout=60)
    assert not runner.is_alive()
    assert calls > messages // 2
    assert registry.get_sample_value("specwatch_loop_errors_total") == 1
    failed = [r for r in caplog.records if "poll loop failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "injected: a bug" in caplog.text
    with Store(db) as store:
        assert_exact(store, traffic, lateness=LATENESS)


def test_a_loop_that_keeps_failing_exits_loudly_for_a_supervisor(
    broker: EmbeddedBroker, tmp_path: Path, traffic: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(monitor.app, "LOOP_BACKOFF_S", (0.01, 0.02))
    config, db, _ = _app(broker, tmp_path, traffic[:200])
    registry = CollectorRegistry()
    app = Application(config, registry=registry, env={})

    def broken(*args: Any) -> Any:
        raise RuntimeError("injected: a bug met by every message")

    monkeypatch.setattr(app.pipeline, "process_many", broken)
    with caplog.at_level(logging.CRITICAL, logger="monitor.app"), \
            pytest.raises(LoopFailedError, match="failed 6 times in a row"):
        app.run()
    assert registry.get_sample_value("specwatch_loop_errors_total") == 6
    assert any(r.levelno == logging.CRITICAL and r.exc_info for r in caplog.records)
    with Store(db) as store:
        assert stored_offsets(store, config) == 0
