"""Add journal_entries.runtime_class: what like gangs share in the runtime history.

Revision ID: 0002_runtime_class
Revises: 0001_create_journal_entries
Create Date: 2026-12-04

Reservation with backfill estimates a gang's runtime from like gangs that finished
(journal/runtimes.py); gangs are alike by their ``queue-controller.io/runtime-class``
label, kept here, or else by their name.  Entries written before have none ("").
Written by hand, and frozen, as 0001 is.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_runtime_class"
down_revision: str | None = "0001_create_journal_entries"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.add_column(
        "journal_entries",
        sa.Column("runtime_class", sa.String(253), nullable=False, server_default=""),
    )


def downgrade() -> None:
    with op.batch_alter_table("journal_entries") as batch:
        batch.drop_column("runtime_class")
