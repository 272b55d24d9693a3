"""setup changes: each new setup on a route, the one it replaced, and the live comparison

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "setup_changes",
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("change_id", sa.String(128), nullable=False),
        sa.Column("route", sa.Text(), nullable=False),
        sa.Column("temperature", sa.String(64), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("previous", sa.JSON(), nullable=False),
        sa.Column("current", sa.JSON(), nullable=False),
        sa.Column("changed", sa.JSON(), nullable=False),
        sa.Column("segment", sa.String(128), nullable=False),
        sa.Column("previous_segment", sa.String(128), nullable=False),
        sa.Column("live", sa.JSON(), nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("source", "change_id", name="pk_setup_changes"),
    )
    op.create_index("ix_setup_changes_at", "setup_changes", ["at"])


def downgrade() -> None:
    op.drop_index("ix_setup_changes_at", table_name="setup_changes")
    op.drop_table("setup_changes")
