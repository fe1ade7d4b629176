"""The one way the benchmarks time a step: CPU seconds (one core, whatever else the
machine does), the best of ``repeat`` runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def best_cpu_seconds(work: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The fewest CPU seconds ``work`` took over ``repeat`` runs, and what it returned."""
    best, result = float("inf"), None
    for _ in range(max(1, repeat)):
        start = time.process_time()
        result = work()
        best = min(best, time.process_time() - start)
    assert result is not None
    return best, result
