"""What a run measured, from the API's own objects, the same way for every system.

``Recorder`` takes the events the watch streams deliver (apiwatch.py) and the submitter's
client-side submit times, and keeps per gang: submit, each unsuspend and re-suspension,
each member's bind and Running time, when the whole gang was first bound and running,
and its partial-placement episodes; and for the run: the GPUs held by fully placed gangs
over time.  The functions below it turn that into the report's figures.  Nothing here
reads a system's own metrics or status: a Job's ``spec.suspend``, a pod's ``nodeName``,
phase and deletion are all there is, and all any system is judged by.

Times are seconds since the run started, as the watcher saw them (client side).
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

LONG_EPISODE = 5.0  # partial placements shorter than this are members binding one by one
SHORT_EPISODE = 1.0  # reported apart: the sub-second gaps every system shows


@dataclass(frozen=True)
class Episode:
    """A gang with some but not all of its members holding GPUs, from ``start`` to ``end``."""

    gang: str
    start: float
    end: float
    gpu_seconds: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class _Pod:
    created: float | None = None  # first seen
    released: float | None = None  # first seen without scheduling gates
    bound: float | None = None
    running: float | None = None
    done: bool = False  # finished, failed or deleted: holds nothing any more

    @property
    def holding(self) -> bool:
        return self.bound is not None and not self.done


@dataclass
class Gang:
    key: str
    pods: int
    gpus_per_pod: float
    submitted: float
    admitted: list[float] = field(default_factory=list)  # each unsuspend
    resuspended: list[float] = field(default_factory=list)  # each eviction (re-suspension)
    placed: list[float] = field(default_factory=list)  # each attempt whose members all bound
    running: list[float] = field(default_factory=list)  # ... and all ran
    # Of the first attempt placed whole: when its last member was created and when its
    # last member was released (gates gone), to split admission-to-bound into stages.
    stages: tuple[float, float] | None = None
    completed: float | None = None
    members_lost: int = 0  # pods gone unfinished (deleted, failed) while the gang ran
    episodes: list[Episode] = field(default_factory=list)
    # -- live state of the current attempt --
    suspended: bool | None = None
    fully: bool = False
    all_running: bool = False
    partial_since: float | None = None
    partial_gpu_seconds: float = 0.0
    last_change: float = 0.0
    members: dict[str, _Pod] = field(default_factory=dict)

    def holding(self) -> int:
        return sum(1 for p in self.members.values() if p.holding)

    def partial(self) -> bool:
        # A held (suspended) gang whose pods are being torn down is not placed at all.
        return not self.fully and self.suspended is not True and self.holding() > 0

    def allocated_gpus(self) -> float:
        return self.holding() * self.gpus_per_pod if self.fully else 0.0

    def partial_gpus(self) -> float:
        return self.holding() * self.gpus_per_pod if self.partial() else 0.0

    @property
    def gpus(self) -> float:
        return self.pods * self.gpus_per_pod


class Recorder:
    """Thread-safe: the Job and Pod watch threads and the submitter all call in."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.gangs: dict[str, Gang] = {}
        self.allocated = 0.0  # GPUs held by fully placed gangs, now
        self.partial = 0.0  # GPUs held by partially placed gangs, now
        self.allocation_steps: list[tuple[float, float]] = [(0.0, 0.0)]
        self.partial_steps: list[tuple[float, float]] = [(0.0, 0.0)]

    # -- events ---------------------------------------------------------------------

    def submitted(
        self, key: str, t: float, *, pods: int, gpus_per_pod: float, suspended: bool
    ) -> None:
        """The client is about to create the Job (called before the create, so that no
        watch event can come first)."""
        with self._lock:
            gang = Gang(key, pods, gpus_per_pod, submitted=t, last_change=t)
            if not suspended:  # no queue: admitted as it is created
                gang.admitted.append(t)
                gang.suspended = False
            self.gangs[key] = gang

    def withdraw(self, key: str) -> None:
        """A Job that could not be created: not waited for, not counted."""
        with self._lock:
            self.gangs.pop(key, None)

    def job(self, key: str, t: float, *, suspended: bool, complete: bool) -> None:
        with self._lock:
            gang = self.gangs.get(key)
            if gang is None:
                return
            self._update(gang, t, lambda: self._job(gang, t, suspended, complete))

    def pod(
        self,
        key: str,
        pod: str,
        t: float,
        *,
        bound: bool,
        running: bool,
        done: bool,
        gated: bool = False,
    ) -> None:
        with self._lock:
            gang = self.gangs.get(key)
            if gang is None:
                return
            self._update(gang, t, lambda: self._pod(gang, pod, t, bound, running, done, gated))

    # -- bookkeeping ------------------------------------------------------------------

    @staticmethod
    def _job(gang: Gang, t: float, suspended: bool, complete: bool) -> None:
        if not suspended and gang.suspended is not False:
            gang.admitted.append(t)
        elif suspended and gang.suspended is False:
            gang.resuspended.append(t)
            gang.fully = gang.all_running = False  # the next attempt starts from nothing
        gang.suspended = suspended
        if complete and gang.completed is None:
            gang.completed = t

    @staticmethod
    def _pod(
        gang: Gang, name: str, t: float, bound: bool, running: bool, done: bool, gated: bool
    ) -> None:
        member = gang.members.setdefault(name, _Pod(created=t))
        if member.done:
            return  # a finished pod's later updates (its deletion) change nothing
        if member.released is None and (bound or not gated):
            member.released = t
        if bound and member.bound is None:
            member.bound = t
        if running and member.running is None:
            member.running = t
        if done:
            if member.running is None and gang.completed is None and not gang.suspended:
                gang.members_lost += 1
            member.done = True
        holding = gang.holding()
        if not gang.fully and holding == gang.pods and gang.suspended is not True:
            gang.fully = True
            gang.placed.append(t)
            if gang.stages is None:
                held = [p for p in gang.members.values() if p.holding]
                gang.stages = (
                    max(p.created or t for p in held),
                    max(p.released or t for p in held),
                )
        live_running = sum(1 for p in gang.members.values() if p.holding and p.running is not None)
        if gang.fully and not gang.all_running and live_running == gang.pods:
            gang.all_running = True
            gang.running.append(t)

    def _update(self, gang: Gang, t: float, change: Any) -> None:
        """Apply ``change`` to ``gang`` and carry it into the run's totals and episodes."""
        allocated, partial = gang.allocated_gpus(), gang.partial_gpus()
        if gang.partial_since is not None:
            gang.partial_gpu_seconds += partial * max(0.0, t - gang.last_change)
        change()
        gang.last_change = t
        now_partial = gang.partial()
        if now_partial and gang.partial_since is None:
            gang.partial_since, gang.partial_gpu_seconds = t, 0.0
        elif not now_partial and gang.partial_since is not None:
            gang.episodes.append(Episode(gang.key, gang.partial_since, t, gang.partial_gpu_seconds))
            gang.partial_since = None
        self._step(t, gang.allocated_gpus() - allocated, gang.partial_gpus() - partial)

    def _step(self, t: float, allocated: float, partial: float) -> None:
        if allocated:
            self.allocated += allocated
            self.allocation_steps.append((t, self.allocated))
        if partial:
            self.partial += partial
            self.partial_steps.append((t, self.partial))

    # -- reading ----------------------------------------------------------------------

    def close(self, t: float) -> list[Episode]:
        """Every episode, those still open at ``t`` ended there."""
        with self._lock:
            out = [e for g in self.gangs.values() for e in g.episodes]
            for gang in self.gangs.values():
                if gang.partial_since is not None:
                    held = gang.partial_gpus() * max(0.0, t - gang.last_change)
                    out.append(
                        Episode(gang.key, gang.partial_since, t, gang.partial_gpu_seconds + held)
                    )
            return out

    def counts(self) -> dict[str, int]:
        with self._lock:
            gangs = list(self.gangs.values())
        return {
            "submitted": len(gangs),
            "admitted": sum(1 for g in gangs if g.admitted),
            "placed": sum(1 for g in gangs if g.placed),
            "completed": sum(1 for g in gangs if g.completed is not None),
            "evictions": sum(len(g.resuspended) for g in gangs),
        }


