"""Per-slice hourly rollups (``slice_rollups``) and stored policies (``policies``): written
with each checkpoint, read by ``specwatch policy`` (``monitor/policy``).

One row per (slice of pre-request signals, series, hour). The same events are in the
ordinary rollups; this table keeps them apart by batch-size, prompt-length and temperature
bucket and by tags, which the series key does not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from monitor.aggregate.rows import RowAdder
from monitor.aggregate.series import SeriesKey
from monitor.policy.slices import SLICE_COUNTERS, SLICE_FLOATS, SliceKey, SliceRecord, SliceStats
from monitor.store.checkpoint import EXPERIMENT_BUCKET
from monitor.store.hourly import merge_hourly, run_merged
from monitor.store.series_ids import chunks
from monitor.store.tables import policies_table, series_table, slice_rollups_table

__all__ = ["SliceDeltaKey", "read_policies", "read_slice_records", "slice_hash",
           "write_policy", "write_slices"]

SliceDeltaKey = tuple[SliceKey, SeriesKey, int]  # slice, series, hour bucket start

# Series per read-merge-write of one slice's rows. As with the rollups' blocks
# (monitor.store.hourly.MERGE_BLOCK), a block is the checkpoint's peak of small objects;
# a slice row is narrower than a rollup row (counters, no latency sketches), so a larger
# block holds that peak down with fewer statements: at 10,000 series, blocks of 200 and
# of 1,000 left the same resident memory, 1,000 with a fifth of the SELECTs.
SLICE_BLOCK = 1000


def slice_hash(key: SliceKey) -> str:
    """sha256 hex of the slice's four fields (unit-separated: no field can forge another).

    >>> slice_hash(SliceKey("1-1", "0-255", "[0,0.01)", "lang=py"))[:12]
    '78b8fa412b3a'
    """
    text = "\x1f".join((key.batch, key.prompt, key.temperature, key.tags))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# Adds SliceStats rows without building the objects (as BUCKET_ROWS does for rollups).
SLICE_ROWS = RowAdder(SLICE_COUNTERS, SLICE_FLOATS, ("per_position",), ())
Row = dict[str, Any]  # SliceStats.to_row() form


def _fold(deltas: list[tuple[int, int, SliceStats]]) -> dict[tuple[int, int], Row]:
    """One slice's deltas, (series id, time, stats), keyed by series and hour, merged, as
    rows; the caller's objects are never changed."""
    out: dict[tuple[int, int], Row] = {}
    for sid, ts, stats in deltas:
        t = int(ts // 1)
        k = (sid, t - t % EXPERIMENT_BUCKET)
        row = stats.to_row()
        acc = out.get(k)
        out[k] = row if acc is None else SLICE_ROWS.add(acc, row)
    return out


_C = slice_rollups_table.c


def write_slices(
    conn: Connection,
    deltas: Mapping[SliceDeltaKey, SliceStats],
    ids: Mapping[SeriesKey, int],
    utc: Any,
    block: int | None = None,
) -> None:
    """Read-merge-write the touched rows (as ``writer.merge_rollups`` does for rollups), a
    slice and a block of its series at a time (``block`` series, default
    :data:`SLICE_BLOCK`): rows are built only when written, so a
    checkpoint over many series never holds the rows of every slice, nor every series of
    one, at once. Rows are locked in one order whatever the blocks: slice hash, then series
    id, then hour."""
    size = SLICE_BLOCK if block is None else block
    by_hash: dict[str, tuple[SliceKey, list[tuple[int, int, SliceStats]]]] = {}
    hashes: dict[SliceKey, str] = {}
    for (skey, series, ts), stats in deltas.items():
        h = hashes.get(skey)
        if h is None:
            h = hashes[skey] = slice_hash(skey)
        by_hash.setdefault(h, (skey, []))[1].append((ids[series], ts, stats))
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    # Sorted: concurrent writers lock shared rows in one order.
    for h, (skey, items) in sorted(by_hash.items(), key=lambda kv: kv[0]):
        extra = {"batch_bucket": skey.batch, "prompt_bucket": skey.prompt,
                 "temperature_bucket": skey.temperature, "tags": skey.tags}
        for part in _series_blocks(items, size):
            ins, upd = merge_hourly(conn, slice_rollups_table, {"slice_hash": h}, _fold(part),
                                    extra, SLICE_ROWS, utc)
            inserts += ins
            updates += upd
            if len(inserts) + len(updates) >= size:
                # written a block at a time: the rows of every slice at once would be the
                # checkpoint's peak (the rows stay locked in hash order all the same)
                run_merged(conn, slice_rollups_table, ("slice_hash",), inserts, updates)
                inserts, updates = [], []
    run_merged(conn, slice_rollups_table, ("slice_hash",), inserts, updates)


def _series_blocks(items: list[tuple[int, int, SliceStats]], size: int
                   ) -> Iterator[list[tuple[int, int, SliceStats]]]:
    """``items`` (series id, time, stats) by ascending series, ``size`` series at a time;
    a series' items stay together and in their order (so its rows add as before).

    >>> [[sid for sid, _, _ in b] for b in _series_blocks([(5, 0, 1), (2, 0, 2), (5, 1, 3),
    ...                                                     (9, 0, 4)], 2)]
    [[2, 5, 5], [9]]
    """
    by_series: dict[int, list[tuple[int, int, SliceStats]]] = {}
    for item in items:
        by_series.setdefault(item[0], []).append(item)
    for sids in chunks(sorted(by_series), size):
        yield [item for sid in sids for item in by_series[sid]]


_STATS = [_C[name] for name in (*SLICE_COUNTERS, *SLICE_FLOATS, "per_position")]
_KEYS = [series_table.c[name] for name in SeriesKey._fields]
_N_COUNTERS = len(SLICE_COUNTERS)


def read_slice_records(
    conn: Connection, since: datetime | None, until: datetime | None, route: str | None
) -> list[SliceRecord]:
    """Every stored (slice, series, hour) row in [since, until), sorted by hour, route,
    series and slice."""
    # A month of a fleet is hundreds of thousands of rows: the series and slice keys are
    # read once and shared (not a fresh nine strings per row), and each row's sums are set
    # positionally rather than by name.
    series_stmt = select(series_table.c.id, *_KEYS)
    if route is not None:
        series_stmt = series_stmt.where(series_table.c.route == route)
    series = {row[0]: SeriesKey(*row[1:]) for row in conn.execute(series_stmt)}
    if not series:
        return []
    stmt = select(_C.bucket_start, _C.series_id, _C.batch_bucket, _C.prompt_bucket,
                  _C.temperature_bucket, _C.tags, *_STATS)
    if since is not None:
        stmt = stmt.where(_C.bucket_start >= since)
    if until is not None:
        stmt = stmt.where(_C.bucket_start < until)
    if route is not None:
        stmt = stmt.where(_C.series_id.in_(sorted(series)))
    keys: dict[tuple[str, str, str, str], SliceKey] = {}
    hours: dict[datetime, int] = {}
    out = []
    for row in conn.execute(stmt):
        start, sid = row[0], row[1]
        hour = hours.get(start)
        if hour is None:
            hour = hours[start] = int(start.timestamp())
        raw = (row[2], row[3], row[4], row[5])
        skey = keys.get(raw)
        if skey is None:
            skey = keys[raw] = SliceKey(*raw)
        out.append(SliceRecord(hour, series[sid], skey, SliceStats.from_values(row[6:])))
    # Sorted here rather than in SQL: string order must not depend on the server's collation.
    out.sort(key=lambda r: (r.hour, r.series, r.key))
    return out


def write_policy(conn: Connection, *, computed_at: datetime, train_since: datetime,
                 train_until: datetime, holdout_until: datetime | None, features: str,
                 document: dict[str, Any]) -> int:
    result = conn.execute(insert(policies_table).values(
        computed_at=computed_at, train_since=train_since, train_until=train_until,
        holdout_until=holdout_until, features=features, document=document))
    return int(result.inserted_primary_key[0])


def read_policies(conn: Connection, limit: int = 2) -> list[dict[str, Any]]:
    """The newest stored policies first (id, computed_at, windows, features, document)."""
    p = policies_table.c
    rows = conn.execute(select(policies_table).order_by(p.computed_at.desc(), p.id.desc())
                        .limit(limit))
    return [dict(row._mapping) for row in rows]
