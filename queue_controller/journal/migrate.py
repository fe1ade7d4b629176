"""``alembic upgrade head`` for the journal, run from code: there is no alembic.ini."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

from queue_controller.journal.database import make_engine, parse_url

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(connection: Connection | None = None) -> Config:
    """The journal's Alembic config, pointed at the migrations in this package."""
    config = Config()
    # Config values go through configparser interpolation, which reads "%" specially.
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(connection: Connection) -> None:
    """Bring the journal's schema on ``connection`` to the newest revision, and commit."""
    command.upgrade(alembic_config(connection), "head")
    connection.commit()


def migrate(url: str) -> None:
    """Create or upgrade the journal's table at ``url``.  Running it again changes nothing.

    Raises :class:`~queue_controller.errors.InputError` for a URL that cannot be used, and
    SQLAlchemy's own errors when the database cannot be reached.
    """
    engine = make_engine(parse_url(url), writer=True)
    try:
        with engine.connect() as connection:
            upgrade(connection)
    finally:
        engine.dispose()
