"""The telemetry publisher against the real broker (and against a closed port)."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import defaultdict
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from monitor.broker import EmbeddedBroker, free_port
from monitor.publish import Publisher
from monitor.telemetry.parse import Parser
from tests.monitor.proxy.conftest import read_records

pytestmark = pytest.mark.broker

ROUTES = ("code-assistant", "creative-writing", "chat")


def event(i: int, route: str = "chat", **extra: Any) -> dict[str, Any]:
    return {
        "request_id": f"r-{i:06d}", "ts": 1793628187.0 + i, "route": route,
        "target": {"model": "m", "revision": "1", "tokenizer": "t"},
        "draft": {"model": "d", "revision": "1", "tokenizer": "t"},
        "spec": {"num_speculative_tokens": 3, "drafted_tokens": 12, "accepted_tokens": 9},
        "output_tokens": 20, "e2e_ms": 120.5, **extra,
    }


def topic() -> str:
    return f"publish-{uuid.uuid4().hex[:10]}"


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_events_arrive_batched_and_keyed_by_route(broker: Any) -> None:
    name, registry = topic(), CollectorRegistry()
    pub = Publisher(broker.bootstrap_servers, name, registry=registry)
    events = [event(i, ROUTES[i % 3]) for i in range(300)]

    def produce(part: list[dict[str, Any]]) -> None:
        for e in part:
            assert pub.publish(e)

    threads = [threading.Thread(target=produce, args=(events[i::3],)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pub.flush(30.0)
    assert (pub.sent, pub.dropped, pub.buffered) == (300, 0, 0)
    records = read_records(broker.bootstrap_servers, name, 300)
    pub.close()

    received = [e for r in records for e in r.events]
    assert sorted(e["request_id"] for e in received) == sorted(e["request_id"] for e in events)
    assert len(records) < 300 / 5  # batched
    partitions: dict[str, set[int]] = defaultdict(set)
    for r in records:
        assert {e["route"] for e in r.events} == {r.key.decode()}
        partitions[r.key.decode()].add(r.partition)
    assert all(len(p) == 1 for p in partitions.values()), partitions
    assert set(partitions) == set(ROUTES)
    assert sample(registry, "specwatch_publisher_sent_total") == 300
    assert sample(registry, "specwatch_publisher_messages_total") == len(records)
    assert sample(registry, "specwatch_publisher_buffered_events") == 0
    parsed, rejected = Parser().parse(b"\n".join(orjson.dumps(r.events) for r in records))
    assert rejected == [] and len(parsed) == 300


def test_batches_stay_within_count_and_size(broker: Any) -> None:
    name = topic()
    pub = Publisher(broker.bootstrap_servers, name, batch_max_events=10, batch_max_bytes=2000)
    size = len(orjson.dumps(event(0)))
    for i in range(35):
        assert pub.publish(event(i))
    assert pub.flush(30.0)
    records = read_records(broker.bootstrap_servers, name, 35)
    pub.close()
    assert sum(len(r.events) for r in records) == 35
    assert all(len(r.events) <= 10 for r in records)
    assert all(len(orjson.dumps(r.events)) <= 2000 for r in records)
    assert max(len(r.events) for r in records) == 2000 // (size + 1)  # the size limit cut


def test_invalid_events_are_dropped_with_their_reason(broker: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    name, registry = topic(), CollectorRegistry()
    pub = Publisher(broker.bootstrap_servers, name, registry=registry, max_message_bytes=4096)
    bad_spec = event(2)
    bad_spec["spec"] = {**bad_spec["spec"], "accepted_tokens": 13}
    with caplog.at_level(logging.WARNING, logger="monitor.publish"):
        assert not pub.publish({k: v for k, v in event(1).items() if k != "ts"})
        assert not pub.publish(bad_spec)
        assert not pub.publish(event(3, instance="x" * 5000))  # over max_message_bytes
        assert not pub.publish(event(4, extra={1, 2}))  # a set: not JSON
        assert not pub.publish([event(5)])  # type: ignore[arg-type]
        assert pub.publish(event(6))
    assert pub.flush(30.0)
    assert pub.dropped_by_reason == {"invalid": 3, "unserialisable": 2}
    assert sample(registry, "specwatch_publisher_dropped_total", reason="invalid") == 3
    assert sample(registry, "specwatch_publisher_dropped_total", reason="unserialisable") == 2
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "missing required field: ts" in messages  # the parser's own reason
    records = read_records(broker.bootstrap_servers, name, 1)
    pub.close()
    assert [e["request_id"] for r in records for e in r.events] == ["r-000006"]


def test_kafka_down_never_blocks_and_bounds_the_buffer(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    """Each attempt to reach the closed port may take connect_timeout_s (3 s) in the
    background: the caller must never wait for it."""
    registry = CollectorRegistry()
    started = time.perf_counter()
    pub = Publisher(f"127.0.0.1:{free_port()}", topic(), max_buffer=10, registry=registry,
                    connect_timeout_s=3.0)
    with caplog.at_level(logging.WARNING, logger="monitor.publish"):
        accepted = [pub.publish(event(i)) for i in range(25)]
    elapsed = time.perf_counter() - started
    assert elapsed < 2.0, elapsed  # one wait for the broker would take 3 s
    assert accepted == [True] * 10 + [False] * 15
    assert not pub.flush(0.5)
    assert (pub.buffered, pub.sent, pub.dropped_by_reason) == (10, 0, {"buffer_full": 15})
    assert sample(registry, "specwatch_publisher_dropped_total", reason="buffer_full") == 15
    assert sample(registry, "specwatch_publisher_buffered_events") == 10
    full = [r for r in caplog.records if "buffer_full" in r.getMessage()]
    assert len(full) == 1, "one WARNING, not one per dropped event"
    assert "10 events already buffered" in full[0].getMessage()
    pub.close(timeout=0.5)
    assert pub.dropped_by_reason == {"buffer_full": 15, "closed": 10}
    assert pub.buffered == 0
    assert not pub.publish(event(99))
    assert pub.dropped_by_reason["closed"] == 11


def test_broker_that_comes_up_later_gets_what_was_buffered() -> None:
    broker = EmbeddedBroker()  # its port is chosen, nothing listens yet
    pub = Publisher(broker.bootstrap_servers, "late.topic", connect_timeout_s=1.0)
    try:
        for i in range(20):
            assert pub.publish(event(i, ROUTES[i % 3]))
        assert not pub.flush(0.5)
        assert not pub.connected
        broker.start()
        assert pub.flush(60.0)
        assert (pub.sent, pub.dropped) == (20, 0)
        assert pub.connected
        records = read_records(broker.bootstrap_servers, "late.topic", 20)
        assert sorted(e["request_id"] for r in records for e in r.events) == [
            f"r-{i:06d}" for i in range(20)]
    finally:
        pub.close(timeout=5.0)
        broker.stop()


def test_flush_of_nothing_and_close_twice(broker: Any) -> None:
    pub = Publisher(broker.bootstrap_servers, topic())
    assert pub.flush(1.0)
    pub.close()
    pub.close()
    assert (pub.sent, pub.dropped) == (0, 0)
