"""policy: per-slice hourly rollups of pre-request signals, and stored policies

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies (a migration must not change when monitor/policy/slices.py does).
_TS = sa.DateTime(timezone=True)
_COUNTERS = (
    "requests",
    "drafting_requests",
    "drafted_tokens",
    "accepted_tokens",
    "verify_steps",
    "output_tokens",
    "timed_requests",
    "timed_output_tokens",
    "spec_timed",
    "plain_timed",
)
_FLOATS = (
    "decode_ms",
    "e2e_ms",
    "ttft_ms",
    "spec_step_ms",
    "spec_step_ms_sq",
    "plain_token_ms",
    "plain_token_ms_sq",
)


def upgrade() -> None:
    op.create_table(
        "slice_rollups",
        sa.Column("slice_hash", sa.String(64), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("bucket_start", _TS, nullable=False),
        sa.Column("batch_bucket", sa.String(32), nullable=False),
        sa.Column("prompt_bucket", sa.String(32), nullable=False),
        sa.Column("temperature_bucket", sa.String(32), nullable=False),
        sa.Column("tags", sa.Text(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in _COUNTERS),
        *(sa.Column(name, sa.Float(), nullable=False) for name in _FLOATS),
        sa.Column("per_position", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("slice_hash", "series_id", "bucket_start",
                                name="pk_slice_rollups"),
        sa.ForeignKeyConstraint(["series_id"], ["series.id"],
                                name="fk_slice_rollups_series_id_series"),
    )
    op.create_index("ix_slice_rollups_bucket_start", "slice_rollups", ["bucket_start"])
    op.create_table(
        "policies",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                  autoincrement=True, nullable=False),
        sa.Column("computed_at", _TS, nullable=False),
        sa.Column("train_since", _TS, nullable=False),
        sa.Column("train_until", _TS, nullable=False),
        sa.Column("holdout_until", _TS, nullable=True),
        sa.Column("features", sa.Text(), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_policies"),
    )
    op.create_index("ix_policies_computed_at", "policies", ["computed_at"])


def downgrade() -> None:
    op.drop_index("ix_policies_computed_at", table_name="policies")
    op.drop_table("policies")
    op.drop_index("ix_slice_rollups_bucket_start", table_name="slice_rollups")
    op.drop_table("slice_rollups")
