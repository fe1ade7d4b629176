"""Finished gangs' runtimes from the journal, refreshed every few minutes off the cycle.

A cycle only reads :attr:`HistoryCache.current`, an immutable mapping held since the
last refresh; the read itself runs in a thread of its own, at most every
``--history-refresh`` seconds, and a cycle never waits for it.  A journal that cannot
be read is logged once (and again only when it recovers and fails anew): the cycle
goes on with the history it had, or none.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import MappingProxyType

from queue_controller.journal import finished_runtimes
from queue_controller.kube.kinds.runtime import RuntimeHistory, history_key

log = logging.getLogger(__name__)

Reader = Callable[[], RuntimeHistory]


def journal_reader(url: str) -> Reader:
    """What the controller reads: its own journal's finished gangs, keyed as the
    adapter looks them up (kinds/runtime.py)."""
    return lambda: finished_runtimes(url, key_of=history_key)


class HistoryCache:
    def __init__(self, *, read: Reader | None, refresh_seconds: float) -> None:
        self.read = read  # None: no journal, no history
        self.refresh_seconds = refresh_seconds
        self.current: RuntimeHistory = MappingProxyType({})
        self._last: float | None = None
        self._running = False
        self._failing = False
        self._lock = threading.Lock()

    def refresh_if_due(self, now: float) -> bool:
        """Start a read in the background if the last began ``refresh_seconds`` ago;
        whether one was started.  Never blocks."""
        if self.read is None:
            return False
        with self._lock:
            if self._running or (
                self._last is not None and 0 <= now - self._last < self.refresh_seconds
            ):
                return False
            self._running, self._last = True, now
        threading.Thread(target=self.refresh, name="runtime-history", daemon=True).start()
        return True

    def refresh(self) -> None:
        """Read the journal now (in the caller's thread)."""
        assert self.read is not None
        try:
            found = self.read()
        except Exception as error:  # any failure: no history, never a failed cycle
            if not self._failing:
                log.warning("runtime history unavailable, estimates go without it: %s", error)
            self._failing = True
        else:
            if self._failing:
                log.info("runtime history readable again")
            self._failing = False
            self.current = MappingProxyType(dict(found))
        finally:
            with self._lock:
                self._running = False
