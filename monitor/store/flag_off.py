"""The flag-off reports table (``monitor/flagoff.py`` builds the reports): one row per route
and window, which a rerun rewrites keeping its ``created_at``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Row, select

from monitor.store.db import READ_ONLY
from monitor.store.series_ids import dialect_insert
from monitor.store.tables import flag_off_table

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = ["flag_off_rows", "upsert_flag_off"]


def upsert_flag_off(store: Store, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert ``rows`` (every column of the table), replacing a row of the same route and
    window except its ``created_at``."""
    with store.engine.begin() as conn:
        stmt = dialect_insert(conn, flag_off_table)
        ex = stmt.excluded
        stmt = stmt.on_conflict_do_update(
            index_elements=["route_hash", "window_start", "window_end"],
            set_={
                "switched_at": ex.switched_at,
                "verdict": ex.verdict,
                "summary": ex.summary,
                "on_requests": ex.on_requests,
                "off_requests": ex.off_requests,
                "report": ex.report,
                "updated_at": ex.updated_at,
            },
        )
        conn.execute(stmt, rows)


def flag_off_rows(
    store: Store, *, route_hash: str | None = None, since: datetime | None = None
) -> list[Row[Any]]:
    """Rows (``report``, ``created_at``, ``updated_at``, ``window_end``, ``route``), in no
    particular order, of one route (by its hash) and windows ending at ``since`` or later."""
    c = flag_off_table.c
    stmt = select(c.report, c.created_at, c.updated_at, c.window_end, c.route)
    if route_hash is not None:
        stmt = stmt.where(c.route_hash == route_hash)
    if since is not None:
        stmt = stmt.where(c.window_end >= since)
    with store.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
        return list(conn.execute(stmt))
