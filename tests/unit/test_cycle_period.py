"""Cycles start at most once a period, however fast changes come (issue 26, item 4).

At scale something changes all the time; without the period the loop cycled back to
back.  The loop runs here against a state that changes without pause: the gaps between
cycle starts are never under the period (a lower bound, which a slow machine only
widens), and with no period the same changes start cycles much more often.
"""

from __future__ import annotations

import asyncio
import itertools
import time

from queue_controller.controller.state import ClusterState
from tests.loops import scheduling_loop
from tests.unit.test_lifecycle import NOW


def cycle_starts(period: float, *, run_for: float = 0.6) -> list[float]:
    state = ClusterState()
    loop = scheduling_loop(state, now=NOW, tick_seconds=5, period_seconds=period)
    starts: list[float] = []

    async def turn() -> bool:
        starts.append(time.monotonic())
        return True

    loop.turn = turn  # type: ignore[method-assign]

    async def main() -> None:
        stop = asyncio.Event()

        async def churn() -> None:  # a change every few milliseconds, as at scale
            version = 0
            while not stop.is_set():
                version += 1
                state.upsert(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "c", "resourceVersion": str(version)},
                        "data": {"n": str(version)},
                    }
                )
                await asyncio.sleep(0.005)

        tasks = [asyncio.create_task(loop.run(stop)), asyncio.create_task(churn())]
        await asyncio.sleep(run_for)
        stop.set()
        state.changed.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return starts


def test_cycles_start_at_most_once_a_period_while_changes_keep_coming() -> None:
    starts = cycle_starts(0.2)
    assert len(starts) >= 2, "changes start cycles"
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert min(gaps) >= 0.2 * 0.99, gaps


def test_without_a_period_the_same_changes_start_cycles_far_more_often() -> None:
    assert len(cycle_starts(0.0)) > 2 * len(cycle_starts(0.2))
