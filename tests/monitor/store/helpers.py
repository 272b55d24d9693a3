"""Builders of events, series keys and checkpoints for the store tests."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey, series_key
from monitor.store.checkpoint import Checkpoint, PartitionCommit
from monitor.telemetry.event import Event

# 2026-11-02 22:00 UTC: four hours from here cross a day boundary.
T0 = int(datetime(2026, 11, 2, 22, tzinfo=UTC).timestamp())


def at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def event(
    rid: str,
    ts: float,
    route: str = "code",
    *,
    drafted: int = 10,
    accepted: int = 7,
    spec: bool = True,
    e2e_ms: float = 500.0,
    ttft_ms: float | None = 100.0,
    status: str = "ok",
    output_tokens: int = 20,
    verify_steps: int | None = 3,
    **kw: Any,
) -> Event:
    fields: dict[str, Any] = {
        "target_model": "llama-70b",
        "target_revision": "r1",
        "target_tokenizer": "llama3",
        "draft_model": "llama-1b" if spec else None,
        "draft_revision": "d1" if spec else None,
        "draft_tokenizer": "llama3" if spec else None,
        "method": "draft_model" if spec else None,
    }
    fields.update(kw)
    return Event(
        rid,
        float(ts),
        route,
        status,
        output_tokens=output_tokens,
        e2e_ms=e2e_ms,
        ttft_ms=ttft_ms,
        has_spec=spec,
        num_speculative_tokens=4 if spec else 0,
        drafted_tokens=drafted if spec else 0,
        accepted_tokens=accepted if spec else 0,
        verify_steps=verify_steps if spec else None,
        accepted_per_position=(3, 2, 1, 1) if spec and accepted == 7 else None,
        **fields,
    )


def rollups_of(events: Iterable[Event]) -> dict[tuple[SeriesKey, int], BucketStats]:
    out: dict[tuple[SeriesKey, int], BucketStats] = {}
    for e in events:
        k = (series_key(e), int(e.ts) - int(e.ts) % 60)
        out.setdefault(k, BucketStats()).update(e)
    return out


def merged(stats: Iterable[BucketStats]) -> BucketStats:
    acc = BucketStats()
    for s in stats:
        acc.merge(s)
    return acc


def checkpoint(
    events: Iterable[Event],
    *,
    source: str = "telemetry",
    partition: int = 0,
    next_offset: int = 1,
    expected: int | None = None,
    state: dict[str, Any] | None = None,
    prune_before: float | None = None,
) -> Checkpoint:
    events = list(events)
    ts = [e.ts for e in events]
    return Checkpoint(
        source=source,
        rollups=rollups_of(events),
        partitions=[
            PartitionCommit(
                partition=partition,
                next_offset=next_offset,
                expected_offset=expected,
                max_event_ts=max(ts) if ts else None,
                new_ids=[(e.request_id, e.ts) for e in events],
                prune_before=prune_before,
            )
        ],
        state=state or {},
    )
