"""task outcome and cost: outcome, GPU-second and inter-token gap columns on the rollups,
and per-arm rollups of A/B experiments

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies (a migration must not change when monitor/store/tables.py does).
_TS = sa.DateTime(timezone=True)
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
_SKETCHES = ("ttft_ms", "e2e_ms", "decode_tps")
_NEW_COUNTERS = (
    "successes",
    "outcome_ok_reported",
    "outcome_ok_true",
    "schema_valid_reported",
    "schema_valid_true",
    "tool_calls_valid_reported",
    "tool_calls_valid_true",
    "gpu_reported_requests",
)
_NEW_FLOATS = ("gpu_seconds", "gpu_seconds_sq", "success_gpu_seconds")
_NEW_SKETCHES = ("itl_p50_ms", "itl_p99_ms")


def _new_columns() -> list[sa.Column]:
    # Rows already stored read back as buckets where nothing was reported: zero counts,
    # no sketch; upgrade() then fills their successes (see there).
    return [
        *(sa.Column(n, sa.BigInteger(), server_default=sa.text("0"), nullable=False)
          for n in _NEW_COUNTERS),
        *(sa.Column(n, sa.Float(), server_default=sa.text("0"), nullable=False)
          for n in _NEW_FLOATS),
        *(sa.Column(n, sa.JSON(), nullable=True) for n in _NEW_SKETCHES),
    ]


def upgrade() -> None:
    with op.batch_alter_table("rollups") as batch:
        for column in _new_columns():
            batch.add_column(column)
    # Before v1.1 no event reported an outcome, so a successful task was a request with
    # status ok: exactly requests - errors. GPU time cannot be recovered (the estimate needs
    # each request's batch size), so it stays zero for those rows.
    op.execute("UPDATE rollups SET successes = requests - errors")
    op.create_table(
        "experiment_rollups",
        sa.Column("experiment_hash", sa.String(64), nullable=False),
        sa.Column("arm_hash", sa.String(64), nullable=False),
        sa.Column("series_id", sa.Integer(), nullable=False),
        sa.Column("bucket_start", _TS, nullable=False),
        sa.Column("experiment", sa.Text(), nullable=False),
        sa.Column("arm", sa.Text(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in _COUNTERS),
        sa.Column("per_position", sa.JSON(), nullable=False),
        *(sa.Column(name, sa.JSON(), nullable=False) for name in _SKETCHES),
        *_new_columns(),
        sa.PrimaryKeyConstraint(
            "experiment_hash", "arm_hash", "series_id", "bucket_start",
            name="pk_experiment_rollups",
        ),
        sa.ForeignKeyConstraint(
            ["series_id"], ["series.id"], name="fk_experiment_rollups_series_id_series"
        ),
    )
    op.create_index(
        "ix_experiment_rollups_bucket_start", "experiment_rollups", ["bucket_start"]
    )


def downgrade() -> None:
    op.drop_index("ix_experiment_rollups_bucket_start", table_name="experiment_rollups")
    op.drop_table("experiment_rollups")
    with op.batch_alter_table("rollups") as batch:
        for name in (*_NEW_COUNTERS, *_NEW_FLOATS, *_NEW_SKETCHES):
            batch.drop_column(name)
