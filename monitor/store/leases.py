"""Leases: one holder at a time for a named piece of work, across daemons sharing a store.

A lease is taken or renewed with one conditional UPDATE (or an INSERT when it never
existed), so two daemons racing for it cannot both win; a holder that dies simply lets it
expire. Used for each sink's delivery queue (``sink:<name>``) and each scheduled job
(``job:<name>``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, or_, select, update

from monitor.store.series_ids import dialect_insert
from monitor.store.tables import leases_table

__all__ = ["acquire_lease", "lease_holder", "lease_state", "release_lease"]


def acquire_lease(engine: Engine, name: str, holder: str, now: datetime, hold: float) -> bool:
    """Take or renew ``name`` until ``now + hold``; ``False`` while another live holder has
    it."""
    c = leases_table.c
    until = now + timedelta(seconds=hold)
    with engine.begin() as conn:
        done = conn.execute(
            update(leases_table)
            .where(c.name == name, or_(c.holder == holder, c.expires_at <= now))
            .values(holder=holder, expires_at=until)
        ).rowcount
        if done:
            return True
        stmt = dialect_insert(conn, leases_table).values(
            name=name, holder=holder, expires_at=until
        ).on_conflict_do_nothing(index_elements=["name"]).returning(c.name)
        # rowcount is -1 for this statement under psycopg: count returned rows instead.
        return conn.execute(stmt).first() is not None


def release_lease(engine: Engine, name: str, holder: str) -> None:
    c = leases_table.c
    with engine.begin() as conn:
        conn.execute(delete(leases_table).where(c.name == name, c.holder == holder))


def lease_holder(engine: Engine, name: str, now: datetime) -> str | None:
    """Who holds ``name`` now (``None``: nobody, or an expired holder)."""
    c = leases_table.c
    with engine.connect() as conn:
        row = conn.execute(select(c.holder, c.expires_at).where(c.name == name)).first()
    return row.holder if row is not None and row.expires_at > now else None


def lease_state(engine: Engine, name: str) -> tuple[str, datetime] | None:
    """The stored holder of ``name`` and when its hold ends, expired or not (``None``: never
    taken, or released)."""
    c = leases_table.c
    with engine.connect() as conn:
        row = conn.execute(select(c.holder, c.expires_at).where(c.name == name)).first()
    return None if row is None else (row.holder, row.expires_at)
