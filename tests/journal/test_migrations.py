"""The Alembic revision and the SQLAlchemy model describe one table."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect

from queue_controller.journal import migrate
from queue_controller.journal.migrate import alembic_config
from queue_controller.journal.model import TABLE, VERSION_TABLE, Base


def test_the_migration_builds_exactly_the_model(db_url: str) -> None:
    migrate(db_url)
    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection,
                opts={"compare_type": True, "version_table": VERSION_TABLE},
            )
            assert compare_metadata(context, Base.metadata) == []
            tables = set(inspect(connection).get_table_names())
            indexes = {i["name"]: i["column_names"] for i in inspect(connection).get_indexes(TABLE)}
    finally:
        engine.dispose()
    assert tables == {TABLE, VERSION_TABLE}
    assert indexes == {
        "ix_journal_entries_namespace_name_at": ["namespace", "name", "at"],
        "ix_journal_entries_at": ["at"],
    }


def test_the_comparison_would_see_a_difference(sqlite_db: str) -> None:
    # Guard against a comparison that passes vacuously: an empty database differs.
    engine = create_engine(sqlite_db)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert [diff[0] for diff in compare_metadata(context, Base.metadata)] == [
                "add_table",
                "add_index",
                "add_index",
            ]
    finally:
        engine.dispose()


def test_one_head_and_the_database_is_at_it(sqlite_db: str) -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    [head] = scripts.get_heads()
    assert head == "0002_runtime_class"
    migrate(sqlite_db)
    engine = create_engine(sqlite_db)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(
                connection, opts={"version_table": VERSION_TABLE}
            ).get_current_revision()
    finally:
        engine.dispose()
    assert current == head
