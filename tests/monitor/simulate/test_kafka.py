from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import orjson
import pytest

from monitor.simulate import KafkaWriter, SimulationConfig, Simulator
from tests.helpers import read_topic

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def events() -> list[dict[str, Any]]:
    config = SimulationConfig(duration_s=300, rate=10, seed=6, duplicates=0.01)
    return list(Simulator(config).events())


def test_all_events_arrive_batched_and_keyed_by_route(broker: Any, events: list[Any]) -> None:
    topic = f"sim-{uuid.uuid4().hex[:8]}"
    with KafkaWriter(broker.bootstrap_servers, topic, batch_size=50) as writer:
        assert writer.write_all(events) == len(events)
    assert writer.sent == len(events)
    assert writer.messages < len(events) / 10
    assert writer.per_route == Counter(e["route"] for e in events)

    records = read_topic(broker.bootstrap_servers, topic, len(events))
    received: list[dict[str, Any]] = []
    partition_of: dict[str, set[int]] = {}
    for record in records:
        batch = orjson.loads(record.value)
        assert isinstance(batch, list) and 1 <= len(batch) <= 50
        route = record.key.decode("utf-8")
        assert {e["route"] for e in batch} == {route}
        partition_of.setdefault(route, set()).add(record.partition)
        received.extend(batch)
    assert len(received) == len(events)
    assert sorted(orjson.dumps(e) for e in received) == sorted(orjson.dumps(e) for e in events)
    assert all(len(p) == 1 for p in partition_of.values())  # a route stays in one partition
    # within a route, the order of emission is kept
    for route in partition_of:
        mine = [e["request_id"] for e in events if e["route"] == route]
        assert [e["request_id"] for e in received if e["route"] == route] == mine


def test_batch_size_one_sends_single_objects(broker: Any, events: list[Any]) -> None:
    topic = f"sim-{uuid.uuid4().hex[:8]}"
    some = events[:200]
    writer = KafkaWriter(broker.bootstrap_servers, topic, batch_size=1)
    for e in some:
        writer.write(e)
    writer.close()
    records = read_topic(broker.bootstrap_servers, topic, len(some))
    values = [orjson.loads(r.value) for r in records]
    assert all(isinstance(v, dict) for v in values)
    assert all(r.key.decode() == v["route"] for r, v in zip(records, values, strict=True))
    assert sorted(v["request_id"] for v in values) == sorted(e["request_id"] for e in some)


def test_large_batches_are_split_by_size(broker: Any, events: list[Any]) -> None:
    topic = f"sim-{uuid.uuid4().hex[:8]}"
    with KafkaWriter(broker.bootstrap_servers, topic, batch_size=10_000,
                     max_message_bytes=20_000) as writer:
        writer.write_all(events)
    records = read_topic(broker.bootstrap_servers, topic, len(events))
    assert all(len(r.value) <= 20_000 for r in records)
    assert sum(len(orjson.loads(r.value)) for r in records) == len(events)


def test_live_batches_do_not_wait_for_a_full_batch(broker: Any, events: list[Any]) -> None:
    topic = f"sim-{uuid.uuid4().hex[:8]}"
    with KafkaWriter(broker.bootstrap_servers, topic, batch_size=1000, max_delay_s=0.05) as w:
        for e in events[:5]:
            w.write(e)
        assert w.messages == 0  # still batching
        time.sleep(0.1)
        w.write(events[5])  # the old batches are overdue now: they go out
        assert w.messages >= 1 and w.sent >= 5
