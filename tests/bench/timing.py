"""The one way the benchmarks time a step: CPU seconds (one core, whatever else the
machine does), the best of ``repeat`` runs.

Each run starts from a collected heap, the last run's result already dropped: the
garbage an earlier run (or an earlier benchmark in the same process) left would
otherwise be collected inside the next timed run, charging one run for another's
allocations.  The scheduler itself collects between cycles, not in them
(``schedule`` and the controller's loop keep the collector off during a cycle)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

T = TypeVar("T")


def best_cpu_seconds(work: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The fewest CPU seconds ``work`` took over ``repeat`` runs, and what it returned."""
    best, result = float("inf"), None
    for _ in range(max(1, repeat)):
        result = None
        gc.collect()
        start = time.process_time()
        result = work()
        best = min(best, time.process_time() - start)
    assert result is not None
    return best, result


def best_cpu_seconds_each(
    works: Mapping[str, Callable[[], T]], repeat: int
) -> dict[str, tuple[float, T]]:
    """:func:`best_cpu_seconds` for several works compared with one another, run in
    turns (one of each per round) so that a noisy spell of a shared machine falls on
    all of them alike rather than on whichever ran then; best of ``repeat`` rounds."""
    best: dict[str, float] = dict.fromkeys(works, float("inf"))
    results: dict[str, T] = {}
    for _ in range(max(1, repeat)):
        for name, work in works.items():
            results.pop(name, None)
            gc.collect()
            start = time.process_time()
            results[name] = work()
            best[name] = min(best[name], time.process_time() - start)
    return {name: (best[name], results[name]) for name in works}
