"""Fixtures for the journal's tests: one database per test, on SQLite and on PostgreSQL.

The PostgreSQL half needs a real server: ``make journal-test`` starts one with
``tests/journal/postgres.sh`` and passes its URL in ``QC_TEST_POSTGRES_URL``.  Without
that variable those tests fail and say so, rather than pass by being skipped.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from queue_controller.journal import Entry, Journal, JournalEvent

HERE = Path(__file__).parent
POSTGRES_SH = HERE / "postgres.sh"
ENV_POSTGRES = "QC_TEST_POSTGRES_URL"
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def postgres_url() -> str:
    url = os.environ.get(ENV_POSTGRES)
    if not url:
        pytest.fail(
            f"{ENV_POSTGRES} is not set: run the PostgreSQL tests with `make journal-test`, "
            "or set it to a server's URL (tests/journal/postgres.sh start prints one)",
            pytrace=False,
        )
    return url


@pytest.fixture
def postgres_db() -> Iterator[str]:
    """A URL for a fresh, empty schema of its own on the real PostgreSQL server."""
    server = postgres_url()
    schema = f"journal_test_{secrets.token_hex(4)}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE SCHEMA {schema}"))
        # Everything the journal makes then lands in the schema: its table and
        # Alembic's version table alike.
        yield (
            make_url(server)
            .update_query_dict({"options": f"-csearch_path={schema}"})
            .render_as_string(hide_password=False)
        )
        with admin.connect() as connection:
            connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    finally:
        admin.dispose()


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'journal.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """The same test on SQLite and on PostgreSQL."""
    fixture = "sqlite_db" if request.param == "sqlite" else "postgres_db"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
def journal(db_url: str) -> Iterator[Journal]:
    """A started journal that writes quickly, closed after the test."""
    journal = Journal(db_url, flush_interval=0.05)
    journal.start()
    assert journal.healthy, journal.last_error
    yield journal
    journal.close()


def dead_port() -> int:
    """A loopback port where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def entry(
    name: str = "train",
    *,
    namespace: str = "prod",
    minutes: float = 0,
    event: JournalEvent = JournalEvent.PENDING,
    reason: str = "NoNodeFit",
    **fields: object,
) -> Entry:
    return Entry(
        at=T0 + timedelta(minutes=minutes),
        namespace=namespace,
        name=name,
        queue=str(fields.pop("queue", "batch")),
        event=event,
        reason=reason,
        **fields,  # type: ignore[arg-type]
    )
