"""Reading the journal back: what happened to a workload, and why."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import inspect, select
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from queue_controller.errors import InputError, JournalUnavailable
from queue_controller.journal.database import (
    SETTING,
    describe,
    is_sqlite,
    make_engine,
    parse_url,
    shown,
    sqlite_path,
)
from queue_controller.journal.model import TABLE, Entry, JournalRow, utc


def read_history(
    url: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    since: datetime | None = None,
    source: str | None = None,
    limit: int = 200,
) -> list[Entry]:
    """The newest ``limit`` entries that match every filter given, oldest first.

    ``since`` is inclusive; a naive time is taken as UTC.  ``source`` matches that
    source and those under it (``simulation:7`` matches ``simulation:7:gang-fit``, not
    ``simulation:70``).  Raises
    :class:`~queue_controller.errors.InputError` for a URL that cannot be used or a
    journal that does not exist, and
    :class:`~queue_controller.errors.JournalUnavailable` when the database cannot be read.
    """
    parsed = parse_url(url)
    if limit < 1:
        raise InputError(f"must be at least 1, not {limit}", field="limit")
    _require_sqlite_file(parsed)
    query = select(JournalRow)
    if namespace is not None:
        query = query.where(JournalRow.namespace == namespace)
    if name is not None:
        query = query.where(JournalRow.name == name)
    if since is not None:
        query = query.where(JournalRow.at >= utc(since))
    if source is not None:
        # A source names its parts too: "simulation:<run id>" is every policy of that run
        # ("simulation:<run id>:<policy>"), and "simulation" every simulation.
        query = query.where(
            (JournalRow.source == source)
            | JournalRow.source.startswith(f"{source}:", autoescape=True)
        )
    # Newest first so that LIMIT keeps the newest; the id orders entries of one instant
    # as they were written.
    query = query.order_by(JournalRow.at.desc(), JournalRow.id.desc()).limit(limit)
    engine = make_engine(parsed, writer=False)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table(TABLE):
                raise InputError(
                    f"no journal at {shown(parsed)}: it has no {TABLE} table yet "
                    "(the controller creates it when it starts)",
                    field=SETTING,
                )
            rows = Session(connection).scalars(query).all()
            return [row.to_entry() for row in reversed(rows)]
    except SQLAlchemyError as error:
        raise JournalUnavailable(
            f"cannot read the journal at {shown(parsed)}: {describe(error)}"
        ) from None
    finally:
        engine.dispose()


def _require_sqlite_file(url: URL) -> None:
    # SQLite creates a database file it is asked to open; a reader must not leave an
    # empty one behind for a mistyped path.
    if not is_sqlite(url):
        return
    path = sqlite_path(url)
    if path is not None and not path.is_file():
        raise InputError(f"no journal at {path}", field=SETTING)
