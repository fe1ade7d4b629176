"""Time-weighted accounting of one policy's run: allocation, waste, stranding, waits.

Every change of state first *advances* the meters to the current time, so each
integral is exact for the step functions the engine produces.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from queue_controller.core.model import ONE
from queue_controller.sim.measurement.results import (
    SIZE_CLASSES,
    Percentiles,
    Series,
    ShareSeries,
    TeamShare,
)
from queue_controller.sim.scenario.gpus import gpu_resources, unit_value

if TYPE_CHECKING:
    from queue_controller.sim.scenario.spec import Scenario

HOUR = 3600.0


def entitlements(scenario: Scenario) -> dict[str, float]:
    """Each team's nominal GPUs (GPU-equivalents) over the sum of all teams'.

    A resource's unit is valued at the cluster's average for it: ``nvidia.com/gpu``
    mixes whole H100s and time-sliced L4 replicas.
    """
    units: dict[str, float] = defaultdict(float)
    values: dict[str, float] = defaultdict(float)
    for node in scenario.nodes:
        for resource in gpu_resources(node.allocatable):
            amount = node.allocatable[resource] / ONE
            units[resource] += amount
            values[resource] += amount * unit_value(node, resource)
    nominal = {
        quota.name: sum(
            limits.nominal / ONE * values[r] / units[r]
            for r, limits in quota.resources.items()
            if units.get(r)
        )
        for quota in scenario.quotas
    }
    total = sum(nominal.values())
    return {team: value / total if total else 0.0 for team, value in nominal.items()}


def percentiles(values: Iterable[float]) -> Percentiles:
    ordered = sorted(values)
    if not ordered:
        return Percentiles(0, None, None, None)

    def at(q: float) -> float:
        # Nearest rank: an actual observation, so small hand-checked samples stay exact.
        rank = max(int(-(-q * len(ordered) // 1)), 1)
        return round(ordered[min(rank, len(ordered)) - 1], 3)

    return Percentiles(len(ordered), at(0.50), at(0.95), at(0.99))


class StepSeries:
    """A share over time as a step function from 0 at time 0, with its area so far."""

    def __init__(self) -> None:
        self.times = [0.0]
        self.values = [0.0]
        self.area = 0.0

    def step(self, value: float, now: float) -> None:
        """The value is ``value`` from ``now`` on."""
        if value == self.values[-1]:
            return
        self.area += self.values[-1] * (now - self.times[-1])
        if self.times[-1] == now:
            self.values[-1] = value
        else:
            self.times.append(now)
            self.values.append(value)

    def series(self, weight: float, end: float) -> ShareSeries:
        """The run's series up to ``end``: its time-weighted mean and its peak."""
        area = self.area + self.values[-1] * max(0.0, end - self.times[-1])
        return ShareSeries(
            weight=weight,
            mean=round(area / end, 4) if end > 0 else 0.0,
            peak=round(max(self.values), 4),
            times=tuple(self.times),
            values=tuple(self.values),
        )


class Meters:
    def __init__(self, capacity_gpus: float) -> None:
        self.capacity = capacity_gpus
        self.now = 0.0
        self.allocated = 0.0  # GPU-equivalents held by fully placed gangs
        self.held = 0.0  # ... by any pod of a queued gang
        self.pending = 0  # gangs that arrived and are not fully placed yet
        self.allocated_area = 0.0  # GPU-seconds
        self.wasted_area = 0.0
        self.team_area: dict[str, float] = defaultdict(float)
        self.team_allocated: dict[str, float] = defaultdict(float)
        self.stranded_area = 0.0
        self.stranded_span = 0.0
        self.times: list[float] = [0.0]
        self.allocated_series: list[float] = [0.0]
        self.held_series: list[float] = [0.0]
        self.pending_series: list[int] = [0]
        self.waits: list[tuple[str, float]] = []
        self.evictions: Counter[str] = Counter()

    def advance(self, now: float) -> None:
        dt = now - self.now
        if dt <= 0:
            return
        self.allocated_area += self.allocated * dt
        self.wasted_area += (self.held - self.allocated) * dt
        for team, gpus in self.team_allocated.items():
            self.team_area[team] += gpus * dt
        self.now = now

    def record(self) -> None:
        """Close the current step of the series (called after a batch of changes)."""
        point = (self.allocated, self.held, self.pending)
        last = (self.allocated_series[-1], self.held_series[-1], self.pending_series[-1])
        if point == last:
            return
        if self.times[-1] == self.now:
            self.allocated_series[-1], self.held_series[-1], self.pending_series[-1] = point
            return
        self.times.append(self.now)
        self.allocated_series.append(self.allocated)
        self.held_series.append(self.held)
        self.pending_series.append(self.pending)

    def hold(self, gpus: float) -> None:
        self.held += gpus

    def release(self, gpus: float) -> None:
        self.held -= gpus

    def placed(self, team: str, gpus: float) -> None:
        """A gang became fully placed and holds ``gpus`` on behalf of ``team``."""
        self.allocated += gpus
        self.team_allocated[team] += gpus

    def unplaced(self, team: str, gpus: float) -> None:
        self.allocated -= gpus
        self.team_allocated[team] -= gpus

    def stranded(self, free_gpus: float, span: float) -> None:
        """A sample: ``free_gpus`` no pending pod could use, standing for ``span`` seconds."""
        self.stranded_area += free_gpus * span
        self.stranded_span += span

    def series(self) -> Series:
        return Series(
            tuple(self.times),
            tuple(self.allocated_series),
            tuple(self.held_series),
            tuple(self.pending_series),
        )

    def queue_delays(self) -> dict[str, Percentiles]:
        by_class: dict[str, list[float]] = {c: [] for c in SIZE_CLASSES}
        for size, wait in self.waits:
            by_class[size].append(wait)
        out = {"all": percentiles(wait for _, wait in self.waits)}
        out.update({size: percentiles(waits) for size, waits in by_class.items()})
        return out

    def team_shares(self, entitlements: Mapping[str, float]) -> dict[str, TeamShare]:
        total = sum(self.team_area.values())
        return {
            team: TeamShare(
                allocated_gpu_hours=round(self.team_area.get(team, 0.0) / HOUR, 3),
                share=round(self.team_area.get(team, 0.0) / total, 4) if total else 0.0,
                entitlement=round(entitlement, 4),
            )
            for team, entitlement in sorted(entitlements.items())
        }

    def fraction(self, area: float, span: float) -> float:
        return area / (self.capacity * span) if span > 0 and self.capacity > 0 else 0.0
