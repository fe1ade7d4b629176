"""The journal's writer: buffered, batched, and never in the controller's way.

The controller calls :meth:`Journal.record` from its reconcile loop.  That must never
wait on a database or fail because of one, so ``record`` only appends to a bounded
buffer in memory.  One writer thread, which owns the only database connection, drains
the buffer a batch at a time, one transaction per batch.  While the database is down
the buffer holds what comes in, dropping its oldest entries once full, and the writer
retries with capped backoff; what was buffered is written once the database is back.

With a :class:`~queue_controller.journal.retention.Retention`, the same thread prunes
old entries every so often, between batches, a bounded batch per transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime

from sqlalchemy import Engine, insert
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DataError, IntegrityError

from queue_controller.journal.database import (
    CONNECT_TIMEOUT,
    describe,
    make_engine,
    parse_url,
    shown,
)
from queue_controller.journal.migrate import upgrade
from queue_controller.journal.model import Entry, JournalRow
from queue_controller.journal.retention import Retention, prune

_log = logging.getLogger(__name__)

_BATCH = 500  # entries per transaction, at most
# Seconds before the first retry after a failure, doubled after each further one.
_BACKOFF_FIRST = 0.5
_BACKOFF_MAX = 10.0
# start() waits this long for the first connection so that `healthy` means something
# when it returns; an unreachable server then reads as degraded, not as unknown.
_START_WAIT = CONNECT_TIMEOUT + 1.0
_CLOSE_FLUSH = 5.0
_CLOSE_FLUSH_DEGRADED = 1.0

_Item = tuple[int, Entry]  # (sequence number, entry)


class Journal:
    """Best-effort, buffered writer.  :meth:`record` never blocks on the database and
    never raises.

    ``buffer_size`` bounds the entries waiting in memory; one batch being written
    (at most 500 entries) is held besides.  ``flush_interval`` is how long the writer
    lets entries gather before it writes them.  ``retention``: what to prune, and how
    often (none: keep everything, as a simulation's own journal does).
    """

    def __init__(
        self,
        url: str,
        *,
        buffer_size: int = 10_000,
        flush_interval: float = 0.5,
        retention: Retention | None = None,
    ) -> None:
        self._url = parse_url(url)  # a bad URL is the user's mistake: say so now, not later
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be at least 1, not {buffer_size}")
        self._buffer_size = buffer_size
        self._flush_interval = max(0.0, flush_interval)
        # Guards every field below.  It is never held while the database is used, so
        # record() waits at most for another record() or for the writer to move a batch.
        self._lock = threading.Condition()
        self._pending: deque[_Item] = deque()
        self._inflight: list[_Item] = []  # taken by the writer, not yet committed
        self._next_seq = 0
        self._healthy = False
        self._last_error: str | None = None
        self._dropped = 0
        self._written = 0
        self._hurry = False  # a flush() waits: write without gathering more
        self._retry_now = False  # a flush() waits: cut the current backoff short, once
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._first_attempt = threading.Event()
        self._retention = retention if retention is not None and retention.bounded else None
        self._pruned = 0
        # Monotonic time of the next pruning pass: the first comes once the schema is
        # ready, for a controller back after a long time away has the most to prune.
        self._prune_due = 0.0

    # -- the caller's side ------------------------------------------------------------

    def start(self) -> None:
        """Bring the schema to the newest revision and start the writer thread.

        Never raises for the database: if it cannot be reached, the journal is left
        degraded (``healthy`` False, ``last_error`` set) and keeps retrying.
        """
        with self._lock:
            if self._thread is not None or self._stopping:
                return
            self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
            self._thread.start()
        self._first_attempt.wait(_START_WAIT)

    def record(self, entry: Entry) -> None:
        """Queue ``entry`` for writing.  When the buffer is full the oldest waiting
        entry is dropped (and counted in ``dropped``): recent decisions matter more."""
        with self._lock:
            if self._stopping:
                self._dropped += 1
                return
            if len(self._pending) >= self._buffer_size:
                self._pending.popleft()
                self._dropped += 1
            self._pending.append((self._next_seq, entry))
            self._next_seq += 1
            if len(self._pending) == 1 or len(self._pending) >= _BATCH:
                self._lock.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every entry recorded before this call is written (True), dropped,
        or ``timeout`` seconds pass (False)."""
        with self._lock:
            target = self._next_seq
            if self._thread is None:
                return self._settled(target)
            self._hurry = True
            self._retry_now = True
            self._lock.notify_all()
            return self._lock.wait_for(lambda: self._settled(target), timeout=timeout)

    def close(self) -> None:
        """Write what is buffered (waiting at most a few seconds), then stop the writer.

        Entries still unwritten then are counted in ``dropped``.
        """
        with self._lock:
            thread = self._thread
        if thread is not None:
            # A database that is down now is unlikely to be back within seconds: give
            # it one more try, not the whole wait, so that shutdown stays quick.
            self.flush(_CLOSE_FLUSH if self.healthy else _CLOSE_FLUSH_DEGRADED)
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if thread is not None:
            thread.join(CONNECT_TIMEOUT + 1.0)
        with self._lock:
            self._dropped += len(self._pending) + len(self._inflight)
            self._pending.clear()
            self._inflight = []
            self._lock.notify_all()

    @property
    def healthy(self) -> bool:
        """False until the database is first reached, and while it is unreachable or failing."""
        with self._lock:
            return self._healthy

    @property
    def last_error(self) -> str | None:
        """The most recent failure, kept after recovery; None if there never was one."""
        with self._lock:
            return self._last_error

    @property
    def dropped(self) -> int:
        """Entries lost: pushed out of a full buffer, refused by the database, or left
        unwritten at close."""
        with self._lock:
            return self._dropped

    @property
    def written(self) -> int:
        """Entries committed to the database."""
        with self._lock:
            return self._written

    @property
    def pruned(self) -> int:
        """Entries deleted by retention."""
        with self._lock:
            return self._pruned

    @property
    def url(self) -> str:
        """The database, as it may be shown (without the password)."""
        return shown(self._url)

    def _settled(self, target: int) -> bool:
        # Entries leave in order: the batch in flight is older than everything pending.
        if any(seq < target for seq, _ in self._inflight):
            return False
        return not self._pending or self._pending[0][0] >= target

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        # The engine and its connections are made, used and disposed of in this thread
        # alone: a SQLite connection must not cross threads.
        engine = make_engine(self._url, writer=True)
        backoff = _BACKOFF_FIRST
        migrated = False
        try:
            while True:
                try:
                    if not migrated:
                        with engine.connect() as connection:
                            upgrade(connection)
                        migrated = True
                        self._succeeded()
                        self._first_attempt.set()
                    batch = self._take()
                    if batch is None:
                        return
                    if batch:
                        self._write(engine, batch)
                    backoff = _BACKOFF_FIRST
                    if self._retention is not None and time.monotonic() >= self._prune_due:
                        self._prune(engine, self._retention)
                except Exception as error:  # every failure here is retried, never raised
                    # After a failure the schema is checked again first: the database
                    # may have come back empty.
                    migrated = False
                    self._failed(error)
                    self._first_attempt.set()
                    if self._backoff(backoff):
                        return
                    backoff = min(backoff * 2, _BACKOFF_MAX)
        finally:
            self._first_attempt.set()  # start() must not wait out a writer that has died
            engine.dispose()

    def _prune(self, engine: Engine, retention: Retention) -> None:
        # A failure to prune is no failure to write: it is logged and tried again next
        # interval, and the journal stays healthy (a role without DELETE, say).
        try:
            done = prune(engine, retention, now=datetime.now(tz=UTC))
        except Exception as error:
            self._prune_due = time.monotonic() + retention.interval
            _log.warning("journal: pruning old entries failed: %s", describe(error))
            return
        # More left: the next pass comes once the entries waiting now are written.
        self._prune_due = time.monotonic() + (0.0 if done.more else retention.interval)
        with self._lock:
            self._pruned += done.rows
        if done.rows:
            _log.info("journal: pruned %d entries past retention", done.rows)

    def _take(self) -> list[_Item] | None:
        """The next batch: the one that failed last time, or up to _BATCH new entries
        once they have gathered for flush_interval.  None when it is time to stop;
        empty when nothing came before a pruning pass is due."""
        with self._lock:
            if self._inflight:
                return self._inflight
            wait = None
            if self._retention is not None:
                wait = max(0.0, self._prune_due - time.monotonic())
            if not self._lock.wait_for(lambda: self._stopping or bool(self._pending), wait):
                return []
            deadline = time.monotonic() + self._flush_interval
            while not (self._stopping or self._hurry or len(self._pending) >= _BATCH):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            if self._stopping:
                return None
            count = min(_BATCH, len(self._pending))
            self._inflight = [self._pending.popleft() for _ in range(count)]
            if not self._pending:
                self._hurry = False
            return self._inflight

    def _write(self, engine: Engine, batch: list[_Item]) -> None:
        rows: list[tuple[_Item, dict[str, object]]] = []
        refused: list[tuple[_Item, Exception]] = []
        for item in batch:
            try:
                rows.append((item, JournalRow.from_entry(item[1])))
            except Exception as error:  # not a valid entry: nothing a retry would mend
                refused.append((item, error))
        try:
            with engine.begin() as connection:
                _insert(connection, [row for _, row in rows])
        except (DataError, IntegrityError):
            # An entry the database refuses must neither hold back the rest of its batch
            # nor be retried forever: write them one at a time, and drop only the refused.
            self._settle(batch, [], refused)
            for item, row in rows:
                try:
                    with engine.begin() as connection:
                        _insert(connection, [row])
                except (DataError, IntegrityError) as error:
                    self._settle(batch, [], [(item, error)])
                else:
                    self._settle(batch, [item], [])
        else:
            self._settle(batch, [item for item, _ in rows], refused)

    def _settle(
        self, batch: list[_Item], written: list[_Item], refused: list[tuple[_Item, Exception]]
    ) -> None:
        """Take entries that were written or refused out of the batch in flight."""
        with self._lock:
            if self._inflight is batch:  # else close() has given up on the batch meanwhile
                done = {seq for seq, _ in written} | {seq for (seq, _), _ in refused}
                batch[:] = [item for item in batch if item[0] not in done]
                self._written += len(written)
                self._dropped += len(refused)
            if refused:
                (_, entry), error = refused[0]
                count = "1 entry" if len(refused) == 1 else f"{len(refused)} entries, the first"
                self._last_error = (
                    f"dropped {count} that could not be written, for "
                    f"{entry.namespace}/{entry.name}: {describe(error)}"
                )
            self._lock.notify_all()
            message = self._last_error
        if refused:
            _log.warning("journal: %s", message)

    def _succeeded(self) -> None:
        with self._lock:
            recovered = not self._healthy and self._last_error is not None
            self._healthy = True
        if recovered:
            _log.warning("journal: writing to %s again", shown(self._url))

    def _failed(self, error: Exception) -> None:
        with self._lock:
            was_healthy = self._healthy
            self._healthy = False
            self._last_error = describe(error)
            waiting = len(self._pending) + len(self._inflight)
        if was_healthy or not self._first_attempt.is_set():
            _log.warning(
                "journal: cannot write to %s (%s); buffering %d entries and retrying",
                shown(self._url),
                self._last_error,
                waiting,
            )

    def _backoff(self, seconds: float) -> bool:
        """Sleep before a retry, cut short by a flush(); True if it is time to stop."""
        with self._lock:
            self._lock.wait_for(lambda: self._stopping or self._retry_now, timeout=seconds)
            self._retry_now = False
            return self._stopping


def _insert(connection: Connection, rows: list[dict[str, object]]) -> None:
    if rows:
        connection.execute(insert(JournalRow), rows)
