"""A journal whose database is away: it buffers, reports, never blocks nor raises, and
catches up when the database is back."""

from __future__ import annotations

import importlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_controller.journal import Journal, read_history
from tests.journal.conftest import POSTGRES_SH, dead_port, entry, postgres_url


def wait_until(condition: object, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_an_unreachable_server_degrades_the_journal_and_never_the_caller() -> None:
    url = f"postgresql+psycopg://journal:secret@127.0.0.1:{dead_port()}/journal"
    journal = Journal(url, buffer_size=50, flush_interval=0.01)
    # What is measured is start() blocking on the dead server, not the first import of
    # the PostgreSQL driver and the migrations, which took seconds on a loaded machine.
    importlib.import_module("psycopg")
    importlib.import_module("alembic.command")
    started = time.monotonic()
    journal.start()  # does not raise
    assert time.monotonic() - started < 3
    assert not journal.healthy
    assert journal.last_error is not None
    assert "OperationalError" in journal.last_error
    assert "secret" not in journal.last_error

    started = time.monotonic()
    for i in range(1000):
        journal.record(entry(f"job-{i}"))
    # Queuing is a list append: a thousand take milliseconds, database or not.
    assert time.monotonic() - started < 0.5
    # Bounded: the oldest are dropped, the newest 50 wait.
    assert journal.dropped == 950
    assert journal.written == 0
    assert not journal.flush(timeout=0.2)
    assert not journal.healthy

    started = time.monotonic()
    journal.close()
    assert time.monotonic() - started < 3
    assert journal.dropped == 1000  # what was left unwritten at close counts too


def test_a_sqlite_file_that_cannot_be_opened_yet_is_written_once_it_can(tmp_path: Path) -> None:
    folder = tmp_path / "not-yet"
    url = f"sqlite:///{folder / 'journal.db'}"
    journal = Journal(url, flush_interval=0.01)
    journal.start()
    try:
        assert not journal.healthy
        assert journal.last_error is not None
        for i in range(20):
            journal.record(entry(minutes=i))
        folder.mkdir()
        assert journal.flush(timeout=15)
        assert journal.healthy
        assert (journal.written, journal.dropped) == (20, 0)
    finally:
        journal.close()
    assert len(read_history(url)) == 20


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A second PostgreSQL cluster of this test's own, to stop and start at will."""
    postgres_url()  # the PostgreSQL tests run only where a server can be had
    env = {**os.environ, "QC_POSTGRES_DIR": str(tmp_path / "postgres")}
    try:
        url = subprocess.run(
            [str(POSTGRES_SH), "start"], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        yield url, env
    except subprocess.CalledProcessError as error:
        pytest.fail(f"postgres.sh start failed:\n{error.stderr}")
    finally:
        subprocess.run([str(POSTGRES_SH), "stop"], env=env, capture_output=True, check=False)


def postgres_sh(command: str, env: dict[str, str]) -> None:
    subprocess.run([str(POSTGRES_SH), command], env=env, check=True, capture_output=True)


@pytest.mark.postgres
def test_entries_recorded_during_an_outage_are_written_after_it(
    own_server: tuple[str, dict[str, str]],
) -> None:
    url, env = own_server
    journal = Journal(url, flush_interval=0.01)
    journal.start()
    try:
        assert journal.healthy, journal.last_error
        for i in range(10):
            journal.record(entry("before", minutes=i))
        assert journal.flush()

        postgres_sh("halt", env)
        for i in range(25):
            journal.record(entry("during", minutes=10 + i))
        assert wait_until(lambda: not journal.healthy)
        assert journal.last_error is not None
        assert not journal.flush(timeout=0.5)

        postgres_sh("resume", env)
        assert journal.flush(timeout=30), journal.last_error
        assert journal.healthy
        for i in range(5):
            journal.record(entry("after", minutes=40 + i))
        assert journal.flush()
    finally:
        journal.close()
    assert (journal.written, journal.dropped) == (40, 0)
    names = [e.name for e in read_history(url)]
    assert names == ["before"] * 10 + ["during"] * 25 + ["after"] * 5
