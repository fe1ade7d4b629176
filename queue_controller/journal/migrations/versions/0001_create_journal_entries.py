"""Create journal_entries: one row per decision about one workload.

Revision ID: 0001_create_journal_entries
Revises:
Create Date: 2026-12-01

Written by hand, and frozen: it spells out its own column types rather than import
the model's, so a later change to the model cannot change what this revision did.
``tests/journal/test_migrations.py`` holds the model to the result.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001_create_journal_entries"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "journal_entries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("kind", sa.String(253), nullable=False),
        sa.Column("uid", sa.String(253), nullable=False),
        sa.Column("queue", sa.String(253), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("reason", sa.String(253), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("placement", sa.JSON(), nullable=False),
        sa.Column("requeue_count", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(253), nullable=False),
    )
    op.create_index(
        "ix_journal_entries_namespace_name_at", "journal_entries", ["namespace", "name", "at"]
    )
    op.create_index("ix_journal_entries_at", "journal_entries", ["at"])


def downgrade() -> None:
    op.drop_index("ix_journal_entries_at", table_name="journal_entries")
    op.drop_index("ix_journal_entries_namespace_name_at", table_name="journal_entries")
    op.drop_table("journal_entries")
