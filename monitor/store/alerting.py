"""The alerting tables: episodes, the outbox and its sink leases, silences, baseline requests.

Outbox rows and episode rows are written inside the checkpoint transaction
(:func:`write_alerting`), so a notification exists exactly when the detector state that
decided it does. Everything else here is the delivery worker's and the CLI's view.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, insert, or_, select, update

from monitor.silence import Silence
from monitor.store.leases import acquire_lease, lease_state, release_lease
from monitor.store.series_ids import dialect_insert
from monitor.store.tables import (
    baseline_table,
    episodes_table,
    outbox_table,
    silences_table,
)

__all__ = ["AlertingStore", "BaselineEntry", "OutboxRow", "write_alerting"]

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    sink: str
    key: str
    payload: dict[str, Any]
    state: str
    attempts: int
    progress: int
    created_at: datetime
    next_attempt_at: datetime
    last_error: str | None
    delivered_at: datetime | None


@dataclass(frozen=True, slots=True)
class BaselineEntry:
    id: int
    route: str
    reason: str
    requested_by: str
    requested_at: datetime
    applied_at: datetime | None
    applied_by: str | None


def write_alerting(
    conn: Connection,
    outbox: Sequence[tuple[str, str, dict[str, Any]]],
    episodes: Sequence[dict[str, Any]],
    applied_baselines: Sequence[tuple[int, str]],
    now: datetime,
) -> None:
    """Checkpoint part: new outbox rows (sink, key, payload), episode rows, applied requests.

    A row whose (sink, key) exists is a notification re-decided after a crash: skipped.
    """
    for sink, key, payload in outbox:
        stmt = dialect_insert(conn, outbox_table).values(
            sink=sink, key=key, payload=payload, state=PENDING, attempts=0, progress=0,
            created_at=now, next_attempt_at=now,
        ).on_conflict_do_nothing(index_elements=["sink", "key"])
        conn.execute(stmt)
    for row in episodes:
        stmt = dialect_insert(conn, episodes_table).values(**row)
        cols = {k: stmt.excluded[k] for k in row if k != "episode"}
        conn.execute(stmt.on_conflict_do_update(index_elements=["episode"], set_=cols))
    for request_id, holder in applied_baselines:
        conn.execute(
            update(baseline_table)
            .where(baseline_table.c.id == request_id, baseline_table.c.applied_at.is_(None))
            .values(applied_at=now, applied_by=holder)
        )


def _outbox_row(r: Any) -> OutboxRow:
    return OutboxRow(r.id, r.sink, r.key, r.payload, r.state, r.attempts, r.progress,
                     r.created_at, r.next_attempt_at, r.last_error, r.delivered_at)


class AlertingStore:
    """SQL of the alerting side; each method is its own transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- leases ------------------------------------------------------------------------------

    def acquire_lease(self, sink: str, holder: str, now: datetime, hold: float) -> bool:
        """Take or renew the lease on ``sink``'s queue."""
        return acquire_lease(self.engine, f"sink:{sink}", holder, now, hold)

    def release_lease(self, sink: str, holder: str) -> None:
        release_lease(self.engine, f"sink:{sink}", holder)

    def lease(self, sink: str) -> tuple[str, datetime] | None:
        """Who holds (or last held) ``sink``'s queue, and until when."""
        return lease_state(self.engine, f"sink:{sink}")

    # -- outbox ------------------------------------------------------------------------------

    def head(self, sink: str, limit: int = 20) -> list[OutboxRow]:
        """The oldest pending rows of ``sink``, in the order they must be delivered."""
        c = outbox_table.c
        stmt = (select(outbox_table).where(c.sink == sink, c.state == PENDING)
                .order_by(c.id).limit(limit))
        with self.engine.connect() as conn:
            return [_outbox_row(r) for r in conn.execute(stmt)]

    def mark_delivered(self, row_id: int, progress: int, now: datetime) -> None:
        self._set(row_id, state=DELIVERED, progress=progress, delivered_at=now, last_error=None)

    def mark_retry(self, row_id: int, *, attempts: int, progress: int, next_at: datetime,
                   error: str) -> None:
        self._set(row_id, attempts=attempts, progress=progress, next_attempt_at=next_at,
                  last_error=error)

    def mark_failed(self, row_id: int, *, attempts: int, progress: int, error: str) -> None:
        self._set(row_id, state=FAILED, attempts=attempts, progress=progress, last_error=error)

    def keep_progress(self, row_id: int, progress: int) -> None:
        """Record the requests of a pending row that a pass losing the lease got accepted;
        only ever raised, so a holder that got further meanwhile keeps its count."""
        c = outbox_table.c
        with self.engine.begin() as conn:
            conn.execute(update(outbox_table)
                         .where(c.id == row_id, c.state == PENDING, c.progress < progress)
                         .values(progress=progress))

    def _set(self, row_id: int, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(outbox_table).where(outbox_table.c.id == row_id).values(**values))

    def outbox(self, *, sink: str | None = None, state: str | None = None,
               limit: int = 1000) -> list[OutboxRow]:
        c = outbox_table.c
        stmt = select(outbox_table).order_by(c.id).limit(limit)
        if sink is not None:
            stmt = stmt.where(c.sink == sink)
        if state is not None:
            stmt = stmt.where(c.state == state)
        with self.engine.connect() as conn:
            return [_outbox_row(r) for r in conn.execute(stmt)]

    def pending_stats(self) -> dict[str, tuple[int, datetime | None]]:
        """Per sink: pending rows and the creation time of the oldest."""
        c = outbox_table.c
        stmt = (select(c.sink, func.count(), func.min(c.created_at))
                .where(c.state == PENDING).group_by(c.sink))
        with self.engine.connect() as conn:
            return {sink: (n, oldest) for sink, n, oldest in conn.execute(stmt)}

    # -- episodes ----------------------------------------------------------------------------

    def episodes(self, *, states: Sequence[str] | None = None, route: str | None = None,
                 resolved_since: datetime | None = None) -> list[dict[str, Any]]:
        """Episode rows, oldest first. ``resolved_since`` adds resolved episodes that ended
        at or after it to the ``states`` selection."""
        c = episodes_table.c
        stmt = select(episodes_table).order_by(c.started_at, c.episode)
        conds = []
        if states is not None:
            conds.append(c.state.in_(list(states)))
        if resolved_since is not None:
            conds.append(and_(c.state == "resolved", c.resolved_at >= resolved_since))
        if conds:
            stmt = stmt.where(or_(*conds))
        if route is not None:
            stmt = stmt.where(c.route == route)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(stmt)]

    # -- silences ----------------------------------------------------------------------------

    def add_silence(self, route: str, rule: str | None, starts_at: datetime,
                    ends_at: datetime, reason: str, created_by: str, now: datetime) -> Silence:
        with self.engine.begin() as conn:
            row_id = conn.execute(
                insert(silences_table).values(
                    route=route, rule=rule, starts_at=starts_at, ends_at=ends_at,
                    reason=reason, created_by=created_by, created_at=now,
                ).returning(silences_table.c.id)
            ).scalar_one()
        return Silence(int(row_id), route, rule, starts_at, ends_at, reason, created_by)

    def silences(self, *, active_at: datetime | None = None) -> list[Silence]:
        """All silences (newest first), or those in force or still to come at ``active_at``."""
        c = silences_table.c
        stmt = select(silences_table).order_by(c.id.desc())
        if active_at is not None:
            stmt = stmt.where(c.ends_at > active_at)
        with self.engine.connect() as conn:
            return [Silence(int(r.id), r.route, r.rule, r.starts_at, r.ends_at, r.reason,
                            r.created_by) for r in conn.execute(stmt)]

    def expire_silence(self, silence_id: int, now: datetime) -> bool:
        """End a silence now; ``False`` when there is no such silence still in force."""
        c = silences_table.c
        with self.engine.begin() as conn:
            return bool(conn.execute(
                update(silences_table).where(c.id == silence_id, c.ends_at > now)
                .values(ends_at=now)
            ).rowcount)

    # -- baselines ---------------------------------------------------------------------------

    def request_baseline(self, route: str, reason: str, requested_by: str,
                         now: datetime) -> int:
        with self.engine.begin() as conn:
            return int(conn.execute(
                insert(baseline_table).values(
                    route=route, reason=reason, requested_by=requested_by, requested_at=now,
                ).returning(baseline_table.c.id)
            ).scalar_one())

    def baseline_requests(self, *, pending_only: bool = False) -> list[BaselineEntry]:
        c = baseline_table.c
        stmt = select(baseline_table).order_by(c.id)
        if pending_only:
            stmt = stmt.where(c.applied_at.is_(None))
        with self.engine.connect() as conn:
            return [BaselineEntry(int(r.id), r.route, r.reason, r.requested_by, r.requested_at,
                                  r.applied_at, r.applied_by) for r in conn.execute(stmt)]
