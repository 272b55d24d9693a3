"""The ``setup_changes`` table: setup changes written with the checkpoint that decided them,
and read back as :class:`~monitor.change_record.ChangeRecord` for the change report.

A change is upserted by (source, change_id): ``change_id`` is stable (the new segment and
its first event time), so a replayed stretch rewrites the same row rather than adding one,
and the live comparison's latest state replaces an older one. "Latest" is the record's own
``updated_at``: a write carrying an older ``updated_at`` than the stored row leaves it as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from monitor.change_record import ChangeRecord
from monitor.store.db import READ_ONLY
from monitor.store.query import check_range
from monitor.store.series_ids import dialect_insert
from monitor.store.tables import setup_changes_table

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = ["change_rows", "read_changes", "write_changes"]

_C = setup_changes_table.c


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def change_rows(source: str, changes: Sequence[ChangeRecord]) -> list[dict[str, Any]]:
    """Rows for ``setup_changes``, one per change id (the last record of an id wins: it is
    the newest state detection handed out)."""
    rows: dict[str, dict[str, Any]] = {}
    for c in changes:
        rows[c.change_id] = {
            "source": source, "change_id": c.change_id, "route": c.route,
            "temperature": c.temperature, "at": _utc(c.at), "kind": c.kind,
            "previous": dict(c.previous), "current": dict(c.current),
            "changed": {k: list(v) for k, v in c.changed.items()}, "segment": c.segment,
            "previous_segment": c.previous_segment, "live": dict(c.live),
            "updated_at": _utc(c.updated_at),
        }
    return list(rows.values())


def write_changes(conn: Connection, source: str, changes: Sequence[ChangeRecord]) -> None:
    """Upsert ``changes`` inside the checkpoint transaction (``writer.write_checkpoint``).

    Every column is rewritten (a replay decides the same values again); a stored row whose
    ``updated_at`` is newer than the incoming one is kept.
    """
    rows = change_rows(source, changes)
    if not rows:
        return
    stmt = dialect_insert(conn, setup_changes_table)
    ex = stmt.excluded
    stmt = stmt.on_conflict_do_update(
        index_elements=["source", "change_id"],
        set_={name: ex[name] for name in (
            "route", "temperature", "at", "kind", "previous", "current", "changed", "segment",
            "previous_segment", "live", "updated_at")},
        where=_C.updated_at <= ex.updated_at,
    )
    conn.execute(stmt, rows)


def _record(row: Any) -> ChangeRecord:
    return ChangeRecord(
        change_id=row.change_id, route=row.route, temperature=row.temperature,
        at=row.at.timestamp(), kind=row.kind, previous=dict(row.previous or {}),
        current=dict(row.current or {}),
        changed={k: list(v) for k, v in (row.changed or {}).items()}, segment=row.segment,
        previous_segment=row.previous_segment, live=dict(row.live or {}),
        updated_at=row.updated_at.timestamp(),
    )


def read_changes(
    store: Store,
    *,
    route: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    source: str | None = None,
) -> list[ChangeRecord]:
    """Changes with ``since <= at < until``, ordered by ``at`` (then change id).

    Without ``source``, a change recorded by several sources (a daemon and a replay of the
    same traffic) is returned once: the row updated last.
    """
    check_range("minute", since, until)
    stmt = select(setup_changes_table)
    if route is not None:
        stmt = stmt.where(_C.route == route)
    if source is not None:
        stmt = stmt.where(_C.source == source)
    if since is not None:
        stmt = stmt.where(_C.at >= since)
    if until is not None:
        stmt = stmt.where(_C.at < until)
    newest: dict[str, tuple[tuple[datetime, str], ChangeRecord]] = {}
    with store.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
        for row in conn.execute(stmt):
            rank = (row.updated_at, row.source)
            kept = newest.get(row.change_id)
            if kept is None or rank > kept[0]:
                newest[row.change_id] = (rank, _record(row))
    # Sorted here rather than in SQL: string order must not depend on the server's collation.
    return sorted((r for _, r in newest.values()), key=lambda r: (r.at, r.change_id))
