"""bench-e2e's CPU and RSS over the run (issue 26, item 7): sampled from /proc once a
second, written as usage.csv and plotted as cores in use and resident memory."""

from __future__ import annotations

import os

from hypothesis import given
from hypothesis import strategies as st

from tests.bench.e2e.cost import process_cost
from tests.bench.e2e.report import cpu_use


def test_a_steady_core_reads_as_one_core() -> None:
    usage = [(float(t), float(t), 0) for t in range(20)]  # one CPU second a second
    times, cores = cpu_use(usage, 5.0)
    assert times == [float(t) for t in range(1, 20)]
    assert cores == [1.0] * 19


def test_a_burst_shows_within_its_window_and_is_gone_after_it() -> None:
    spent = [0, 0, 0, 2, 4, 4, 4, 4, 4, 4, 4, 4]  # two cores for two seconds
    usage = [(float(t), float(s), 0) for t, s in enumerate(spent)]
    times, cores = cpu_use(usage, 2.0)
    by_time = dict(zip(times, cores, strict=True))
    assert by_time[4.0] == 2.0
    assert by_time[11.0] == 0.0


@given(st.lists(st.floats(0, 3), min_size=2, max_size=40), st.floats(0.5, 10))
def test_cores_in_use_are_never_negative_nor_more_than_spent(
    rates: list[float], window: float
) -> None:
    spent, usage = 0.0, []
    for t, rate in enumerate(rates):
        spent += rate
        usage.append((float(t), spent, 0))
    _, cores = cpu_use(usage, window)
    assert all(-1e-9 <= c <= max(rates) + 1e-9 for c in cores)


def test_this_process_has_cpu_and_resident_memory() -> None:
    cost = process_cost(os.getpid())
    assert cost is not None
    assert 0 < cost.rss_bytes <= cost.peak_rss_bytes
