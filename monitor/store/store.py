"""The store: checkpoints in, partition progress, state and ratio tables out."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

from sqlalchemy import Engine, delete, select
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.alert_record import AlertRecord
from monitor.change_record import ChangeRecord
from monitor.heap import collector_paused
from monitor.policy.slices import SliceRecord
from monitor.store import query, writer
from monitor.store.alerting import AlertingStore
from monitor.store.changes import read_changes
from monitor.store.checkpoint import GRANULARITIES, Checkpoint, PartitionState
from monitor.store.db import (
    PG_IO_TIMEOUT_S,
    READ_ONLY,
    check_migrated,
    is_unavailable,
    make_engine,
    redact_url,
)
from monitor.store.exceptions import StoreUnavailableError
from monitor.store.experiments import (
    ExperimentStats,
    ExperimentSummary,
    read_experiment_stats,
    read_experiments,
)
from monitor.store.query import RatioRow
from monitor.store.series_ids import stored_series
from monitor.store.slices import read_policies, read_slice_records, write_policy
from monitor.store.tables import (
    alerts_table,
    dedup_table,
    experiment_rollups_table,
    partitions_table,
    rollups_table,
    slice_rollups_table,
    state_table,
)

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 4

# PostgreSQL SQLSTATEs after which the whole checkpoint is simply run again.
_DEADLOCK, _SERIALIZATION, _UNIQUE = "40P01", "40001", "23505"
# A unique violation on these means another process inserted the same series or rollup row
# between our read and our insert; on source_partitions it would be fencing (handled apart).
_RACY_TABLES = frozenset({"series", "rollups", "experiment_rollups", "slice_rollups"})


def _retryable(exc: DBAPIError) -> bool:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None)
    if code in (_DEADLOCK, _SERIALIZATION):
        return True
    if code == _UNIQUE:
        return getattr(getattr(orig, "diag", None), "table_name", None) in _RACY_TABLES
    return False


class Store:
    """SQL history of one specwatch deployment (SQLite or PostgreSQL).

    Thread-safe: each call runs in its own connection and transaction.
    """

    def __init__(self, url: str, *, require_migrated: bool = True,
                 io_timeout: float | None = PG_IO_TIMEOUT_S) -> None:
        self.url = redact_url(url)
        # io_timeout: PostgreSQL round trips give up after that long (make_engine).
        self.engine: Engine = make_engine(url, io_timeout=io_timeout)
        self._reader = self.engine.execution_options(**{READ_ONLY: True})
        # Only ids of committed series: an id from a rolled-back insert would point nowhere.
        self._series_ids: dict[SeriesKey, int] = {}
        self._ids_lock = threading.Lock()
        if require_migrated:
            try:
                check_migrated(self.engine, display_url=url)
            except BaseException:
                self.engine.dispose()
                raise

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _available(self, what: str) -> Iterator[None]:
        """Turn a connection-class failure into :class:`StoreUnavailableError`."""
        try:
            yield
        except SQLAlchemyError as exc:
            if not is_unavailable(exc):
                raise
            orig = getattr(exc, "orig", None) or exc
            first = (str(orig).strip().splitlines() or [""])[0]
            raise StoreUnavailableError(
                f"{what} on {self.url} failed: {type(orig).__name__}: {first}"
            ) from exc

    def ping(self) -> None:
        """One round trip; :class:`StoreUnavailableError` when the database does not answer."""
        with self._available("ping"), self._reader.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

    @property
    def alerting(self) -> AlertingStore:
        """Episodes, outbox, silences and baseline requests (``monitor/store/alerting.py``)."""
        return AlertingStore(self.engine)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    # --- writing ---------------------------------------------------------------------------

    def commit(self, cp: Checkpoint) -> None:
        """Write ``cp`` in one transaction; :class:`FencedError` leaves nothing written.

        :class:`StoreUnavailableError` says nothing certain: the COMMIT may have landed
        before the connection failed. Reload from the store before going on.
        """
        with self._available("checkpoint"):
            self._commit(cp)

    def _commit(self, cp: Checkpoint) -> None:
        now = datetime.now(UTC)
        # Read without a copy (at 100,000 series, one was a 5 MB dict per checkpoint): an
        # entry is added only once its transaction committed, and never changed or removed.
        known: Mapping[SeriesKey, int] = MappingProxyType(self._series_ids)
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                # The collector paused: a checkpoint over thousands of series builds and
                # keeps every touched row until it commits (monitor/heap.py).
                with collector_paused(), self.engine.begin() as conn:
                    ids = writer.write_checkpoint(conn, cp, known, now)
            except DBAPIError as exc:
                if attempt == COMMIT_ATTEMPTS or not _retryable(exc):
                    raise
                log.info(
                    "checkpoint of %s on %s raced another writer (%s); retrying (%d/%d)",
                    cp.source,
                    self.url,
                    getattr(exc.orig, "sqlstate", "?"),
                    attempt,
                    COMMIT_ATTEMPTS,
                )
                time.sleep(0.01 * attempt)
                continue
            with self._ids_lock:
                self._series_ids.update(ids)
            return

    def apply_retention(self, now: datetime, retention: Mapping[str, timedelta]) -> dict[str, int]:
        """Delete rollup rows whose bucket starts before ``now - retention[granularity]``;
        experiment rollups (hourly) go with the hour rows; the result counts them under
        ``experiment_rollups`` when there were any."""
        query.check_range("minute", now, None)
        for gran in retention:
            if gran not in GRANULARITIES:
                raise ValueError(f"unknown granularity {gran!r} in retention")
        deleted: dict[str, int] = {}
        c = rollups_table.c
        with self.engine.begin() as conn:
            for gran, keep in retention.items():
                stmt = delete(rollups_table).where(
                    c.granularity == gran, c.bucket_start < now - keep
                )
                deleted[gran] = conn.execute(stmt).rowcount
            if "hour" in retention:
                for table in (experiment_rollups_table, slice_rollups_table):
                    stmt = delete(table).where(
                        table.c.bucket_start < now - retention["hour"])
                    if n := conn.execute(stmt).rowcount:
                        deleted[table.name] = n
        return deleted

    # --- reading ---------------------------------------------------------------------------

    def load_partitions(self, source: str, partitions: Iterable[int]) -> dict[int, PartitionState]:
        """Where each partition resumes, and the request ids its dedup log still holds."""
        wanted = sorted(set(partitions))
        out = {p: PartitionState() for p in wanted}
        if not wanted:
            return out
        p, d = partitions_table.c, dedup_table.c
        with self._available("loading partitions"), self._reader.connect() as conn:
            rows = conn.execute(
                select(p.partition, p.next_offset, p.max_event_ts).where(
                    p.source == source, p.partition.in_(wanted)
                )
            )
            for part, next_offset, max_ts in rows:
                out[part].next_offset = next_offset
                out[part].max_event_ts = max_ts
            logs = conn.execute(
                select(d.partition, d.ids)
                .where(d.source == source, d.partition.in_(wanted))
                .order_by(d.id)
            )
            for part, blob in logs:
                out[part].seen.update(writer.decode_ids(blob))
        return out

    def load_state(self, source: str, prefix: str = "") -> dict[str, Any]:
        """The snapshots of ``source`` whose key starts with ``prefix``."""
        c = state_table.c
        stmt = select(c.key, c.data).where(c.source == source)
        if prefix:
            stmt = stmt.where(c.key.startswith(prefix, autoescape=True))
        with self._available("loading state"), self._reader.connect() as conn:
            # SQLite's LIKE ignores ASCII case: the exact prefix test is ours.
            return {k: v for k, v in conn.execute(stmt) if k.startswith(prefix)}

    def load_state_key(self, source: str, key: str) -> Any | None:
        """One snapshot, or ``None``: the detection layer restores a segment on first sight."""
        c = state_table.c
        stmt = select(c.data).where(c.source == source, c.key == key)
        with self._reader.connect() as conn:
            return conn.execute(stmt).scalar_one_or_none()

    def series_keys(self, keys: Iterable[SeriesKey] | None = None) -> set[SeriesKey]:
        """The stored series keys or, given ``keys``, those of them that are stored (the
        cardinality guard's view of what is committed)."""
        wanted = None if keys is None else [SeriesKey(*k) for k in keys]
        with self._available("loading series"), self._reader.connect() as conn:
            return stored_series(conn, wanted)

    def alerts(
        self,
        *,
        source: str | None = None,
        route: str | None = None,
        rule: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[AlertRecord]:
        """Alert state changes in decision order (``at``, then insertion)."""
        c = alerts_table.c
        stmt = select(c.rule, c.state, c.at, c.severity, c.labels, c.summary, c.details)
        if source is not None:
            stmt = stmt.where(c.source == source)
        if route is not None:
            stmt = stmt.where(c.route == route)
        if rule is not None:
            stmt = stmt.where(c.rule == rule)
        if since is not None:
            stmt = stmt.where(c.at >= since)
        if until is not None:
            stmt = stmt.where(c.at < until)
        with self._reader.connect() as conn:
            return [
                AlertRecord(r.rule, r.state, r.at, r.severity, r.labels, r.summary, r.details)
                for r in conn.execute(stmt.order_by(c.at, c.id))
            ]

    def changes(
        self,
        *,
        route: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        source: str | None = None,
    ) -> list[ChangeRecord]:
        """Setup changes by ``at`` (``since`` inclusive, ``until`` exclusive); a change that
        several sources recorded comes once (``monitor/store/changes.py``)."""
        with self._available("reading changes"):
            return read_changes(self, route=route, since=since, until=until, source=source)

    def ratios(
        self,
        *,
        granularity: str = "hour",
        route: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        price_per_gpu_hour: float | None = None,
    ) -> list[RatioRow]:
        """Ratio rows by bucket start, then series; ``since`` inclusive, ``until`` exclusive.
        ``price_per_gpu_hour`` (``cost.price_per_gpu_hour``) prices their
        ``cost_per_success``; without it that is ``None``."""
        with collector_paused(), self._reader.connect() as conn:
            return query.ratio_table(conn, granularity, route, since, until,
                                     price_per_gpu_hour)[0]

    def ratio_table(
        self,
        sketches: Sequence[str],
        *,
        granularity: str = "hour",
        route: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        price_per_gpu_hour: float | None = None,
        fields: Collection[str] | None = None,
    ) -> tuple[list[RatioRow], query.RowSketches]:
        """:meth:`ratios`, and per row the latency sketches ``sketches`` (``ttft_ms``...)
        that a table's quantile columns read, in one query (``specwatch ratios``); only the
        counters ``fields`` when given (``query.fields_for`` the table's columns)."""
        with collector_paused(), self._reader.connect() as conn:
            return query.ratio_table(conn, granularity, route, since, until,
                                     price_per_gpu_hour, sketches, fields)

    def stats(
        self,
        *,
        granularity: str = "minute",
        route: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[SeriesKey, BucketStats]:
        """Per series, the statistics of all its buckets in the range merged into one."""
        out: dict[SeriesKey, BucketStats] = {}
        with collector_paused(), self._reader.connect() as conn:
            for key, _start, stats in query.bucket_rows(conn, granularity, route, since, until):
                acc = out.get(key)
                if acc is None:
                    out[key] = stats
                else:
                    acc.merge(stats)
        return out

    def buckets(
        self,
        *,
        granularity: str,
        route: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[tuple[SeriesKey, datetime], BucketStats]:
        """The statistics of each (series, bucket start) in the range."""
        with collector_paused(), self._reader.connect() as conn:
            return {
                (key, start): stats
                for key, start, stats in query.bucket_rows(conn, granularity, route, since, until)
            }

    def experiment_stats(
        self,
        experiment: str,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[ExperimentStats]:
        """Per arm and series of ``experiment``, its hours in the range merged (``since``
        inclusive, ``until`` exclusive, both on hour boundaries to be exact); sorted by arm,
        then series. Empty when the experiment is unknown."""
        query.check_range("hour", since, until)
        with self._available("reading experiment"), self._reader.connect() as conn:
            return read_experiment_stats(conn, experiment, since, until)

    def slice_records(
        self,
        since: datetime | None = None,
        until: datetime | None = None,
        route: str | None = None,
    ) -> list[SliceRecord]:
        """Every (slice, series, hour) row of the policy rollups in the range (``since``
        inclusive, ``until`` exclusive, on hour boundaries to be exact), optionally of one
        route; sorted by hour, then series and slice."""
        query.check_range("hour", since, until)
        with self._available("reading slice rollups"), self._reader.connect() as conn:
            return read_slice_records(conn, since, until, route)

    def save_policy(self, *, computed_at: datetime, train_since: datetime,
                    train_until: datetime, holdout_until: datetime | None, features: str,
                    document: dict[str, Any]) -> int:
        """Store a computed policy with its inputs' time ranges; returns its id."""
        with self._available("storing a policy"), self.engine.begin() as conn:
            return write_policy(conn, computed_at=computed_at, train_since=train_since,
                                train_until=train_until, holdout_until=holdout_until,
                                features=features, document=document)

    def policies(self, limit: int = 2) -> list[dict[str, Any]]:
        """The newest stored policies first."""
        with self._available("reading policies"), self._reader.connect() as conn:
            return read_policies(conn, limit)

    def experiments(self) -> list[ExperimentSummary]:
        """Every experiment stored, by name: its arms, requests and first and last hour."""
        with self._available("reading experiments"), self._reader.connect() as conn:
            return read_experiments(conn)