# -- arithmetic -----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    return {f"p{q}": round(percentile(values, q), 3) for q in (50, 95, 99)}


def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of ``intervals`` as sorted, disjoint intervals (empty ones dropped)."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def length(intervals: Sequence[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def time_weighted_mean(
    steps: Sequence[tuple[float, float]], intervals: Sequence[tuple[float, float]]
) -> float | None:
    """The mean over ``intervals`` (sorted, disjoint: merge()) of the step function
    ``steps`` ((t, value) sorted by t, each value holding until the next step).

    One sweep over both: tens of thousands of steps (a bind or a finish each) and as many
    backlog intervals stay linear.
    """
    total = length(intervals)
    if total <= 0:
        return None
    area, first = 0.0, 0  # the mean so far: each overlap weighted by its part of the whole
    for index, (t, value) in enumerate(steps):
        until = steps[index + 1][0] if index + 1 < len(steps) else math.inf
        while first < len(intervals) and intervals[first][1] <= t:
            first += 1
        k = first
        while k < len(intervals) and intervals[k][0] < until:
            overlap = min(until, intervals[k][1]) - max(t, intervals[k][0])
            if overlap > 0:
                # Each part's weight first: value * overlap underflows for tiny spans.
                area += value * (overlap / total)
            k += 1
    return area


