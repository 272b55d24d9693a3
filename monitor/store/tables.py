"""The SQL schema, as SQLAlchemy 2 declarative models.

The store writes through SQLAlchemy Core on the ``*_table`` objects (executemany, few round
trips); the models are there for readers that prefer the ORM. ``migrations/versions`` must
create exactly this schema: a test compares the two.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from monitor.store.coltypes import SafeString, SafeText, UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only autoincrements an INTEGER PRIMARY KEY, not a BIGINT one.
_BigId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Series(Base):
    """One ratio series (a :class:`~monitor.aggregate.series.SeriesKey`).

    ``key_hash`` (sha256 of the key's JSON) carries uniqueness: a unique index over nine
    unbounded Unicode columns could exceed PostgreSQL's btree entry size.
    """

    __tablename__ = "series"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    route: Mapped[str] = mapped_column(SafeText())
    target_model: Mapped[str] = mapped_column(SafeText())
    target_revision: Mapped[str] = mapped_column(SafeText())
    target_tokenizer: Mapped[str] = mapped_column(SafeText())
    draft_model: Mapped[str] = mapped_column(SafeText())
    draft_revision: Mapped[str] = mapped_column(SafeText())
    draft_tokenizer: Mapped[str] = mapped_column(SafeText())
    method: Mapped[str] = mapped_column(SafeText())
    num_speculative_tokens: Mapped[int] = mapped_column(Integer)
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())


class BucketColumns:
    """The columns of one :class:`~monitor.aggregate.bucket.BucketStats` (``to_row()``).

    The task outcome and cost columns (telemetry v1.1, migration 0006) default to zero,
    and their sketches to null (an empty sketch): rows written before them read back as
    buckets where nothing was reported.
    """

    requests: Mapped[int] = mapped_column(BigInteger)
    errors: Mapped[int] = mapped_column(BigInteger)
    spec_requests: Mapped[int] = mapped_column(BigInteger)
    drafting_requests: Mapped[int] = mapped_column(BigInteger)
    evicted_requests: Mapped[int] = mapped_column(BigInteger)
    drafted_tokens: Mapped[int] = mapped_column(BigInteger)
    accepted_tokens: Mapped[int] = mapped_column(BigInteger)
    verify_steps: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    batch_size_sum: Mapped[int] = mapped_column(BigInteger)
    batch_size_count: Mapped[int] = mapped_column(BigInteger)
    per_position: Mapped[list[int]] = mapped_column(JSON)
    ttft_ms: Mapped[dict[str, Any]] = mapped_column(JSON)
    e2e_ms: Mapped[dict[str, Any]] = mapped_column(JSON)
    decode_tps: Mapped[dict[str, Any]] = mapped_column(JSON)
    successes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    outcome_ok_reported: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    outcome_ok_true: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    schema_valid_reported: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    schema_valid_true: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    tool_calls_valid_reported: Mapped[int] = mapped_column(
        BigInteger, server_default=text("0"))
    tool_calls_valid_true: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    gpu_reported_requests: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    gpu_seconds: Mapped[float] = mapped_column(Float, server_default=text("0"))
    gpu_seconds_sq: Mapped[float] = mapped_column(Float, server_default=text("0"))
    success_gpu_seconds: Mapped[float] = mapped_column(Float, server_default=text("0"))
    itl_p50_ms: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    itl_p99_ms: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class Rollup(BucketColumns, Base):
    """A :class:`~monitor.aggregate.bucket.BucketStats` of one series over one bucket."""

    __tablename__ = "rollups"

    granularity: Mapped[str] = mapped_column(String(6), primary_key=True)
    series_id: Mapped[int] = mapped_column(Integer, ForeignKey("series.id"), primary_key=True)
    bucket_start: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)

    __table_args__ = (Index(None, "granularity", "bucket_start"),)


class ExperimentRollup(BucketColumns, Base):
    """The statistics of one series on one arm of one A/B experiment over one hour.

    Experiment and arm names are unbounded Unicode: their sha256 hashes (of the name, and
    of the arm) carry the key, as ``series.key_hash`` does.
    """

    __tablename__ = "experiment_rollups"

    experiment_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    arm_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    series_id: Mapped[int] = mapped_column(Integer, ForeignKey("series.id"), primary_key=True)
    bucket_start: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    experiment: Mapped[str] = mapped_column(SafeText())
    arm: Mapped[str] = mapped_column(SafeText())

    __table_args__ = (Index(None, "bucket_start"),)


class SliceRollup(Base):
    """The :class:`~monitor.policy.slices.SliceStats` of one series in one slice of
    pre-request signals over one hour: what ``specwatch policy`` learns from.

    ``slice_hash`` (sha256 of the four slice fields) carries the key, as ``series.key_hash``
    does: the tag text is unbounded.
    """

    __tablename__ = "slice_rollups"

    slice_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    series_id: Mapped[int] = mapped_column(Integer, ForeignKey("series.id"), primary_key=True)
    bucket_start: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    batch_bucket: Mapped[str] = mapped_column(SafeString(32))
    prompt_bucket: Mapped[str] = mapped_column(SafeString(32))
    temperature_bucket: Mapped[str] = mapped_column(SafeString(32))
    tags: Mapped[str] = mapped_column(SafeText())
    requests: Mapped[int] = mapped_column(BigInteger)
    drafting_requests: Mapped[int] = mapped_column(BigInteger)
    drafted_tokens: Mapped[int] = mapped_column(BigInteger)
    accepted_tokens: Mapped[int] = mapped_column(BigInteger)
    verify_steps: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    timed_requests: Mapped[int] = mapped_column(BigInteger)
    timed_output_tokens: Mapped[int] = mapped_column(BigInteger)
    spec_timed: Mapped[int] = mapped_column(BigInteger)
    plain_timed: Mapped[int] = mapped_column(BigInteger)
    decode_ms: Mapped[float] = mapped_column(Float)
    e2e_ms: Mapped[float] = mapped_column(Float)
    ttft_ms: Mapped[float] = mapped_column(Float)
    spec_step_ms: Mapped[float] = mapped_column(Float)
    spec_step_ms_sq: Mapped[float] = mapped_column(Float)
    plain_token_ms: Mapped[float] = mapped_column(Float)
    plain_token_ms_sq: Mapped[float] = mapped_column(Float)
    per_position: Mapped[list[int]] = mapped_column(JSON)

    __table_args__ = (Index(None, "bucket_start"),)


class StoredPolicy(Base):
    """A policy computed by the daily job (or on request), with the time ranges of its
    inputs, so that the policy in force can be compared with a newer one."""

    __tablename__ = "policies"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime())
    train_since: Mapped[datetime] = mapped_column(UTCDateTime())
    train_until: Mapped[datetime] = mapped_column(UTCDateTime())
    holdout_until: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    features: Mapped[str] = mapped_column(SafeText())
    document: Mapped[Any] = mapped_column(JSON)

    __table_args__ = (Index(None, "computed_at"),)


class SourcePartition(Base):
    """Where a source partition resumes; ``next_offset`` is the fencing token."""

    __tablename__ = "source_partitions"

    source: Mapped[str] = mapped_column(SafeString(255), primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    next_offset: Mapped[int] = mapped_column(BigInteger)
    max_event_ts: Mapped[float | None] = mapped_column(Float, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class DedupLog(Base):
    """The request ids one checkpoint counted on one partition, for restart-time dedup.

    ``ids`` is zlib-compressed JSON ``[[request_id, ts], ...]``: one row per checkpoint rather
    than one per request keeps writes to a single insert.
    """

    __tablename__ = "dedup_log"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(SafeString(255))
    partition: Mapped[int] = mapped_column(Integer)
    min_ts: Mapped[float] = mapped_column(Float)
    max_ts: Mapped[float] = mapped_column(Float)
    ids: Mapped[bytes] = mapped_column(LargeBinary)

    __table_args__ = (Index(None, "source", "partition", "max_ts"),)


class StateSnapshot(Base):
    """An opaque, versioned JSON snapshot (detector state) under a key."""

    __tablename__ = "state_snapshots"

    source: Mapped[str] = mapped_column(SafeString(255), primary_key=True)
    key: Mapped[str] = mapped_column(SafeString(512), primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    data: Mapped[Any] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AlertEvent(Base):
    """One alert state change (alerts v1 record), written with the checkpoint that decided it.

    The unique (fingerprint, state, at) makes a re-decided transition after a crash, or a
    replay of the same stretch, a no-op instead of a second record.
    """

    __tablename__ = "alert_events"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(SafeString(255))
    fingerprint: Mapped[str] = mapped_column(SafeString(64))
    rule: Mapped[str] = mapped_column(SafeString(64))
    state: Mapped[str] = mapped_column(SafeString(16))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    severity: Mapped[str] = mapped_column(SafeString(16))
    route: Mapped[str] = mapped_column(SafeText())
    labels: Mapped[Any] = mapped_column(JSON)
    summary: Mapped[str] = mapped_column(SafeText())
    details: Mapped[Any] = mapped_column(JSON)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        UniqueConstraint("fingerprint", "state", "at"),
        Index(None, "at"),
        Index(None, "rule", "at"),
    )


class AlertEpisode(Base):
    """One episode of one alert as the lifecycle sees it: the projection the CLI, the API and
    the Alertmanager re-post read. The lifecycle's own state is its snapshot; this table is
    written from it in the same checkpoint transaction."""

    __tablename__ = "alert_episodes"

    episode: Mapped[str] = mapped_column(SafeString(96), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(SafeString(64))
    rule: Mapped[str] = mapped_column(SafeString(64))
    severity: Mapped[str] = mapped_column(SafeString(16))
    route: Mapped[str] = mapped_column(SafeText())
    labels: Mapped[Any] = mapped_column(JSON)
    summary: Mapped[str] = mapped_column(SafeText())
    details: Mapped[Any] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(SafeString(16))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    notified: Mapped[bool] = mapped_column(Boolean)
    silenced_by: Mapped[int | None] = mapped_column(Integer, nullable=True)

    __table_args__ = (Index(None, "state"), Index(None, "started_at"))


class OutboxEntry(Base):
    """One notification for one sink, written before anything is sent.

    ``progress`` counts the sink's requests for this row already accepted, so a retry
    resumes after them; ``(sink, key)`` is unique, so a notification re-decided after a
    crash is the same row.
    """

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    sink: Mapped[str] = mapped_column(SafeString(32))
    key: Mapped[str] = mapped_column(SafeString(96))
    payload: Mapped[Any] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(SafeString(16))
    attempts: Mapped[int] = mapped_column(Integer)
    progress: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(SafeText(), nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    __table_args__ = (
        UniqueConstraint("sink", "key"),
        Index(None, "sink", "state", "id"),
    )


class Lease(Base):
    """Which daemon does a singular job (``sink:slack``: deliver a sink's queue, keeping its
    order; ``job:retention``: a scheduled job) until ``expires_at``."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(SafeString(64), primary_key=True)
    holder: Mapped[str] = mapped_column(SafeString(255))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class SilenceEntry(Base):
    """``specwatch silence add``: mute a route (or one of its rules) for a while."""

    __tablename__ = "silences"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    route: Mapped[str] = mapped_column(SafeText())
    rule: Mapped[str | None] = mapped_column(SafeString(64), nullable=True)
    starts_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ends_at: Mapped[datetime] = mapped_column(UTCDateTime())
    reason: Mapped[str] = mapped_column(SafeText())
    created_by: Mapped[str] = mapped_column(SafeString(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (Index(None, "ends_at"),)


class BaselineRequest(Base):
    """``specwatch baseline accept``: an acknowledged change, applied by the daemon that
    owns the route (or by the next replay) in the checkpoint that resets the detectors."""

    __tablename__ = "baseline_requests"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    route: Mapped[str] = mapped_column(SafeText())
    reason: Mapped[str] = mapped_column(SafeText())
    requested_by: Mapped[str] = mapped_column(SafeString(255))
    requested_at: Mapped[datetime] = mapped_column(UTCDateTime())
    applied_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    applied_by: Mapped[str | None] = mapped_column(SafeString(255), nullable=True)

    __table_args__ = (Index(None, "applied_at"),)


metadata: MetaData = Base.metadata
series_table: Table = Series.__table__  # type: ignore[assignment]
rollups_table: Table = Rollup.__table__  # type: ignore[assignment]
partitions_table: Table = SourcePartition.__table__  # type: ignore[assignment]
dedup_table: Table = DedupLog.__table__  # type: ignore[assignment]
state_table: Table = StateSnapshot.__table__  # type: ignore[assignment]
alerts_table: Table = AlertEvent.__table__  # type: ignore[assignment]
episodes_table: Table = AlertEpisode.__table__  # type: ignore[assignment]
outbox_table: Table = OutboxEntry.__table__  # type: ignore[assignment]
leases_table: Table = Lease.__table__  # type: ignore[assignment]
silences_table: Table = SilenceEntry.__table__  # type: ignore[assignment]
baseline_table: Table = BaselineRequest.__table__  # type: ignore[assignment]


class FlagOffReport(Base):
    """One flag-off comparison of one route (``monitor/flagoff.py``): its verdict, summary
    line and the full report as JSON.

    Unique per (route, window): a rerun of the same week, or a second daemon running the
    job, updates the row instead of adding one. ``route_hash`` (sha256 of the route) carries
    that uniqueness for the reason ``series.key_hash`` does: routes are unbounded Unicode.
    """

    __tablename__ = "flag_off_reports"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    route: Mapped[str] = mapped_column(SafeText())
    route_hash: Mapped[str] = mapped_column(String(64))
    window_start: Mapped[datetime] = mapped_column(UTCDateTime())
    window_end: Mapped[datetime] = mapped_column(UTCDateTime())
    switched_at: Mapped[datetime] = mapped_column(UTCDateTime())
    verdict: Mapped[str] = mapped_column(SafeString(32))
    summary: Mapped[str] = mapped_column(SafeText())
    on_requests: Mapped[int] = mapped_column(BigInteger)
    off_requests: Mapped[int] = mapped_column(BigInteger)
    report: Mapped[Any] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        UniqueConstraint("route_hash", "window_start", "window_end"),
        Index(None, "window_end"),
    )


flag_off_table: Table = FlagOffReport.__table__  # type: ignore[assignment]


class SetupChange(Base):
    """One change of setup on a route (:class:`~monitor.change_record.ChangeRecord`): what
    changed, from what to what, and the live comparison's latest state.

    Keyed by (source, change_id): ``change_id`` is stable, so a replayed stretch rewrites
    the same row. No index on ``route``: routes are unbounded Unicode (see ``series``); the
    table holds a few rows per route and deploy, read by ``at``.
    """

    __tablename__ = "setup_changes"

    source: Mapped[str] = mapped_column(SafeString(255), primary_key=True)
    change_id: Mapped[str] = mapped_column(SafeString(128), primary_key=True)
    route: Mapped[str] = mapped_column(SafeText())
    temperature: Mapped[str] = mapped_column(SafeString(64))
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    kind: Mapped[str] = mapped_column(SafeString(32))
    previous: Mapped[Any] = mapped_column(JSON)
    current: Mapped[Any] = mapped_column(JSON)
    changed: Mapped[Any] = mapped_column(JSON)
    segment: Mapped[str] = mapped_column(SafeString(128))
    previous_segment: Mapped[str] = mapped_column(SafeString(128))
    live: Mapped[Any] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (Index(None, "at"),)


setup_changes_table: Table = SetupChange.__table__  # type: ignore[assignment]
experiment_rollups_table: Table = ExperimentRollup.__table__  # type: ignore[assignment]
slice_rollups_table: Table = SliceRollup.__table__  # type: ignore[assignment]
policies_table: Table = StoredPolicy.__table__  # type: ignore[assignment]
