"""Reads for ``specwatch report``: which processes saved a piece of detector state, and which
routes have series in a time range."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import select

from monitor.store.tables import series_table, state_table

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = ["routes_with_series", "state_sources"]


def state_sources(store: Store, key: str) -> list[str]:
    """The sources (a daemon, replays) holding state under ``key``, sorted."""
    with store.engine.connect() as conn:
        return sorted(conn.execute(
            select(state_table.c.source).where(state_table.c.key == key)).scalars())


def routes_with_series(
    store: Store, *, first_seen_before: datetime, last_seen_since: datetime | None
) -> list[str]:
    """Routes (sorted) with a series first seen before ``first_seen_before`` and, when
    ``last_seen_since`` is given, last seen at or after it."""
    c = series_table.c
    stmt = select(c.route).where(c.first_seen_at < first_seen_before).distinct()
    if last_seen_since is not None:
        stmt = stmt.where(c.last_seen_at >= last_seen_since)
    with store.engine.connect() as conn:
        return sorted(set(conn.execute(stmt).scalars()))
