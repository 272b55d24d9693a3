"""Read-merge-write of rows keyed by (some fixed columns, series, bucket start): the
minute/hour/day rollups, the A/B arm rollups and the policy's slice rollups share it.

Rows travel in their ``to_row()`` form and are added by a
:class:`~monitor.aggregate.rows.RowAdder`: a checkpoint over thousands of series reads back
and rewrites every touched hour and day row, and building statistics objects from them
(five sketches each) used to be most of its cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import Connection, Table, bindparam, insert, select, type_coerce, update
from sqlalchemy.types import JSON, NullType

from monitor.aggregate.rows import RowAdder
from monitor.store.bulk import executemany
from monitor.store.series_ids import chunks

__all__ = ["MERGE_BLOCK", "merge_hourly", "read_stored", "run_merged"]

RowKey = tuple[int, int]  # series id, bucket start (Unix seconds)

# Series per read-merge-write call of a checkpoint. A block's folded rows, the stored rows
# read back and the statements' parameters are small objects that all die at its end; the
# largest block sets how many pymalloc arenas the checkpoint takes, and an arena goes back
# to the system only once nothing in it lives, which anything allocated meanwhile (a
# snapshot's folded counts, a cache entry) prevents. At 10,000 series, blocks of 1,000
# left some 15 MB more resident than blocks of 200 (docs/benchmarks.md); smaller blocks
# gained nothing more. Statements per checkpoint grow as blocks shrink.
MERGE_BLOCK = 200

_STATEMENTS: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def _statement(kind: str, table: Table, fixed: tuple[str, ...]) -> Any:
    """One statement object per table and kind: :func:`executemany` caches by statement."""
    key = (kind, table.name, fixed)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = _STATEMENTS[key] = insert(table) if kind == "insert" else _update(table, fixed)
    return stmt


def update_statement(table: Table, fixed: tuple[str, ...]) -> Any:
    """The UPDATE of one row, keyed by ``b_<fixed column>``, ``b_series_id`` and
    ``b_bucket_start``, setting the columns each parameter row carries."""
    return _statement("update", table, fixed)


def _update(table: Table, fixed: tuple[str, ...]) -> Any:
    c = table.c
    clauses = [c[name] == bindparam(f"b_{name}") for name in fixed]
    clauses += [c.series_id == bindparam("b_series_id"),
                c.bucket_start == bindparam("b_bucket_start", type_=c.bucket_start.type)]
    return update(table).where(*clauses)


def _epoch(raw: Any) -> int:
    """A bucket start as the driver returns it (SQLite: naive UTC text; PostgreSQL: an aware
    datetime) in Unix seconds."""
    dt = datetime.fromisoformat(raw) if isinstance(raw, str) else raw
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp())


def _loads(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, (str, bytes)) else value


def _decoded(column: Sequence[Any]) -> Sequence[Any]:
    """A JSON column's values decoded: SQLite returns the text; psycopg has already decoded
    it. ``map`` over ``orjson.loads`` runs in C when no value needs care."""
    if column and type(column[0]) is str and None not in column:
        try:
            return list(map(orjson.loads, column))
        except TypeError:  # a value of another type after all
            pass
    return list(map(_loads, column))


def read_stored(
    conn: Connection,
    table: Table,
    fixed: Mapping[str, Any],
    keys: Sequence[RowKey],
    names: Sequence[str],
    utc: Callable[[int], datetime],
) -> dict[RowKey, dict[str, Any]]:
    """The stored rows of ``keys`` (columns ``names``), locked (``FOR UPDATE``) in one order.

    Read without SQLAlchemy's result processing: each JSON value is decoded once, in C, and
    the bucket start is read per distinct value, not per row.
    """
    c = table.c
    # Coerced to a type without result processors: the driver's values come through as is.
    columns = [type_coerce(c.series_id, NullType()), type_coerce(c.bucket_start, NullType()),
               *(type_coerce(c[n], NullType()) for n in names)]
    json_at = [i for i, n in enumerate(names, start=2) if isinstance(c[n].type, JSON)]
    sids = sorted({sid for sid, _ in keys})
    starts = sorted({start for _, start in keys})
    wanted = set(keys)
    epochs: dict[Any, int] = {}
    out: dict[RowKey, dict[str, Any]] = {}
    # series IN (...) AND start IN (...) is a superset of the touched pairs, but unlike a
    # row-value IN it is an index range on the primary key for both databases, and a
    # checkpoint's series and buckets mostly form a full grid anyway.
    for sid_part in chunks(sids):
        for start_part in chunks(starts):
            stmt = (
                select(*columns)
                .where(*(c[name] == value for name, value in fixed.items()),
                       c.series_id.in_(sid_part),
                       c.bucket_start.in_([utc(t) for t in start_part]))
                .order_by(c.series_id, c.bucket_start)
                # Locks the rows until commit on PostgreSQL; SQLite ignores it (the whole
                # database is already locked by BEGIN IMMEDIATE). Chunks go by ascending
                # series, so two writers still take their locks in one order.
                .with_for_update()
            )
            rows = conn.execute(stmt).all()
            if not rows:
                continue
            cols = list(zip(*rows, strict=True))
            for i in json_at:
                cols[i] = _decoded(cols[i])
            for raw in set(cols[1]):
                if raw not in epochs:
                    epochs[raw] = _epoch(raw)
            row_keys = zip(cols[0], map(epochs.__getitem__, cols[1]), strict=True)
            for key, values in zip(row_keys, zip(*cols[2:], strict=True), strict=True):
                if key in wanted:
                    out[key] = dict(zip(names, values, strict=True))
    return out


def merge_hourly(
    conn: Connection,
    table: Table,
    fixed: Mapping[str, Any],
    rows: Mapping[RowKey, Mapping[str, Any]],
    extra: Mapping[str, Any],
    adder: RowAdder,
    utc: Callable[[int], datetime],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """For one value of the ``fixed`` key columns, the inserts and updates that add ``rows``
    ((series id, bucket start) -> a delta in ``to_row()`` form) to what is stored; existing
    rows are locked (``FOR UPDATE``) in one order. ``extra`` are the columns a new row also
    needs. The caller runs the statements (:func:`run_merged`)."""
    keys = sorted(rows)
    existing = read_stored(conn, table, fixed, keys, adder.names, utc)
    starts = {start: utc(start) for start in {start for _, start in keys}}
    b_fixed = {f"b_{k}": v for k, v in fixed.items()}
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    for key in keys:
        sid, start = key
        delta = rows[key]
        stored = existing.get(key)
        if stored is None:
            inserts.append({**fixed, "series_id": sid, "bucket_start": starts[start], **extra,
                            **delta})
        else:
            updates.append({**b_fixed, "b_series_id": sid, "b_bucket_start": starts[start],
                            **adder.add(stored, delta)})
    return inserts, updates


def run_merged(conn: Connection, table: Table, fixed: tuple[str, ...],
               inserts: list[dict[str, Any]], updates: list[dict[str, Any]]) -> None:
    executemany(conn, _statement("insert", table, fixed), inserts)
    executemany(conn, _statement("update", table, fixed), updates)
