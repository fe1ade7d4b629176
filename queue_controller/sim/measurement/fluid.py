"""The fluid upper bound on allocation, and the saturated window it defines.

Treat each GPU *kind* (the nodes a job may use, and the GPU resource it asks
for) as a fluid of capacity ``C``: every job that has arrived and is not done
runs at once, sharing ``C`` in proportion to its width, and no gang constraint,
fragmentation or node boundary gets in the way.  Allocation is then
``min(demand, C)`` at every instant, which no real scheduler can beat.

Processor sharing is computed with a virtual clock: all active jobs of a kind
advance at the same rate ``min(1, C / width)``, so a job finishes when the
kind's virtual time has grown by its duration.  That is O(n log n).

The *saturated window* is where the bound sits at 99% of the whole cluster's
capacity or more: the time during which the issue's "at least 90% of the upper
bound while the cluster is saturated" is measured, for every policy alike.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence

from queue_controller.core.rules import exclusion
from queue_controller.sim.measurement.results import Series, UpperBound
from queue_controller.sim.scenario.gpus import gpu_resources, unit_value, value_of
from queue_controller.sim.scenario.spec import Scenario
from queue_controller.sim.world.runstate import JobState, prepare_jobs

SATURATED = 0.99


def _kinds(
    scenario: Scenario, jobs: Sequence[JobState]
) -> tuple[dict[int, int], dict[int, float], dict[int, float]]:
    """Per job, its kind; per kind, its capacity; per job, its width in GPU-equivalents."""
    kind_of: dict[int, int] = {}
    width: dict[int, float] = {}
    keys: dict[tuple[object, ...], int] = {}
    capacity: dict[int, float] = {}
    nodes_for: dict[tuple[object, ...], list[int]] = {}
    for index, job in enumerate(jobs):
        resources = gpu_resources(job.request)
        if not resources:
            continue
        nodes = nodes_for.get(job.shape)
        if nodes is None:
            nodes = [
                i
                for i, node in enumerate(scenario.nodes)
                if exclusion(node, job.template) is None
                and all(node.allocatable.get(r, 0) >= a for r, a in job.request.items())
            ]
            nodes_for[job.shape] = nodes
        if not nodes:
            continue
        key = (tuple(nodes), resources[0])
        if key not in keys:
            keys[key] = len(keys)
            capacity[keys[key]] = sum(
                scenario.nodes[i].allocatable.get(resources[0], 0)
                / 1000
                * unit_value(scenario.nodes[i], resources[0])
                for i in nodes
            )
        kind_of[index] = keys[key]
        width[index] = job.pods * value_of(scenario.nodes[nodes[0]], job.request)
    return kind_of, capacity, width


def fluid_bound(scenario: Scenario) -> UpperBound:
    jobs = prepare_jobs(scenario.jobs, scenario.queues, scenario.quotas)
    kind_of, capacity, width = _kinds(scenario, jobs)
    total_capacity = sum(value_of(n, n.allocatable) for n in scenario.nodes) or 1.0
    arrivals = sorted((jobs[i].spec.arrival, i) for i in kind_of)
    active_width: dict[int, float] = defaultdict(float)
    virtual: dict[int, float] = defaultdict(float)  # per kind, virtual time
    finishing: dict[int, list[tuple[float, int]]] = defaultdict(list)
    now = 0.0
    times, allocated = [0.0], [0.0]
    area = 0.0
    saturated = 0.0
    sat_area = 0.0

    def rate(kind: int) -> float:
        w = active_width[kind]
        return min(1.0, capacity[kind] / w) if w > 0 else 1.0

    def allocation() -> float:
        return sum(min(w, capacity[k]) for k, w in active_width.items())

    def advance(to: float) -> None:
        nonlocal now, area, saturated, sat_area
        dt = to - now
        if dt > 0:
            current = allocation()
            area += current * dt
            if current >= SATURATED * total_capacity:
                saturated += dt
                sat_area += current * dt
            for kind in active_width:
                virtual[kind] += rate(kind) * dt
        now = to

    def next_finish() -> tuple[float, int] | None:
        best: tuple[float, int] | None = None
        for kind, heap in finishing.items():
            if heap:
                at = now + (heap[0][0] - virtual[kind]) / rate(kind)
                if best is None or at < best[0]:
                    best = (at, kind)
        return best

    position = 0
    while position < len(arrivals) or any(finishing.values()):
        upcoming = next_finish()
        if position < len(arrivals) and (upcoming is None or arrivals[position][0] <= upcoming[0]):
            at, index = arrivals[position]
            position += 1
            advance(at)
            kind = kind_of[index]
            active_width[kind] += width[index]
            heapq.heappush(finishing[kind], (virtual[kind] + jobs[index].spec.duration, index))
        else:
            assert upcoming is not None
            at, kind = upcoming
            advance(at)
            _, index = heapq.heappop(finishing[kind])
            active_width[kind] -= width[index]
            if not finishing[kind]:
                active_width[kind] = 0.0
        current = allocation()
        if times[-1] == now:
            allocated[-1] = current
        else:
            times.append(now)
            allocated.append(current)
    span = now or 1.0
    series = Series(tuple(times), tuple(allocated), tuple(allocated), tuple(0 for _ in times))
    return UpperBound(
        gpu_allocation=round(area / (total_capacity * span), 4),
        gpu_allocation_saturated=round(sat_area / (total_capacity * saturated), 4)
        if saturated
        else None,
        saturated_seconds=round(saturated, 1),
        series=series,
    )


def saturated_windows(bound: UpperBound, capacity: float) -> list[tuple[float, float]]:
    """The intervals where the bound is at SATURATED of capacity or more."""
    out: list[tuple[float, float]] = []
    times, values = bound.series.times, bound.series.allocated_gpus
    for i, value in enumerate(values[:-1]):
        if value >= SATURATED * capacity:
            start, end = times[i], times[i + 1]
            if out and out[-1][1] == start:
                out[-1] = (out[-1][0], end)
            else:
                out.append((start, end))
    return out


def integrate(series: Series, windows: Sequence[tuple[float, float]]) -> float:
    """The integral of ``series.allocated_gpus`` (a step function) over ``windows``."""
    times, values = series.times, series.allocated_gpus
    total = 0.0
    i = 0
    for start, end in windows:
        while i + 1 < len(times) and times[i + 1] <= start:
            i += 1
        j = i
        t = start
        while t < end:
            step_end = times[j + 1] if j + 1 < len(times) else end
            upto = min(step_end, end)
            if upto > t:
                total += values[j] * (upto - t)
            t = upto
            if j + 1 < len(times) and step_end <= end:
                j += 1
            else:
                break
    return total


def saturated_allocation(bound: UpperBound, series: Series, capacity: float) -> float | None:
    windows = saturated_windows(bound, capacity)
    span = sum(end - start for start, end in windows)
    if span <= 0 or capacity <= 0:
        return None
    return round(integrate(series, windows) / (capacity * span), 4)
