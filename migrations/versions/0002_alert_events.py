"""alert events: every alert state change, written with its checkpoint

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "alert_events",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("rule", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("route", sa.Text(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("recorded_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_alert_events"),
        sa.UniqueConstraint(
            "fingerprint", "state", "at", name="uq_alert_events_fingerprint_state_at"
        ),
    )
    op.create_index("ix_alert_events_at", "alert_events", ["at"])
    op.create_index("ix_alert_events_rule_at", "alert_events", ["rule", "at"])


def downgrade() -> None:
    op.drop_index("ix_alert_events_rule_at", table_name="alert_events")
    op.drop_index("ix_alert_events_at", table_name="alert_events")
    op.drop_table("alert_events")
