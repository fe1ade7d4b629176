"""What reservation with backfill did in a run: large gangs' waits, backfills, overruns, ETAs.

Measured for every ``gang-fit`` run, reservation on or off, so that the two can
be set side by side (``report.json``'s ``reservation`` block):

- **Large gangs** are the top 5% of the workload's gangs by the GPUs they ask
  (whole GPUs, a MIG slice as its compute over 7): every gang asking at least
  as many as the gang at that rank (``large_gang_min_gpus``).  A large gang's
  wait runs from its arrival until its members are first all bound; one that
  never starts counts until the run's end, so a starving gang is not left out.
- **Backfilled gangs**: admissions whose decision names reservations they
  were placed on (``Decision.backfilled_over``).
- **Overruns**: reservations whose start passed while a gang backfilled onto
  their nodes still ran (a ``Reserved`` decision at or after the start, with
  such a gang still admitted there), once per reservation, plus the
  ``ReservationOverrun`` preemptions.  ``late_reservations`` counts every
  reservation still waiting at its start, whatever it waited for (a gang
  running since before the reservation may overrun its estimate too).
- **ETA error** (``eta_median_relative_error``): the estimated start the
  forecast gave a sampled gang when it arrived (``sim.engine.reserving``)
  against its actual start, its first admission.  The error is
  |estimated - actual| / actual wait (from arrival to that admission), over
  the sampled gangs with an estimate that were admitted after a wait
  (``eta_gangs``); those the forecast gave no start are counted apart, by
  reason (``eta_unknown``).  Measured in runs with reservation only, where
  every gang carries a runtime estimate.  A gang admitted by the very cycle
  the forecast started at is estimated exactly by construction (the forecast
  runs that cycle first), and the controller would never have shown it an
  ETA: ``eta_median_relative_error_waited`` leaves those out
  (``eta_first_cycle_gangs``), the figure for gangs that really queued.
- **Reservation start error** (``reservation_start_median_relative_error``):
  the same ratio for the start of a gang's first reservation, at its first
  ``Reserved`` decision, against its admission after it; over gangs reserved
  at least once that waited (``reservation_start_gangs``).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

from queue_controller.core import Decision, Reason, Reservation
from queue_controller.core.model import GPU, MIG_PREFIX, ONE
from queue_controller.sim.measurement.results import ReservationFigures
from queue_controller.sim.world.runstate import JobState, Phase

LARGE_FRACTION = 0.05  # large gangs: the top 5% by GPUs asked
_MIG_SLICES = 7.0


def gpus_asked(job: JobState) -> float:
    """The GPUs a whole gang asks for: whole GPUs, and each MIG slice as its compute over 7."""
    per_pod = 0.0
    for resource, amount in job.request.items():
        if resource == GPU:
            per_pod += amount / ONE
        elif resource.startswith(MIG_PREFIX):
            profile = resource.removeprefix(MIG_PREFIX)
            compute = profile.split("g.", 1)[0]
            if compute.isdigit():
                per_pod += int(compute) / _MIG_SLICES * amount / ONE
    return per_pod * job.pods


def large_threshold(jobs: Sequence[JobState]) -> float:
    """The fewest GPUs a large gang asks (the top :data:`LARGE_FRACTION` by GPUs asked)."""
    asked = sorted((gpus_asked(j) for j in jobs if j.request), reverse=True)
    if not asked:
        return 0.0
    rank = max(1, math.ceil(len(asked) * LARGE_FRACTION))
    return asked[rank - 1]


def p95(values: Sequence[float]) -> float | None:
    """The 95th percentile, nearest rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class ReservationMeter:
    """Told of each decision of a ``gang-fit`` run; :meth:`figures` at the end."""

    def __init__(self, *, reserving: bool) -> None:
        self.reserving = reserving
        self.first_eta: dict[str, float] = {}  # gang -> start of its first reservation
        self.started: dict[str, float] = {}  # gang reserved once -> its admission after
        self.made: set[tuple[str, float]] = set()  # (gang, made): each reservation once
        self.late: set[tuple[str, float]] = set()
        self.overrun: set[tuple[str, float]] = set()
        # Reserved gang -> the gangs backfilled onto its nodes, with their attempts.
        self.backfills: dict[str, list[tuple[JobState, int]]] = {}
        self.backfilled = 0
        self.overrun_preemptions = 0
        # Sampled gang -> the start the forecast gave it on arrival (None: unknown),
        # why (the forecast's reason), and its first admission after.
        self.eta: dict[str, tuple[float | None, str]] = {}
        self.eta_at: dict[str, float] = {}  # sampled gang -> the cycle the forecast began at
        self.eta_started: dict[str, float] = {}

    def estimated(self, job: JobState, start: float | None, reason: str, *, at: float) -> None:
        self.eta.setdefault(job.key, (start, reason))
        self.eta_at.setdefault(job.key, at)

    def reserved(self, job: JobState, reservation: Reservation, now: float) -> None:
        key = (job.key, reservation.made)
        self.made.add(key)
        self.first_eta.setdefault(job.key, reservation.start)
        if now < reservation.start or key in self.late:
            return
        self.late.add(key)
        if any(self._still_there(b, a, reservation) for b, a in self.backfills.get(job.key, ())):
            self.overrun.add(key)

    @staticmethod
    def _still_there(job: JobState, attempt: int, reservation: Reservation) -> bool:
        return (
            job.phase is Phase.ADMITTED
            and job.attempt == attempt
            and job.admitted_at >= reservation.made
            and bool(reservation.nodes & (job.bound.keys() | job.placement.keys()))
        )

    def admitted(self, job: JobState, decision: Decision, now: float) -> None:
        if job.key in self.first_eta:
            self.started.setdefault(job.key, now)
        if job.key in self.eta:
            self.eta_started.setdefault(job.key, now)
        if decision.backfilled_over:
            self.backfilled += 1
            for over in decision.backfilled_over:
                # Workload keys are Job/<namespace>/<name>; gangs are <namespace>/<name>.
                self.backfills.setdefault(over.split("/", 1)[1], []).append((job, job.attempt))

    def preempted(self, decision: Decision) -> None:
        if decision.reason is Reason.RESERVATION_OVERRUN:
            self.overrun_preemptions += 1

    def figures(self, jobs: Sequence[JobState], *, end: float) -> ReservationFigures:
        threshold = large_threshold(jobs)
        large = [j for j in jobs if j.request and gpus_asked(j) >= threshold]
        waits = [(j.placed_at if j.placed_at is not None else end) - j.spec.arrival for j in large]
        arrival = {j.key: j.spec.arrival for j in jobs}
        reserved = _errors(self.first_eta, self.started, arrival)
        known = {key: start for key, (start, _) in self.eta.items() if start is not None}
        errors = _errors(known, self.eta_started, arrival)
        later = {k: t for k, t in self.eta_started.items() if t > self.eta_at[k]}
        waited = _errors(known, later, arrival)
        unknown = Counter(reason for start, reason in self.eta.values() if start is None)
        return ReservationFigures(
            reserving=self.reserving,
            large_gang_min_gpus=round(threshold, 3),
            large_gangs=len(large),
            large_gangs_never_started=sum(1 for j in large if j.placed_at is None),
            large_gang_wait_p95_seconds=p95(waits),
            makespan_seconds=round(end, 1),
            reservations=len(self.made),
            backfilled_gangs=self.backfilled,
            overruns=len(self.overrun) + self.overrun_preemptions,
            overrun_preemptions=self.overrun_preemptions,
            late_reservations=len(self.late),
            eta_median_relative_error=_median(errors),
            eta_gangs=len(errors),
            eta_median_relative_error_waited=_median(waited),
            eta_first_cycle_gangs=len(errors) - len(waited),
            eta_sampled_gangs=len(self.eta),
            eta_unknown=sum(unknown.values()),
            eta_unknown_reasons=dict(sorted(unknown.items())),
            reservation_start_median_relative_error=_median(reserved),
            reservation_start_gangs=len(reserved),
            large_waits=tuple(sorted(waits)),
        )


def _errors(
    estimated: Mapping[str, float], started: Mapping[str, float], arrival: Mapping[str, float]
) -> list[float]:
    """|estimated - actual| / actual wait of each gang estimated and started after a wait."""
    out = []
    for key, start in started.items():
        wait = start - arrival[key]
        if key in estimated and wait > 0:
            out.append(abs(estimated[key] - start) / wait)
    return out


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None
