"""Read-merge-write of hourly rows keyed by (some fixed columns, series, hour): the A/B arm
rollups and the policy's slice rollups share it (``writer.merge_rollups`` is the same idea
for the minute/hour/day rollups)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Connection, Table, bindparam, insert, select, update

from monitor.store.bulk import executemany
from monitor.store.series_ids import chunks

__all__ = ["merge_hourly", "run_merged"]


_STATEMENTS: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def _statement(kind: str, table: Table, fixed: tuple[str, ...]) -> Any:
    """One statement object per table and kind: :func:`executemany` caches by statement."""
    key = (kind, table.name, fixed)
    stmt = _STATEMENTS.get(key)
    if stmt is None:
        stmt = _STATEMENTS[key] = insert(table) if kind == "insert" else _update(table, fixed)
    return stmt


def _update(table: Table, fixed: tuple[str, ...]) -> Any:
    c = table.c
    clauses = [c[name] == bindparam(f"b_{name}") for name in fixed]
    clauses += [c.series_id == bindparam("b_series_id"),
                c.bucket_start == bindparam("b_bucket_start", type_=c.bucket_start.type)]
    return update(table).where(*clauses)


def merge_hourly(
    conn: Connection,
    table: Table,
    fixed: Mapping[str, str],
    rows: Mapping[tuple[int, int], Any],
    extra: Mapping[str, Any],
    from_row: Callable[[Any], Any],
    utc: Any,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """For one value of the ``fixed`` key columns, the inserts and updates that add ``rows``
    ((series id, hour start) -> statistics with ``merge``/``to_row``) to what is stored;
    existing rows are locked (``FOR UPDATE``) in one order. ``extra`` are the columns a new
    row also needs. The caller runs the statements (in bulk, after every group)."""
    c = table.c
    sids = sorted({sid for sid, _ in rows})
    starts = sorted({start for _, start in rows})
    existing: dict[tuple[int, int], Any] = {}
    for sid_part in chunks(sids):
        for start_part in chunks(starts):
            stmt = (
                select(table)
                .where(*(c[name] == value for name, value in fixed.items()),
                       c.series_id.in_(sid_part),
                       c.bucket_start.in_([utc(t) for t in start_part]))
                .order_by(c.series_id, c.bucket_start)
                .with_for_update()
            )
            for row in conn.execute(stmt):
                existing[(row.series_id, int(row.bucket_start.timestamp()))] = row
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    for (sid, start), delta in sorted(rows.items()):
        row = existing.get((sid, start))
        if row is None:
            inserts.append({**fixed, "series_id": sid, "bucket_start": utc(start), **extra,
                            **delta.to_row()})
        else:
            merged = from_row(row)
            merged.merge(delta)
            updates.append({**{f"b_{k}": v for k, v in fixed.items()}, "b_series_id": sid,
                            "b_bucket_start": row.bucket_start, **merged.to_row()})
    return inserts, updates


def run_merged(conn: Connection, table: Table, fixed: tuple[str, ...],
               inserts: list[dict[str, Any]], updates: list[dict[str, Any]]) -> None:
    executemany(conn, _statement("insert", table, fixed), inserts)
    executemany(conn, _statement("update", table, fixed), updates)
