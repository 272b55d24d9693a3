"""alert delivery: episodes, the outbox, leases, silences and baseline requests

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "alert_episodes",
        sa.Column("episode", sa.String(96), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("rule", sa.String(64), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("route", sa.Text(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.Column("resolved_at", _TS, nullable=True),
        sa.Column("notified", sa.Boolean(), nullable=False),
        sa.Column("silenced_by", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("episode", name="pk_alert_episodes"),
    )
    op.create_index("ix_alert_episodes_state", "alert_episodes", ["state"])
    op.create_index("ix_alert_episodes_started_at", "alert_episodes", ["started_at"])
    op.create_table(
        "outbox",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("sink", sa.String(32), nullable=False),
        sa.Column("key", sa.String(96), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("progress", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("next_attempt_at", _TS, nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
        sa.UniqueConstraint("sink", "key", name="uq_outbox_sink_key"),
    )
    op.create_index("ix_outbox_sink_state_id", "outbox", ["sink", "state", "id"])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_leases"),
    )
    op.create_table(
        "silences",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("route", sa.Text(), nullable=False),
        sa.Column("rule", sa.String(64), nullable=True),
        sa.Column("starts_at", _TS, nullable=False),
        sa.Column("ends_at", _TS, nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_silences"),
    )
    op.create_index("ix_silences_ends_at", "silences", ["ends_at"])
    op.create_table(
        "baseline_requests",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("route", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("requested_by", sa.String(255), nullable=False),
        sa.Column("requested_at", _TS, nullable=False),
        sa.Column("applied_at", _TS, nullable=True),
        sa.Column("applied_by", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_baseline_requests"),
    )
    op.create_index("ix_baseline_requests_applied_at", "baseline_requests", ["applied_at"])


def downgrade() -> None:
    op.drop_index("ix_baseline_requests_applied_at", table_name="baseline_requests")
    op.drop_table("baseline_requests")
    op.drop_index("ix_silences_ends_at", table_name="silences")
    op.drop_table("silences")
    op.drop_table("leases")
    op.drop_index("ix_outbox_sink_state_id", table_name="outbox")
    op.drop_table("outbox")
    op.drop_index("ix_alert_episodes_started_at", table_name="alert_episodes")
    op.drop_index("ix_alert_episodes_state", table_name="alert_episodes")
    op.drop_table("alert_episodes")
