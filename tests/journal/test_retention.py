"""Retention: the journal keeps entries for an age and up to a count, pruned by its writer
a bounded batch at a time.  On SQLite here; on PostgreSQL too under ``make journal-test``
(the ``db_url`` fixture runs each test on both)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, func, select

from queue_controller.journal import Entry, Journal, migrate, read_history
from queue_controller.journal.database import make_engine, parse_url
from queue_controller.journal.model import JournalRow
from queue_controller.journal.retention import Retention, prune
from tests.journal.conftest import T0, entry

DAY = timedelta(days=1)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    migrate(db_url)
    made = make_engine(parse_url(db_url), writer=True)
    yield made
    made.dispose()


def write(db_url: str, entries: list[Entry]) -> None:
    journal = Journal(db_url, flush_interval=0.01)
    journal.start()
    for one in entries:
        journal.record(one)
    assert journal.flush(), journal.last_error
    journal.close()


def names(db_url: str) -> list[str]:
    return [e.name for e in read_history(db_url, limit=10_000)]


def count(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(JournalRow)).scalar_one())


def test_entries_older_than_the_age_are_pruned(db_url: str, engine: Engine) -> None:
    entries = [entry(f"old-{i}", minutes=-3 * 24 * 60 + i) for i in range(3)]
    entries += [entry(f"new-{i}", minutes=-60 + i) for i in range(2)]
    write(db_url, entries)
    done = prune(engine, Retention(max_age=2 * DAY, max_rows=None), now=T0)
    assert (done.rows, done.more) == (3, False)
    assert names(db_url) == ["new-0", "new-1"]


def test_a_simulation_s_simulated_times_are_no_age(db_url: str, engine: Engine) -> None:
    # A simulation journals times from 2026-01-01: the age bound is for the controller's.
    simulated = dataclasses.replace(entry("sim", minutes=-300 * 24 * 60), source="simulation:1")
    write(db_url, [simulated, entry("old", minutes=-300 * 24 * 60)])
    prune(engine, Retention(max_age=DAY, max_rows=None), now=T0)
    assert names(db_url) == ["sim"]


def test_the_newest_rows_are_kept_past_the_count(db_url: str, engine: Engine) -> None:
    write(db_url, [entry(f"e{i:02}", minutes=i) for i in range(25)])
    retention = Retention(max_age=None, max_rows=10, batch=4, batches_per_pass=2)
    first = prune(engine, retention, now=T0)
    assert (first.rows, first.more) == (8, True)  # stopped at its budget, said so
    rest = prune(engine, retention, now=T0)
    assert (rest.rows, rest.more) == (7, False)
    assert names(db_url) == [f"e{i:02}" for i in range(15, 25)]
    assert prune(engine, retention, now=T0).rows == 0


def test_every_delete_is_bounded_by_the_batch(db_url: str, engine: Engine) -> None:
    write(db_url, [entry(f"e{i}", minutes=-10 * 24 * 60 + i) for i in range(23)])
    deletes: list[int] = []

    def after(_conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE"):
            deletes.append(cursor.rowcount)

    event.listen(engine, "after_cursor_execute", after)
    done = prune(engine, Retention(max_age=DAY, max_rows=None, batch=5), now=T0)
    assert done.rows == 23
    assert deletes == [5, 5, 5, 5, 3]
    assert count(engine) == 0


def test_no_bound_keeps_everything(db_url: str, engine: Engine) -> None:
    write(db_url, [entry("ancient", minutes=-10_000 * 24 * 60)])
    assert not Retention.of(max_age_days=0, max_rows=0).bounded
    assert prune(engine, Retention(max_age=None, max_rows=None), now=T0).rows == 0
    assert names(db_url) == ["ancient"]


def test_the_writer_prunes_as_it_goes(db_url: str) -> None:
    now = datetime.now(tz=UTC)
    retention = Retention(max_age=DAY, max_rows=3, interval=0.05)
    journal = Journal(db_url, flush_interval=0.01, retention=retention)
    journal.start()
    try:
        for i in range(3):
            journal.record(dataclasses.replace(entry(f"old-{i}"), at=now - 40 * DAY))
        for i in range(5):
            journal.record(dataclasses.replace(entry(f"new-{i}"), at=now))
        assert journal.flush(), journal.last_error
        deadline = time.monotonic() + 10
        while journal.pruned < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert journal.pruned == 5
        assert journal.healthy
        assert names(db_url) == ["new-2", "new-3", "new-4"]
        # Entries go on being written after a pass.
        journal.record(dataclasses.replace(entry("later"), at=now))
        assert journal.flush(), journal.last_error
    finally:
        journal.close()
    assert "later" in names(db_url)


def test_a_journal_without_retention_prunes_nothing(sqlite_db: str) -> None:
    old = dataclasses.replace(entry("old"), at=datetime(2000, 1, 1, tzinfo=UTC))
    journal = Journal(sqlite_db, flush_interval=0.01)
    journal.start()
    journal.record(old)
    assert journal.flush()
    time.sleep(0.1)
    journal.close()
    assert journal.pruned == 0
    assert names(sqlite_db) == ["old"]
