"""Reads of stored detector state outside a checkpoint: which sources hold some (the API's
``/routes``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from monitor.store.db import READ_ONLY
from monitor.store.tables import state_table

if TYPE_CHECKING:
    from monitor.store.store import Store

__all__ = ["sources_with_state"]


def sources_with_state(store: Store, prefix: str) -> list[str]:
    """The sources (a daemon's consumer group, a replay, ...) with a key under ``prefix``."""
    c = state_table.c
    stmt = select(c.source).distinct().where(c.key.startswith(prefix, autoescape=True))
    # Read-only: on SQLite a plain transaction would take the write lock checkpoints need.
    with store.engine.execution_options(**{READ_ONLY: True}).connect() as conn:
        return sorted(conn.execute(stmt).scalars())
