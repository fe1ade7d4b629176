"""The journal's shared behaviour, on SQLite and on a real PostgreSQL server alike."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from queue_controller.errors import InputError
from queue_controller.journal import Entry, Journal, JournalEvent, migrate, read_history
from tests.journal.conftest import T0, entry


def test_every_field_round_trips(journal: Journal, db_url: str) -> None:
    # A time in another zone comes back as the same instant, in UTC.
    at = datetime(2026, 12, 1, 10, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    recorded = Entry(
        at=at,
        namespace="research",
        name="pretrain-70b",
        queue="training",
        event=JournalEvent.ADMITTED,
        reason="Admitted",
        message="borrows 8 nvidia.com/gpu from cohort gpu-pool — ünïcode",
        kind="JobSet",
        uid="0b7e2a8c-52c4-4e2b-9d55-3e7f4c1a9b10",
        placement={"h100-1": 8, "h100-7": 4},
        requeue_count=3,
        source="simulation:run-42",
    )
    journal.record(recorded)
    assert journal.flush()
    [back] = read_history(db_url)
    assert back == dataclasses.replace(recorded, at=at.astimezone(UTC))
    assert back.at.tzinfo is not None
    assert back.at.utcoffset() == timedelta(0)
    assert back.at == at
    assert back.event is JournalEvent.ADMITTED
    assert journal.written == 1
    assert journal.dropped == 0


def test_defaults_round_trip(journal: Journal, db_url: str) -> None:
    journal.record(entry())
    assert journal.flush()
    [back] = read_history(db_url)
    assert (back.message, back.kind, back.uid, back.placement) == ("", "Job", "", {})
    assert (back.requeue_count, back.source) == (0, "controller")


def test_source_matches_the_sources_under_it(journal: Journal, db_url: str) -> None:
    # A simulation run records one source per policy: "simulation:<run id>:<policy>".
    for minutes, source in enumerate(
        [
            "simulation:run-1:gang-fit",
            "simulation:run-1:per-pod",
            "simulation:run-10:gang-fit",
            "simulation:run-1",
            "simulation:run_1:gang-fit",  # LIKE wildcards in a source are taken literally
            "controller",
        ]
    ):
        journal.record(entry(minutes=minutes, source=source))
    assert journal.flush()

    def sources(source: str) -> list[str]:
        return [e.source for e in read_history(db_url, source=source)]

    assert sources("simulation:run-1") == [
        "simulation:run-1:gang-fit",
        "simulation:run-1:per-pod",
        "simulation:run-1",
    ]
    assert sources("simulation:run-1:per-pod") == ["simulation:run-1:per-pod"]
    assert sources("simulation:run-") == []
    assert len(sources("simulation")) == 5
    assert sources("controller") == ["controller"]
    assert sources("simulation:run_1") == ["simulation:run_1:gang-fit"]
    assert sources("simulation:run%") == []


def test_every_event_is_stored_by_its_value(journal: Journal, db_url: str) -> None:
    for minutes, event in enumerate(JournalEvent):
        journal.record(entry(minutes=minutes, event=event, reason=event.value))
    assert journal.flush()
    assert [e.event for e in read_history(db_url)] == list(JournalEvent)


def test_newest_last_and_ties_in_recording_order(journal: Journal, db_url: str) -> None:
    # Recorded out of time order; two at the same instant keep the order they came in.
    for minutes, reason in [(5, "c"), (1, "a"), (9, "e"), (5, "d"), (3, "b")]:
        journal.record(entry(minutes=minutes, reason=reason))
    assert journal.flush()
    assert [e.reason for e in read_history(db_url)] == ["a", "b", "c", "d", "e"]


def test_filters(journal: Journal, db_url: str) -> None:
    journal.record(entry("train", minutes=0, reason="QuotaExceeded"))
    journal.record(entry("train", minutes=10, event=JournalEvent.ADMITTED, reason="Admitted"))
    journal.record(entry("eval", minutes=20))
    journal.record(entry("train", namespace="research", minutes=30))
    journal.record(entry("train", minutes=40, source="simulation:7"))
    assert journal.flush()

    def who(**filters: object) -> list[tuple[str, int]]:
        entries = read_history(db_url, **filters)  # type: ignore[arg-type]
        return [(e.workload, int((e.at - T0).total_seconds() // 60)) for e in entries]

    assert who(namespace="prod", name="train") == [
        ("prod/train", 0),
        ("prod/train", 10),
        ("prod/train", 40),
    ]
    assert who(namespace="research") == [("research/train", 30)]
    assert who(name="eval") == [("prod/eval", 20)]
    # `since` is inclusive, and any zone (or none: UTC) names the same instant.
    assert who(since=T0 + timedelta(minutes=20)) == [
        ("prod/eval", 20),
        ("research/train", 30),
        ("prod/train", 40),
    ]
    eastern = timezone(timedelta(hours=-5))
    assert who(since=(T0 + timedelta(minutes=30)).astimezone(eastern)) == [
        ("research/train", 30),
        ("prod/train", 40),
    ]
    assert who(since=(T0 + timedelta(minutes=31)).replace(tzinfo=None)) == [("prod/train", 40)]
    assert who(source="simulation:7") == [("prod/train", 40)]
    assert len(who(source="controller")) == 4
    assert who(source="simulation:8") == []
    # The limit keeps the newest, still oldest first.
    assert who(limit=2) == [("research/train", 30), ("prod/train", 40)]
    assert who(namespace="prod", name="train", since=T0 + timedelta(minutes=5), limit=1) == [
        ("prod/train", 40)
    ]


def test_a_recreated_job_is_told_apart_by_uid(journal: Journal, db_url: str) -> None:
    journal.record(entry(minutes=0, uid="first", event=JournalEvent.FINISHED, reason="Succeeded"))
    journal.record(entry(minutes=5, uid="second"))
    assert journal.flush()
    assert [e.uid for e in read_history(db_url, namespace="prod", name="train")] == [
        "first",
        "second",
    ]


def test_records_from_many_threads_are_all_written(journal: Journal, db_url: str) -> None:
    # The writer thread owns the connection; callers on any thread only queue.
    def worker(number: int) -> None:
        for i in range(50):
            journal.record(entry(f"job-{number}", minutes=i))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert journal.flush()
    assert journal.written == 400
    assert len(read_history(db_url, limit=1000)) == 400
    assert [e.at for e in read_history(db_url, name="job-3", limit=100)] == [
        T0 + timedelta(minutes=i) for i in range(50)
    ]


def test_batches_larger_than_one_transaction(journal: Journal, db_url: str) -> None:
    for i in range(1234):
        journal.record(entry(f"job-{i}"))
    assert journal.flush()
    assert journal.written == 1234
    assert len(read_history(db_url, limit=5000)) == 1234


def test_awkward_text_is_stored_not_refused(journal: Journal, db_url: str) -> None:
    # PostgreSQL refuses NUL in text and over-long VARCHARs: neither may cost the entry.
    journal.record(entry("train", reason="R" * 1000, message="a\x00b", queue="q" * 300))
    assert journal.flush()
    [back] = read_history(db_url)
    assert back.message == "a\ufffdb"
    assert back.reason == "R" * 253
    assert back.queue == "q" * 253
    assert journal.dropped == 0


def test_a_bad_entry_is_dropped_and_the_rest_written(journal: Journal, db_url: str) -> None:
    journal.record(entry("before"))
    journal.record(entry("bad", placement={"h100-1": "lots"}))
    journal.record(entry("huge", requeue_count=2**40))  # past a 32-bit INTEGER
    journal.record(entry("after"))
    assert journal.flush()
    names = [e.name for e in read_history(db_url)]
    if db_url.startswith("sqlite"):
        assert names == ["before", "huge", "after"]  # SQLite keeps any integer
    else:
        assert names == ["before", "after"]
    assert journal.dropped == 4 - len(names)
    assert journal.written == len(names)
    assert journal.healthy
    # The last refusal is kept, naming the workload; the journal itself is fine.
    assert journal.last_error is not None
    assert journal.last_error.startswith("dropped 1 entry that could not be written, for prod/")


def test_migrating_twice_changes_nothing(db_url: str) -> None:
    migrate(db_url)
    migrate(db_url)
    journal = Journal(db_url, flush_interval=0.01)
    journal.start()  # migrates a third time
    journal.record(entry())
    assert journal.flush()
    journal.close()
    assert journal.healthy
    migrate(db_url)
    assert len(read_history(db_url)) == 1


def test_close_writes_what_is_buffered(db_url: str) -> None:
    journal = Journal(db_url, flush_interval=60)  # only close() makes it write
    journal.start()
    for i in range(10):
        journal.record(entry(minutes=i))
    journal.close()
    assert (journal.written, journal.dropped) == (10, 0)
    journal.record(entry())  # after close: counted, never raised
    assert journal.dropped == 1
    assert len(read_history(db_url)) == 10


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database that exists but holds no journal."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_db")
        return url
    path = tmp_path / "other.db"
    sqlite3.connect(path).close()
    return f"sqlite:///{path}"


def test_a_database_without_the_table_has_no_journal(empty_db: str) -> None:
    with pytest.raises(InputError, match="no journal_entries table"):
        read_history(empty_db)
