"""The SQL schema, as SQLAlchemy Core tables.

The store reads and writes through SQLAlchemy Core (executemany, few round trips), so the
schema is plain :class:`~sqlalchemy.Table` objects: declaring it with the ORM cost every
command about 80 ms of start-up (importing ``sqlalchemy.orm`` and mapping the classes) for
models nothing used. ``migrations/versions`` must create exactly this schema: a test
compares the two.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
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

from monitor.store.coltypes import SafeString, SafeText, UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

# SQLite only autoincrements an INTEGER PRIMARY KEY, not a BIGINT one.
_BigId = BigInteger().with_variant(Integer(), "sqlite")


def _col(name: str, type_: Any, *args: Any, nullable: bool = False, **kw: Any) -> Column[Any]:
    """A column that is NOT NULL unless said otherwise (what the schema means almost
    everywhere; Core's own default is the opposite)."""
    return Column(name, type_, *args, nullable=nullable, **kw)


def _id() -> Column[Any]:
    return Column("id", _BigId, primary_key=True, autoincrement=True)


def _series_id() -> Column[Any]:
    return Column("series_id", Integer, ForeignKey("series.id"), primary_key=True)


def _zero(name: str, type_: Any) -> Column[Any]:
    return _col(name, type_, server_default=text("0"))


def _bucket_columns() -> list[Column[Any]]:
    """The columns of one :class:`~monitor.aggregate.bucket.BucketStats` (``to_row()``).

    The task outcome and cost columns (telemetry v1.1, migration 0006) default to zero,
    and their sketches to null (an empty sketch): rows written before them read back as
    buckets where nothing was reported.
    """
    counts = ("requests", "errors", "spec_requests", "drafting_requests", "evicted_requests",
              "drafted_tokens", "accepted_tokens", "verify_steps", "output_tokens",
              "prompt_tokens", "batch_size_sum", "batch_size_count")
    outcome = ("successes", "outcome_ok_reported", "outcome_ok_true", "schema_valid_reported",
               "schema_valid_true", "tool_calls_valid_reported", "tool_calls_valid_true",
               "gpu_reported_requests")
    return [
        *(_col(name, BigInteger) for name in counts),
        *(_col(name, JSON) for name in ("per_position", "ttft_ms", "e2e_ms", "decode_tps")),
        *(_zero(name, BigInteger) for name in outcome),
        *(_zero(name, Float) for name in ("gpu_seconds", "gpu_seconds_sq",
                                          "success_gpu_seconds")),
        _col("itl_p50_ms", JSON, nullable=True),
        _col("itl_p99_ms", JSON, nullable=True),
    ]


# One ratio series (a :class:`~monitor.aggregate.series.SeriesKey`). ``key_hash`` (sha256
# of the key's JSON) carries uniqueness: a unique index over nine unbounded Unicode columns
# could exceed PostgreSQL's btree entry size.
series_table = Table(
    "series", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _col("key_hash", String(64), unique=True),
    *(_col(name, SafeText()) for name in (
        "route", "target_model", "target_revision", "target_tokenizer", "draft_model",
        "draft_revision", "draft_tokenizer", "method")),
    _col("num_speculative_tokens", Integer),
    _col("first_seen_at", UTCDateTime()),
    _col("last_seen_at", UTCDateTime()),
)

# A :class:`~monitor.aggregate.bucket.BucketStats` of one series over one bucket.
rollups_table = Table(
    "rollups", metadata,
    Column("granularity", String(6), primary_key=True),
    _series_id(),
    Column("bucket_start", UTCDateTime(), primary_key=True),
    *_bucket_columns(),
    Index(None, "granularity", "bucket_start"),
)

# The statistics of one series on one arm of one A/B experiment over one hour. Experiment
# and arm names are unbounded Unicode: their sha256 hashes (of the name, and of the arm)
# carry the key, as ``series.key_hash`` does.
experiment_rollups_table = Table(
    "experiment_rollups", metadata,
    Column("experiment_hash", String(64), primary_key=True),
    Column("arm_hash", String(64), primary_key=True),
    _series_id(),
    Column("bucket_start", UTCDateTime(), primary_key=True),
    _col("experiment", SafeText()),
    _col("arm", SafeText()),
    *_bucket_columns(),
    Index(None, "bucket_start"),
)

# The :class:`~monitor.policy.slices.SliceStats` of one series in one slice of pre-request
# signals over one hour: what ``specwatch policy`` learns from. ``slice_hash`` (sha256 of
# the four slice fields) carries the key, as ``series.key_hash`` does: the tag text is
# unbounded.
slice_rollups_table = Table(
    "slice_rollups", metadata,
    Column("slice_hash", String(64), primary_key=True),
    _series_id(),
    Column("bucket_start", UTCDateTime(), primary_key=True),
    *(_col(name, SafeString(32)) for name in ("batch_bucket", "prompt_bucket",
                                              "temperature_bucket")),
    _col("tags", SafeText()),
    *(_col(name, BigInteger) for name in (
        "requests", "drafting_requests", "drafted_tokens", "accepted_tokens", "verify_steps",
        "output_tokens", "timed_requests", "timed_output_tokens", "spec_timed",
        "plain_timed")),
    *(_col(name, Float) for name in (
        "decode_ms", "e2e_ms", "ttft_ms", "spec_step_ms", "spec_step_ms_sq", "plain_token_ms",
        "plain_token_ms_sq")),
    _col("per_position", JSON),
    Index(None, "bucket_start"),
)

# A policy computed by the daily job (or on request), with the time ranges of its inputs,
# so that the policy in force can be compared with a newer one.
policies_table = Table(
    "policies", metadata,
    _id(),
    _col("computed_at", UTCDateTime()),
    _col("train_since", UTCDateTime()),
    _col("train_until", UTCDateTime()),
    _col("holdout_until", UTCDateTime(), nullable=True),
    _col("features", SafeText()),
    _col("document", JSON),
    Index(None, "computed_at"),
)

# Where a source partition resumes; ``next_offset`` is the fencing token.
partitions_table = Table(
    "source_partitions", metadata,
    Column("source", SafeString(255), primary_key=True),
    Column("partition", Integer, primary_key=True, autoincrement=False),
    _col("next_offset", BigInteger),
    _col("max_event_ts", Float, nullable=True),
    _col("updated_at", UTCDateTime()),
)

# The request ids one checkpoint counted on one partition, for restart-time dedup. ``ids``
# is zlib-compressed JSON ``[[request_id, ts], ...]``: one row per checkpoint rather than
# one per request keeps writes to a single insert.
dedup_table = Table(
    "dedup_log", metadata,
    _id(),
    _col("source", SafeString(255)),
    _col("partition", Integer),
    _col("min_ts", Float),
    _col("max_ts", Float),
    _col("ids", LargeBinary),
    Index(None, "source", "partition", "max_ts"),
)

# An opaque, versioned JSON snapshot (detector state) under a key.
state_table = Table(
    "state_snapshots", metadata,
    Column("source", SafeString(255), primary_key=True),
    Column("key", SafeString(512), primary_key=True),
    _col("version", Integer),
    _col("data", JSON),
    _col("updated_at", UTCDateTime()),
)

# One alert state change (alerts v1 record), written with the checkpoint that decided it.
# The unique (fingerprint, state, at) makes a re-decided transition after a crash, or a
# replay of the same stretch, a no-op instead of a second record.
alerts_table = Table(
    "alert_events", metadata,
    _id(),
    _col("source", SafeString(255)),
    _col("fingerprint", SafeString(64)),
    _col("rule", SafeString(64)),
    _col("state", SafeString(16)),
    _col("at", UTCDateTime()),
    _col("severity", SafeString(16)),
    _col("route", SafeText()),
    _col("labels", JSON),
    _col("summary", SafeText()),
    _col("details", JSON),
    _col("recorded_at", UTCDateTime()),
    UniqueConstraint("fingerprint", "state", "at"),
    Index(None, "at"),
    Index(None, "rule", "at"),
)

# One episode of one alert as the lifecycle sees it: the projection the CLI, the API and
# the Alertmanager re-post read. The lifecycle's own state is its snapshot; this table is
# written from it in the same checkpoint transaction.
episodes_table = Table(
    "alert_episodes", metadata,
    Column("episode", SafeString(96), primary_key=True),
    _col("fingerprint", SafeString(64)),
    _col("rule", SafeString(64)),
    _col("severity", SafeString(16)),
    _col("route", SafeText()),
    _col("labels", JSON),
    _col("summary", SafeText()),
    _col("details", JSON),
    _col("state", SafeString(16)),
    _col("started_at", UTCDateTime()),
    _col("updated_at", UTCDateTime()),
    _col("resolved_at", UTCDateTime(), nullable=True),
    _col("notified", Boolean),
    _col("silenced_by", Integer, nullable=True),
    Index(None, "state"),
    Index(None, "started_at"),
)

# One notification for one sink, written before anything is sent. ``progress`` counts the
# sink's requests for this row already accepted, so a retry resumes after them;
# ``(sink, key)`` is unique, so a notification re-decided after a crash is the same row.
outbox_table = Table(
    "outbox", metadata,
    _id(),
    _col("sink", SafeString(32)),
    _col("key", SafeString(96)),
    _col("payload", JSON),
    _col("state", SafeString(16)),
    _col("attempts", Integer),
    _col("progress", Integer),
    _col("created_at", UTCDateTime()),
    _col("next_attempt_at", UTCDateTime()),
    _col("last_error", SafeText(), nullable=True),
    _col("delivered_at", UTCDateTime(), nullable=True),
    UniqueConstraint("sink", "key"),
    Index(None, "sink", "state", "id"),
)

# Which daemon does a singular job (``sink:slack``: deliver a sink's queue, keeping its
# order; ``job:retention``: a scheduled job) until ``expires_at``.
leases_table = Table(
    "leases", metadata,
    Column("name", SafeString(64), primary_key=True),
    _col("holder", SafeString(255)),
    _col("expires_at", UTCDateTime()),
)

# ``specwatch silence add``: mute a route (or one of its rules) for a while.
silences_table = Table(
    "silences", metadata,
    _id(),
    _col("route", SafeText()),
    _col("rule", SafeString(64), nullable=True),
    _col("starts_at", UTCDateTime()),
    _col("ends_at", UTCDateTime()),
    _col("reason", SafeText()),
    _col("created_by", SafeString(255)),
    _col("created_at", UTCDateTime()),
    Index(None, "ends_at"),
)

# ``specwatch baseline accept``: an acknowledged change, applied by the daemon that owns
# the route (or by the next replay) in the checkpoint that resets the detectors.
baseline_table = Table(
    "baseline_requests", metadata,
    _id(),
    _col("route", SafeText()),
    _col("reason", SafeText()),
    _col("requested_by", SafeString(255)),
    _col("requested_at", UTCDateTime()),
    _col("applied_at", UTCDateTime(), nullable=True),
    _col("applied_by", SafeString(255), nullable=True),
    Index(None, "applied_at"),
)

# One flag-off comparison of one route (``monitor/flagoff.py``): its verdict, summary line
# and the full report as JSON. Unique per (route, window): a rerun of the same week, or a
# second daemon running the job, updates the row instead of adding one. ``route_hash``
# (sha256 of the route) carries that uniqueness for the reason ``series.key_hash`` does:
# routes are unbounded Unicode.
flag_off_table = Table(
    "flag_off_reports", metadata,
    _id(),
    _col("route", SafeText()),
    _col("route_hash", String(64)),
    _col("window_start", UTCDateTime()),
    _col("window_end", UTCDateTime()),
    _col("switched_at", UTCDateTime()),
    _col("verdict", SafeString(32)),
    _col("summary", SafeText()),
    _col("on_requests", BigInteger),
    _col("off_requests", BigInteger),
    _col("report", JSON),
    _col("created_at", UTCDateTime()),
    _col("updated_at", UTCDateTime()),
    UniqueConstraint("route_hash", "window_start", "window_end"),
    Index(None, "window_end"),
)

# One change of setup on a route (:class:`~monitor.change_record.ChangeRecord`): what
# changed, from what to what, and the live comparison's latest state. Keyed by
# (source, change_id): ``change_id`` is stable, so a replayed stretch rewrites the same row.
# No index on ``route``: routes are unbounded Unicode (see ``series``); the table holds a
# few rows per route and deploy, read by ``at``.
setup_changes_table = Table(
    "setup_changes", metadata,
    Column("source", SafeString(255), primary_key=True),
    Column("change_id", SafeString(128), primary_key=True),
    _col("route", SafeText()),
    _col("temperature", SafeString(64)),
    _col("at", UTCDateTime()),
    _col("kind", SafeString(32)),
    _col("previous", JSON),
    _col("current", JSON),
    _col("changed", JSON),
    _col("segment", SafeString(128)),
    _col("previous_segment", SafeString(128)),
    _col("live", JSON),
    _col("updated_at", UTCDateTime()),
    Index(None, "at"),
)
