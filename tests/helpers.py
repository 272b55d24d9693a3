"""Test helpers: an independent oracle for the tables, producing, and waiting on conditions."""

from __future__ import annotations

import gzip
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

T = TypeVar("T")

SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _ts(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def oracle(
    events: Iterable[dict[str, Any]], *, lateness: float, granularity: str = "hour"
) -> dict[tuple, list[int]]:
    """Exact sums written independently of specwatch's code: stdlib json, first occurrence
    of a request_id wins, events older than the newest seen minus ``lateness`` are dropped
    (pass the dedup horizon: up to it, late events count in the tables).

    Keys are (bucket_start Unix seconds, route, target_model, target_revision, draft_model,
    draft_revision, num_speculative_tokens); values [requests, drafted, accepted].
    """
    step = SECONDS[granularity]
    seen: set[str] = set()
    newest = float("-inf")
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in events:
        if e["request_id"] in seen:
            continue
        ts = _ts(e["ts"])
        if ts < newest - lateness:
            continue
        seen.add(e["request_id"])
        newest = max(newest, ts)
        draft = e.get("draft") or {}
        spec = e.get("spec") or {}
        key = (
            int(ts // step) * step,
            e["route"],
            e["target"]["model"],
            e["target"]["revision"],
            draft.get("model") or "",
            draft.get("revision") or "",
            spec.get("num_speculative_tokens", 0),
        )
        row = out[key]
        row[0] += 1
        row[1] += spec.get("drafted_tokens", 0)
        row[2] += spec.get("accepted_tokens", 0)
    return dict(out)


def simulated(directory: Path, *, duration: str, seed: int) -> list[dict[str, Any]]:
    """Traffic from ``specwatch simulate`` (3 requests/s, 2% duplicates), written to
    ``directory/events.jsonl`` and read back."""
    from monitor.cli import main

    path = directory / "events.jsonl"
    assert main(["simulate", "--duration", duration, "--rate", "3", "--seed", str(seed),
                 "--duplicates", "0.02", "--out", str(path)]) == 0
    return list(read_jsonl(path))


def assert_exact(store: Any, events: list[dict[str, Any]], *, lateness: float) -> None:
    """``store``'s rollup tables at every granularity equal :func:`oracle` of ``events``."""
    for granularity in SECONDS:
        assert table(store.ratios(granularity=granularity)) == oracle(
            events, lateness=lateness, granularity=granularity), granularity


def table(rows: Iterable[Any]) -> dict[tuple, list[int]]:
    """The same shape as :func:`oracle`, from ``Store.ratios`` rows (summed over the
    columns the oracle does not split by)."""
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        key = (
            int(r.bucket_start.timestamp()),
            r.route,
            r.target_model,
            r.target_revision,
            r.draft_model or "",
            r.draft_revision or "",
            r.num_speculative_tokens,
        )
        row = out[key]
        row[0] += r.requests
        row[1] += r.drafted_tokens
        row[2] += r.accepted_tokens
    return dict(out)


def produce(
    bootstrap: str, topic: str, events: list[dict[str, Any]], *, batch: int = 1
) -> int:
    """Send events keyed by route, ``batch`` events per message (JSON array when > 1).
    Returns the number of messages."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all",
                             max_request_size=32 << 20)
    messages = 0
    by_route: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_route[e["route"]].append(e)
        if len(by_route[e["route"]]) >= batch:
            _send(producer, topic, e["route"], by_route.pop(e["route"]), batch)
            messages += 1
    for route, rest in by_route.items():
        _send(producer, topic, route, rest, batch)
        messages += 1
    producer.flush()
    producer.close()
    return messages


def _send(producer: KafkaProducer, topic: str, route: str, evs: list[dict], batch: int) -> None:
    value = json.dumps(evs[0] if batch == 1 else evs).encode()
    producer.send(topic, key=route.encode(), value=value)


def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 30.0, *,
               extra_poll: bool = False) -> list[ConsumerRecord]:
    """The records of ``topic`` until they hold ``expected`` events (a JSON array value holds
    its length), read with assign + earliest and no consumer group. ``extra_poll``: one more
    short poll afterwards, for tests where anything beyond ``expected`` is a bug too."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        deadline = time.monotonic() + timeout
        partitions = None
        while not partitions and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(topic)
            if not partitions:
                time.sleep(0.1)
        assert partitions, f"topic {topic} has no partitions"
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        records: list[ConsumerRecord] = []
        seen = 0
        while seen < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=300).values():
                for record in batch:
                    records.append(record)
                    value = json.loads(record.value)
                    seen += len(value) if isinstance(value, list) else 1
        if extra_poll:
            for batch in consumer.poll(timeout_ms=300).values():
                records.extend(batch)
        return records
    finally:
        consumer.close()


def wait_for(
    condition: Callable[[], T], *, timeout: float, what: str, interval: float = 0.1
) -> T:
    """Poll until ``condition()`` is truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
