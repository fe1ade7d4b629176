"""Which databases the journal accepts, how it connects to them, and how their errors read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from queue_controller.errors import InputError

DEFAULT_URL = "sqlite:///queue-controller-journal.db"
SETTING = "journal URL"

# Drivers this package installs.  A bare ``postgresql://`` would mean psycopg2, which is
# not installed: it is taken as psycopg 3, the one that is.
_DRIVERS = {
    "sqlite": "sqlite+pysqlite",
    "sqlite+pysqlite": "sqlite+pysqlite",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}
_EXAMPLES = "sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
# Seconds to wait for a PostgreSQL server before counting it unreachable.
CONNECT_TIMEOUT = 5


def parse_url(url: str, *, setting: str = SETTING) -> URL:
    """The URL, or an :class:`InputError` naming ``setting`` if it is not one we can use."""
    text = url.strip()
    try:
        parsed = make_url(text)
    except (ArgumentError, ValueError):
        raise InputError(f"{url!r} is not a database URL; use {_EXAMPLES}", field=setting) from None
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise InputError(
            f"unsupported database {parsed.drivername!r} in {parsed!s}; use {_EXAMPLES}",
            field=setting,
        )
    parsed = parsed.set(drivername=driver)
    if is_sqlite(parsed):
        if parsed.query:
            raise InputError(
                f"{parsed!s}: SQLite URL options are not supported; use sqlite:///PATH",
                field=setting,
            )
    elif not parsed.database:
        raise InputError(f"{parsed!s} names no database; use {_EXAMPLES}", field=setting)
    return parsed


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL; None for an in-memory database."""
    if not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def shown(url: URL) -> str:
    """The URL as it may be printed: never with the password."""
    return url.render_as_string(hide_password=True)


def make_engine(url: URL, *, writer: bool) -> Engine:
    """An engine for one thread's use: the journal's writer, or one read."""
    if is_sqlite(url):
        engine = create_engine(url)
        event.listen(engine, "connect", _sqlite_writer if writer else _sqlite_reader)
        return engine
    # Pre-ping finds the connection a restarted server left dead before a batch does.
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=1,
        max_overflow=1,
        connect_args={"connect_timeout": CONNECT_TIMEOUT, "application_name": "queue-controller"},
    )


def _sqlite_writer(connection: Any, _record: Any) -> None:
    # WAL lets `queue-controller history` read while the controller writes; NORMAL
    # sync is safe under WAL and costs one fsync per checkpoint instead of per batch.
    _pragmas(connection, "journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=5000")


def _sqlite_reader(connection: Any, _record: Any) -> None:
    # Wait briefly for a writer's lock rather than fail the read at once.
    _pragmas(connection, "busy_timeout=5000")


def _pragmas(connection: Any, *pragmas: str) -> None:
    cursor = connection.cursor()
    try:
        for pragma in pragmas:
            cursor.execute(f"PRAGMA {pragma}")
    finally:
        cursor.close()


def describe(error: BaseException) -> str:
    """One line: the driver's own message, without SQLAlchemy's SQL and links."""
    cause = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
    lines = str(cause).strip().splitlines()
    first = lines[0].strip() if lines else ""
    return f"{type(cause).__name__}: {first}" if first else type(cause).__name__
