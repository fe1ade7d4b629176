"""`make bench-e2e`'s measurement: partial-placement episodes, allocation to fully placed
gangs, latencies and percentiles, from the events the watch streams deliver."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.bench.e2e.cost import client_of, per_gang, requests_by_client
from tests.bench.e2e.watch import (
    Recorder,
    backlog,
    gang_latencies,
    merge,
    percentile,
    percentiles,
    rate_within,
    summarize_episodes,
    time_weighted_mean,
)


def _bind_all(rec: Recorder, key: str, pods: int, t: float, *, step: float = 0.0) -> None:
    for i in range(pods):
        rec.pod(key, f"p{i}", t + i * step, bound=True, running=False, done=False)


def test_a_gang_bound_at_once_has_no_long_episode_and_is_allocated() -> None:
    rec = Recorder()
    rec.submitted("ns/a", 0.0, pods=4, gpus_per_pod=2, suspended=True)
    rec.job("ns/a", 1.0, suspended=False, complete=False)
    _bind_all(rec, "ns/a", 4, 1.2, step=0.1)  # members bind one by one, 0.3 s in all
    assert rec.allocated == 8
    gang = rec.gangs["ns/a"]
    assert gang.admitted == [1.0]
    assert gang.placed == [pytest.approx(1.5)]
    episodes = rec.close(10)
    assert len(episodes) == 1
    assert episodes[0].seconds == pytest.approx(0.3)
    summary = summarize_episodes(episodes)
    assert summary.partially_placed_gangs == 0
    assert summary.partially_placed_gpu_seconds == 0
    assert summary.short_episodes == 1
    # GPU-seconds of the short episode: 2 GPUs for 0.1 s, 4 for 0.1, 6 for 0.1
    assert summary.short_gpu_seconds == pytest.approx(1.2)


def test_a_gang_stuck_half_bound_is_a_long_episode_with_its_gpu_seconds() -> None:
    rec = Recorder()
    rec.submitted("ns/b", 0.0, pods=4, gpus_per_pod=1, suspended=False)  # no queue
    _bind_all(rec, "ns/b", 2, 1.0)
    assert rec.allocated == 0
    assert rec.partial == 2
    rec.pod("ns/b", "p2", 11.0, bound=True, running=False, done=False)
    rec.pod("ns/b", "p3", 21.0, bound=True, running=False, done=False)
    summary = summarize_episodes(rec.close(30))
    assert summary.partially_placed_gangs == 1
    # 2 GPUs for 10 s, then 3 for 10 s
    assert summary.partially_placed_gpu_seconds == pytest.approx(50)
    assert rec.allocated == 4
    assert rec.partial == 0


def test_an_episode_still_open_at_the_end_is_closed_there() -> None:
    rec = Recorder()
    rec.submitted("ns/c", 0.0, pods=2, gpus_per_pod=1, suspended=False)
    rec.pod("ns/c", "p0", 5.0, bound=True, running=True, done=False)
    (episode,) = rec.close(15.0)
    assert (episode.start, episode.end, episode.gpu_seconds) == (5.0, 15.0, 10.0)


def test_members_finishing_one_by_one_are_not_a_partial_placement() -> None:
    rec = Recorder()
    rec.submitted("ns/d", 0.0, pods=2, gpus_per_pod=1, suspended=True)
    rec.job("ns/d", 0.5, suspended=False, complete=False)
    _bind_all(rec, "ns/d", 2, 1.0)
    rec.pod("ns/d", "p0", 30.0, bound=True, running=True, done=True)
    assert rec.allocated == 1  # the member still running is the gang's
    rec.pod("ns/d", "p1", 40.0, bound=True, running=True, done=True)
    rec.job("ns/d", 40.5, suspended=False, complete=True)
    assert rec.allocated == 0
    assert summarize_episodes(rec.close(50)).partially_placed_gangs == 0
    assert rec.gangs["ns/d"].completed == 40.5
    assert rec.allocation_steps == [(0.0, 0.0), (1.0, 2.0), (30.0, 1.0), (40.0, 0.0)]


def test_an_eviction_is_a_resuspension_and_its_teardown_is_no_episode() -> None:
    rec = Recorder()
    rec.submitted("ns/e", 0.0, pods=2, gpus_per_pod=1, suspended=True)
    rec.job("ns/e", 1.0, suspended=False, complete=False)
    rec.pod("ns/e", "p0", 1.1, bound=True, running=True, done=False)
    rec.job("ns/e", 61.0, suspended=True, complete=False)  # PodsReady timeout: evicted
    rec.pod("ns/e", "p0", 70.0, bound=True, running=True, done=True)
    rec.job("ns/e", 80.0, suspended=False, complete=False)  # admitted again
    rec.pod("ns/e", "p2", 80.1, bound=True, running=False, done=False)
    rec.pod("ns/e", "p3", 80.2, bound=True, running=False, done=False)
    gang = rec.gangs["ns/e"]
    assert gang.resuspended == [61.0]
    assert gang.admitted == [1.0, 80.0]
    assert gang.placed == [80.2]
    episodes = rec.close(100)
    # 1.1 -> 61 held one of two members (partial, long); the teardown after is not counted
    assert [(e.start, e.end) for e in episodes] == [(1.1, 61.0), (80.1, 80.2)]
    lat = gang_latencies([gang])
    assert lat["admission"] == [1.0]
    assert lat["bound"] == [pytest.approx(0.2)]  # from the unsuspend that placed it


def test_events_for_jobs_not_submitted_here_are_ignored() -> None:
    rec = Recorder()
    rec.job("other/x", 1.0, suspended=False, complete=False)
    rec.pod("other/x", "p", 1.0, bound=True, running=True, done=False)
    assert rec.gangs == {}
    assert rec.allocated == 0


def test_running_latency_needs_every_member_running() -> None:
    rec = Recorder()
    rec.submitted("ns/f", 0.0, pods=2, gpus_per_pod=1, suspended=True)
    rec.job("ns/f", 2.0, suspended=False, complete=False)
    _bind_all(rec, "ns/f", 2, 2.5)
    rec.pod("ns/f", "p0", 3.0, bound=True, running=True, done=False)
    assert gang_latencies(rec.gangs.values())["running"] == []
    rec.pod("ns/f", "p1", 3.5, bound=True, running=True, done=False)
    assert gang_latencies(rec.gangs.values())["running"] == [1.5]


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_are_ordered_and_within_the_values(values: list[float]) -> None:
    out = percentiles(values)
    p50, p95, p99 = out["p50"], out["p95"], out["p99"]
    assert p50 is not None
    assert p95 is not None
    assert p99 is not None
    assert round(min(values), 3) - 1e-6 <= p50 <= p95 <= p99 <= round(max(values), 3) + 1e-6


def test_percentile_interpolates_and_none_without_values() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None}


_interval = st.tuples(st.floats(0, 100), st.floats(0, 50)).map(lambda p: (p[0], p[0] + p[1]))


@given(st.lists(_interval, max_size=30))
def test_merge_gives_disjoint_sorted_intervals_covering_the_same_points(
    intervals: list[tuple[float, float]],
) -> None:
    merged = merge(intervals)
    for (_, end), (start, _) in itertools.pairwise(merged):
        assert end < start
    for probe in [s + (e - s) / 2 for s, e in intervals if e > s]:
        assert any(s <= probe <= e for s, e in merged)


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 1)), max_size=30), st.lists(_interval,
       min_size=1, max_size=10))  # fmt: skip
def test_time_weighted_mean_stays_within_the_values(
    points: list[tuple[float, float]], intervals: list[tuple[float, float]]
) -> None:
    steps = sorted([(0.0, 0.0), *points])
    mean = time_weighted_mean(steps, merge(intervals))
    if mean is not None:
        assert -1e-9 <= mean <= max(v for _, v in steps) + 1e-9


def test_time_weighted_mean_of_a_step() -> None:
    steps = [(0.0, 0.0), (10.0, 1.0), (20.0, 0.5)]
    assert time_weighted_mean(steps, [(0.0, 20.0)]) == pytest.approx(0.5)
    assert time_weighted_mean(steps, [(10.0, 30.0)]) == pytest.approx(0.75)
    assert time_weighted_mean(steps, []) is None


def test_backlog_and_throughput_count_admissions_while_gangs_wait() -> None:
    waits = [(0.0, 5.0), (1.0, 2.0), (10.0, None), (12.0, 14.0)]
    assert backlog(waits, end=20.0) == [(0.0, 5.0), (10.0, 20.0)]
    served = [5.0, 2.0, 14.0, 30.0]  # 30: after the run, outside any backlog
    assert rate_within(served, backlog(waits, end=20.0)) == pytest.approx(3 / 15)
    assert rate_within(served, []) is None


def test_audit_log_requests_are_counted_per_client(tmp_path: object) -> None:
    from pathlib import Path

    log = Path(str(tmp_path)) / "audit.log"
    log.write_text(
        '{"userAgent": "kube-scheduler/v1.35.0 (linux/amd64) kubernetes/abc/scheduler"}\n'
        '{"userAgent": "OpenAPI-Generator/37.0.2/python"}\n'
        '{"userAgent": "OpenAPI-Generator/37.0.2/python"}\n'
        '{"userAgent": "bench-e2e"}\n'
        '{"userAgent": "kube-sched'  # cut short as the server stopped
    )
    counts = requests_by_client(log)
    assert counts == {"python-client": 2, "kube-scheduler": 1, "bench-e2e": 1}
    figures = per_gang(counts, 2, ("python-client",))
    assert figures["system"] == 1.0
    assert figures["total"] == 1.5  # the harness's own requests left out
    assert per_gang(None, 2, ())["total"] is None
    assert client_of("") == "unknown"


def _brute_mean(
    steps: list[tuple[float, float]], intervals: list[tuple[float, float]]
) -> float | None:
    total = sum(e - s for s, e in intervals)
    if total <= 0:
        return None
    area = 0.0
    for index, (t, value) in enumerate(steps):
        until = steps[index + 1][0] if index + 1 < len(steps) else float("inf")
        for start, end in intervals:
            area += value * max(0.0, min(until, end) - max(t, start))
    return area / total


@given(
    st.lists(st.tuples(st.floats(0, 100), st.floats(0, 1)), max_size=30),
    st.lists(_interval, max_size=10),
    st.lists(st.floats(0, 200), max_size=30),
)
def test_the_sweeps_agree_with_brute_force(
    points: list[tuple[float, float]],
    intervals: list[tuple[float, float]],
    events: list[float],
) -> None:
    steps = sorted([(0.0, 0.0), *points])
    merged = merge(intervals)
    expected = _brute_mean(steps, merged)
    got = time_weighted_mean(steps, merged)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-9)
    total = sum(e - s for s, e in merged)
    inside = sum(1 for t in events if any(s <= t <= e for s, e in merged))
    assert rate_within(events, merged) == (pytest.approx(inside / total) if total > 0 else None)


def test_admission_to_bound_is_split_into_creation_release_and_scheduling() -> None:
    rec = Recorder()
    rec.submitted("ns/s", 0.0, pods=2, gpus_per_pod=1, suspended=True)
    rec.job("ns/s", 1.0, suspended=False, complete=False)
    # The Job controller makes both members gated; the queue releases them; they bind.
    rec.pod("ns/s", "p0", 1.5, bound=False, running=False, done=False, gated=True)
    rec.pod("ns/s", "p1", 2.0, bound=False, running=False, done=False, gated=True)
    rec.pod("ns/s", "p0", 3.0, bound=False, running=False, done=False)
    rec.pod("ns/s", "p1", 4.0, bound=False, running=False, done=False)
    rec.pod("ns/s", "p0", 4.5, bound=True, running=False, done=False)
    rec.pod("ns/s", "p1", 6.0, bound=True, running=False, done=False)
    latencies = gang_latencies(rec.gangs.values())
    assert latencies["bound"] == [pytest.approx(5.0)]
    assert latencies["created"] == [pytest.approx(1.0)]
    assert latencies["released"] == [pytest.approx(2.0)]
    assert latencies["scheduled"] == [pytest.approx(2.0)]


def test_a_member_never_gated_is_released_when_created() -> None:
    rec = Recorder()
    rec.submitted("ns/u", 0.0, pods=1, gpus_per_pod=1, suspended=True)
    rec.job("ns/u", 1.0, suspended=False, complete=False)
    rec.pod("ns/u", "p0", 2.0, bound=False, running=False, done=False)
    rec.pod("ns/u", "p0", 2.5, bound=True, running=False, done=False)
    latencies = gang_latencies(rec.gangs.values())
    assert latencies["created"] == [pytest.approx(1.0)]
    assert latencies["released"] == [0.0]
    assert latencies["scheduled"] == [pytest.approx(0.5)]