def rate_within(events: Iterable[float], intervals: Sequence[tuple[float, float]]) -> float | None:
    """Events per second inside ``intervals`` (sorted, disjoint; ends included: the
    admission that empties the backlog happened while it existed)."""
    total = length(intervals)
    if total <= 0:
        return None
    starts = [start for start, _ in intervals]
    inside = 0
    for t in events:
        index = bisect.bisect_right(starts, t) - 1
        if index >= 0 and t <= intervals[index][1]:
            inside += 1
    return inside / total


@dataclass(frozen=True)
class EpisodeSummary:
    partially_placed_gangs: int
    partially_placed_gpu_seconds: float
    long_episodes: int
    short_episodes: int  # under SHORT_EPISODE: members binding one by one
    short_gpu_seconds: float
    middle_episodes: int  # between SHORT_EPISODE and LONG_EPISODE, reported for completeness


def summarize_episodes(episodes: Sequence[Episode]) -> EpisodeSummary:
    long = [e for e in episodes if e.seconds > LONG_EPISODE]
    short = [e for e in episodes if e.seconds < SHORT_EPISODE]
    return EpisodeSummary(
        partially_placed_gangs=len({e.gang for e in long}),
        partially_placed_gpu_seconds=round(sum(e.gpu_seconds for e in long), 3),
        long_episodes=len(long),
        short_episodes=len(short),
        short_gpu_seconds=round(sum(e.gpu_seconds for e in short), 3),
        middle_episodes=len(episodes) - len(long) - len(short),
    )


def backlog(pairs: Iterable[tuple[float, float | None]], end: float) -> list[tuple[float, float]]:
    """When anything waited: the union of [arrived, served) (not served yet: until ``end``)."""
    return merge((start, end if served is None else served) for start, served in pairs)


STAGES = ("created", "released", "scheduled")


def gang_latencies(gangs: Iterable[Gang]) -> dict[str, list[float]]:
    """Submit -> first unsuspend; the unsuspend of the attempt that first placed the whole
    gang -> all bound, and -> all Running.

    Admission to all bound is also split into stages, where the time goes:
    ``created`` (unsuspend -> the last member exists: the Job controller), ``released``
    (-> the last member's scheduling gates are gone: the queueing system, 0 where it
    gates nothing) and ``scheduled`` (-> the last member is bound: kube-scheduler).
    """
    admission: list[float] = []
    bound: list[float] = []
    running: list[float] = []
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for gang in gangs:
        if gang.admitted:
            admission.append(max(0.0, gang.admitted[0] - gang.submitted))
        if gang.placed:
            released = max((t for t in gang.admitted if t <= gang.placed[0]), default=None)
            if released is not None:
                bound.append(max(0.0, gang.placed[0] - released))
                if gang.running:
                    running.append(max(0.0, gang.running[0] - released))
                if gang.stages is not None:
                    created, ungated = gang.stages
                    marks = (released, max(created, released), max(ungated, created, released))
                    stages["created"].append(marks[1] - marks[0])
                    stages["released"].append(marks[2] - marks[1])
                    stages["scheduled"].append(max(0.0, gang.placed[0] - marks[2]))
    return {"admission": admission, "bound": bound, "running": running, **stages}
