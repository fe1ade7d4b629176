"""Alembic's environment for the journal.

Only :func:`queue_controller.journal.migrate` runs it, and always hands it an open
connection: the URL (and its password) never goes through Alembic's config file.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from queue_controller.journal.model import VERSION_TABLE, Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        # Each revision commits on its own, so a failure leaves the database at the
        # last revision that completed rather than half way through one.
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _main() -> None:
    connection = context.config.attributes.get("connection")
    if context.is_offline_mode() or not isinstance(connection, Connection):
        raise RuntimeError("the journal's migrations run only through journal.migrate()")
    _run(connection)


_main()
