"""The engine's events and simulated time."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

# Simulated time 0, for the journal: `history` shows a simulation's decisions at
# 2026-01-01T00:00Z plus the simulated seconds.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
STRANDED_SAMPLE_SECONDS = 300.0


class Kind(Enum):
    """What happens.  At one instant, events run in this order: capacity is given
    back before anything new is placed, and the cycle (TICK) sees all of it."""

    NODE_UP = 0
    FINISH = 1
    GRACE_END = 2  # a preempted gang's pods are gone: their capacity is back
    FOREIGN_END = 3
    NODE_DOWN = 4
    TIMEOUT = 5
    ARRIVE = 6
    DUE = 7
    BIND = 8
    START = 9
    ENQUEUE = 10
    FOREIGN_START = 11
    DEADLOCK_CHECK = 12
    TICK = 13
    SAMPLE = 14


# (at, kind, seq, data): a plain tuple, because a heap of them is compared
# millions of times.  ``seq`` is the insertion order, so ties always break the
# same way and ``data`` is never compared.
Event = tuple[float, int, int, Any]
