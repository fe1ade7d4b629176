"""How long the journal keeps what it wrote, and the pruning that enforces it.

Two bounds, both on by default in the controller: entries older than an age, and
rows past a count (the oldest first), so that the database stays bounded however
busy the cluster is.  The writer thread prunes between batches, so pruning needs
no thread, connection or lock of its own.

Every ``DELETE`` takes at most ``batch`` rows, each in a transaction of its own:
one giant ``DELETE`` after a week's backlog would hold SQLite's write lock (and
the controller's entries behind it) or bloat PostgreSQL's WAL for as long as it
ran.  A pass stops after ``batches_per_pass`` of them and says there is more, so
the writer gets back to writing entries in between.

Age counts only the controller's own entries: a simulation journals simulated
times (from 2026-01-01), which are no age at all.  The row bound counts every row,
since it is there to bound the disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, Select, delete, select

from queue_controller.journal.model import JournalRow

CONTROLLER_SOURCE = "controller"

DEFAULT_MAX_AGE_DAYS = 30.0
DEFAULT_MAX_ROWS = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """What to keep.  ``None`` (or 0 from a setting) for a bound: no bound."""

    max_age: timedelta | None = timedelta(days=DEFAULT_MAX_AGE_DAYS)
    max_rows: int | None = DEFAULT_MAX_ROWS
    # Seconds between two pruning passes.  A pass that left more behind is followed
    # by the next one as soon as the buffered entries are written.
    interval: float = 300.0
    batch: int = 5_000  # rows per DELETE, each its own transaction
    batches_per_pass: int = 20

    def __post_init__(self) -> None:
        if self.max_rows is not None and self.max_rows < 0:
            raise ValueError(f"max_rows must not be negative, not {self.max_rows}")
        if self.batch < 1 or self.batches_per_pass < 1:
            raise ValueError("batch and batches_per_pass must be at least 1")

    @classmethod
    def of(cls, *, max_age_days: float, max_rows: int, interval: float = 300.0) -> Retention:
        """From settings, where 0 means no bound."""
        return cls(
            max_age=timedelta(days=max_age_days) if max_age_days > 0 else None,
            max_rows=max_rows if max_rows > 0 else None,
            interval=interval,
        )

    @property
    def bounded(self) -> bool:
        return self.max_age is not None or self.max_rows is not None


@dataclass(frozen=True, slots=True)
class Pruned:
    rows: int  # deleted in this pass
    more: bool  # stopped at batches_per_pass with rows still to delete


def prune(engine: Engine, retention: Retention, *, now: datetime) -> Pruned:
    """One pass: delete what ``retention`` no longer keeps, a bounded batch at a time."""
    budget = retention.batches_per_pass
    deleted = 0
    if retention.max_age is not None:
        cutoff = now - retention.max_age
        old = select(JournalRow.id).where(
            JournalRow.source == CONTROLLER_SOURCE, JournalRow.at < cutoff
        )
        rows, budget = _delete_batches(engine, old, retention.batch, budget)
        deleted += rows
    if retention.max_rows is not None and budget > 0:
        newest_gone = _newest_past_count(engine, retention.max_rows)
        if newest_gone is not None:
            surplus = select(JournalRow.id).where(JournalRow.id <= newest_gone)
            rows, budget = _delete_batches(engine, surplus, retention.batch, budget)
            deleted += rows
    return Pruned(deleted, more=budget == 0)


def _newest_past_count(engine: Engine, keep: int) -> int | None:
    """The id of the newest row beyond the ``keep`` newest (ids grow with every insert),
    or None when there are no more than ``keep``: one walk down the primary key."""
    query = select(JournalRow.id).order_by(JournalRow.id.desc()).offset(keep).limit(1)
    with engine.connect() as connection:
        found = connection.execute(query).scalar()
    return None if found is None else int(found)


def _delete_batches(engine: Engine, ids: Select[int], batch: int, budget: int) -> tuple[int, int]:
    """Delete the rows ``ids`` selects, ``batch`` at a time, at most ``budget`` times;
    returns the rows deleted and the budget left (0: stopped with rows maybe left)."""
    deleted = 0
    while budget > 0:
        budget -= 1
        # IN (SELECT ... LIMIT): portable to SQLite and PostgreSQL, neither of which
        # takes DELETE ... LIMIT as it stands.
        statement = delete(JournalRow).where(JournalRow.id.in_(ids.limit(batch)))
        with engine.begin() as connection:
            rows = connection.execute(statement).rowcount
        deleted += max(rows, 0)
        if rows < batch:
            return deleted, max(budget, 1)  # done: whatever is left of the budget stands
    return deleted, 0
