"""initial schema: series, rollups, source partitions, dedup log, state snapshots

Revision ID: 0001
Revises:
Create Date: 2026-11-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the types: a migration must not change when monitor/store/tables.py does.
# timestamptz on PostgreSQL; plain DATETIME (naive UTC) on SQLite.
_TS = sa.DateTime(timezone=True)
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_COUNTERS = (
    "requests",
    "errors",
    "spec_requests",
    "drafting_requests",
    "evicted_requests",
    "drafted_tokens",
    "accepted_tokens",
    "verify_steps",
    "output_tokens",
    "prompt_tokens",
    "batch_size_sum",
    "batch_size_count",
)
_STRINGS = (
    "route",
    "target_model",
    "target_revision",
    "target_tokenizer",
    "draft_model",
    "draft_revision",
    "draft_tokenizer",
    "method",
)


def upgrade() -> None:
    op.create_table(
        "series",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        *(sa.Column(name, sa.Text(), nullable=False) for name in _STRINGS),
        sa.Column("num_speculative_tokens", sa.Integer(), nullable=False),
        sa.Column("first_seen_at", _TS, nullable=False),
        sa.Column("last_seen_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_series"),
        sa.UniqueConstraint("key_hash", name="uq_series_key_hash"),
    )
    op.create_table(
        "rollups",
        sa.Column("granularity", sa.String(6), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("bucket_start", _TS, nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in _COUNTERS),
        sa.Column("per_position", sa.JSON(), nullable=False),
        sa.Column("ttft_ms", sa.JSON(), nullable=False),
        sa.Column("e2e_ms", sa.JSON(), nullable=False),
        sa.Column("decode_tps", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("granularity", "series_id", "bucket_start", name="pk_rollups"),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"], name="fk_rollups_series_id_series"),
    )
    op.create_index(
        "ix_rollups_granularity_bucket_start", "rollups", ["granularity", "bucket_start"]
    )
    op.create_table(
        "source_partitions",
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("next_offset", sa.BigInteger(), nullable=False),
        sa.Column("max_event_ts", sa.Float(), nullable=True),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("source", "partition", name="pk_source_partitions"),
    )
    op.create_table(
        "dedup_log",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("min_ts", sa.Float(), nullable=False),
        sa.Column("max_ts", sa.Float(), nullable=False),
        sa.Column("ids", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_dedup_log"),
    )
    op.create_index(
        "ix_dedup_log_source_partition_max_ts", "dedup_log", ["source", "partition", "max_ts"]
    )
    op.create_table(
        "state_snapshots",
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("source", "key", name="pk_state_snapshots"),
    )


def downgrade() -> None:
    op.drop_table("state_snapshots")
    op.drop_index("ix_dedup_log_source_partition_max_ts", table_name="dedup_log")
    op.drop_table("dedup_log")
    op.drop_table("source_partitions")
    op.drop_index("ix_rollups_granularity_bucket_start", table_name="rollups")
    op.drop_table("rollups")
    op.drop_table("series")
