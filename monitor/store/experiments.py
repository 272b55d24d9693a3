"""Per-arm rollups of A/B experiments: written with each checkpoint, read by the gate.

One row per (experiment, arm, series, hour). The experiment's events are in the ordinary
rollups too; this table only keeps them apart by arm, so that two arms running the same
setup on the same route (a null experiment) are still two sides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from monitor.aggregate.bucket import BUCKET_ROWS, COUNTERS, FLOATS, SKETCHES, BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.store.checkpoint import EXPERIMENT_BUCKET
from monitor.store.hourly import merge_hourly, run_merged
from monitor.store.series_ids import series_key_of
from monitor.store.tables import experiment_rollups_table, series_table

ExperimentKey = tuple[str, str, SeriesKey, int]  # experiment, arm, series, bucket start
Row = dict[str, Any]  # BucketStats.to_row() form


@dataclass(frozen=True, slots=True)
class ExperimentStats:
    """One series on one arm of an experiment, its buckets in a time range merged."""

    experiment: str
    arm: str
    route: str
    key: SeriesKey
    stats: BucketStats


@dataclass(frozen=True, slots=True)
class ExperimentSummary:
    """An experiment as stored: its arms, how many requests, the hours it spans
    (``first`` and ``last`` are hour bucket starts)."""

    name: str
    arms: tuple[str, ...]
    requests: int
    first: datetime
    last: datetime


def name_hash(name: str) -> str:
    """sha256 hex of ``name`` (UTF-8 with surrogates escaped: any str hashes).

    >>> name_hash("ab-test")[:12]
    '2e60f3f2508b'
    """
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def hour_of(ts: float) -> int:
    t = int(ts // 1)
    return t - t % EXPERIMENT_BUCKET


def fold_hours(deltas: Mapping[ExperimentKey, BucketStats]) -> dict[ExperimentKey, Row]:
    """``deltas`` keyed by their hour, merged, as rows (``to_row()`` form); the caller's
    objects are never changed (beyond folding their buffered latencies into sketches)."""
    out: dict[ExperimentKey, Row] = {}
    for (name, arm, key, ts), stats in deltas.items():
        k = (name, arm, key, hour_of(ts))
        row = stats.to_row()
        acc = out.get(k)
        out[k] = row if acc is None else BUCKET_ROWS.add(acc, row)
    return out


_C = experiment_rollups_table.c


def write_experiments(
    conn: Connection,
    deltas: Mapping[ExperimentKey, BucketStats],
    ids: Mapping[SeriesKey, int],
    utc: Any,
) -> None:
    """Read-merge-write the touched rows (as ``writer.merge_rollups`` does for rollups)."""
    groups: dict[tuple[str, str], dict[tuple[int, int], Row]] = {}
    for (name, arm, key, start), row in fold_hours(deltas).items():
        groups.setdefault((name, arm), {})[(ids[key], start)] = row
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    # Sorted: concurrent writers lock shared rows in one order.
    for (name, arm), rows in sorted(groups.items()):
        fixed = {"experiment_hash": name_hash(name), "arm_hash": name_hash(arm)}
        ins, upd = merge_hourly(conn, experiment_rollups_table, fixed, rows,
                                {"experiment": name, "arm": arm}, BUCKET_ROWS, utc)
        inserts += ins
        updates += upd
    run_merged(conn, experiment_rollups_table, ("experiment_hash", "arm_hash"), inserts,
               updates)


_STATS_COLUMNS = [_C[name] for name in (*COUNTERS, *FLOATS, "per_position", *SKETCHES)]
_KEY_COLUMNS = [series_table.c[name] for name in SeriesKey._fields]


def read_experiment_stats(
    conn: Connection, experiment: str, since: datetime | None, until: datetime | None
) -> list[ExperimentStats]:
    """Per (arm, series), the experiment's hours in [since, until) merged; sorted by arm,
    then series."""
    stmt = (
        select(_C.arm, *_KEY_COLUMNS, *_STATS_COLUMNS)
        .select_from(
            experiment_rollups_table.join(series_table, _C.series_id == series_table.c.id))
        .where(_C.experiment_hash == name_hash(experiment))
    )
    if since is not None:
        stmt = stmt.where(_C.bucket_start >= since)
    if until is not None:
        stmt = stmt.where(_C.bucket_start < until)
    acc: dict[tuple[str, SeriesKey], BucketStats] = {}
    for row in conn.execute(stmt):
        k = (row.arm, series_key_of(row))
        stats = BucketStats.from_row(row)
        if k in acc:
            acc[k].merge(stats)
        else:
            acc[k] = stats
    # Sorted here rather than in SQL: string order must not depend on the server's collation.
    return [
        ExperimentStats(experiment, arm, key.route, key, stats)
        for (arm, key), stats in sorted(acc.items(), key=lambda kv: kv[0])
    ]


def read_experiments(conn: Connection) -> list[ExperimentSummary]:
    """Every stored experiment, by name."""
    stmt = select(
        _C.experiment, _C.arm, func.sum(_C.requests), func.min(_C.bucket_start),
        func.max(_C.bucket_start),
    ).group_by(_C.experiment_hash, _C.arm_hash, _C.experiment, _C.arm)
    by_name: dict[str, list[tuple[str, int, datetime, datetime]]] = {}
    for name, arm, requests, first, last in conn.execute(stmt):
        by_name.setdefault(name, []).append((arm, int(requests), first, last))
    return [
        ExperimentSummary(
            name=name,
            arms=tuple(sorted(a for a, _, _, _ in arms)),
            requests=sum(n for _, n, _, _ in arms),
            first=min(f for _, _, f, _ in arms),
            last=max(la for _, _, _, la in arms),
        )
        for name, arms in sorted(by_name.items())
    ]

