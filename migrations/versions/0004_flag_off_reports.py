"""flag-off reports: the weekly comparison of routes that turned speculation off

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
_BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "flag_off_reports",
        sa.Column("id", _BIG_ID, autoincrement=True, nullable=False),
        sa.Column("route", sa.Text(), nullable=False),
        sa.Column("route_hash", sa.String(64), nullable=False),
        sa.Column("window_start", _TS, nullable=False),
        sa.Column("window_end", _TS, nullable=False),
        sa.Column("switched_at", _TS, nullable=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("on_requests", sa.BigInteger(), nullable=False),
        sa.Column("off_requests", sa.BigInteger(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_flag_off_reports"),
        sa.UniqueConstraint(
            "route_hash",
            "window_start",
            "window_end",
            name="uq_flag_off_reports_route_hash_window_start_window_end",
        ),
    )
    op.create_index("ix_flag_off_reports_window_end", "flag_off_reports", ["window_end"])


def downgrade() -> None:
    op.drop_index("ix_flag_off_reports_window_end", table_name="flag_off_reports")
    op.drop_table("flag_off_reports")
