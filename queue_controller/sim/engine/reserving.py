"""Reservation with backfill in a run: runtime estimates, and what a gang's status keeps.

Where a Queue sets ``reservation.afterSeconds`` (``simulate --reservation``),
the core reserves named nodes for a head that waited ``NoNodeFit`` that long
and lets other gangs backfill onto them only if they end before the start.
The engine keeps, per gang, what the controller keeps in PodGroup status and
shows the core at every cycle (``JobState.core_workload``):

- its **runtime estimate**: the trace's own duration times a seeded lognormal
  factor, exp(noise x z) with z standard normal drawn from the gang's name and
  the run's seed (``--estimate-noise``; 0: exact), so wrong estimates are part
  of every run, and every policy draws the same.  It is given as the
  ``Annotation`` source, as a user's ``expected-runtime-seconds`` would be;
- ``no_fit_since``: since when it has waited ``NoNodeFit`` or ``Reserved``,
  set when a decision first says either, cleared by admission or any other
  pending reason (it waits for something else then);
- its ``reservation``: the one the core returned in a ``Reserved`` decision,
  until a decision without one comes.

The core only reserves at a cycle, and only once a head has starved long
enough, or a reservation's start has come: a cycle is made due at both
moments (``Kind.DUE``), as the controller requeues itself for them.

A ``ReservationOverrun`` decision is a Preempt: its victims go the way of
every preemption (:mod:`.preempting`) and the gang holds the reserved room as
a preemptor holds its nominated room.

The **estimated start** a gang would be shown (``status.eta``) is measured on
a sample: every k-th arrival, in order of arrival, k chosen so that at most
``eta_samples`` gangs are sampled (:func:`eta_sample`).  When a sampled gang
arrives, the snapshot the next cycle would decide over
(:meth:`~.admission.Admission.snapshot`, its clock at that cycle's tick) is run
forward by the controller's own :func:`~queue_controller.sim.forecast.forecast`,
bounded as below, and its answer for the gang is kept against the gang's
admission (:mod:`queue_controller.sim.measurement.reservation`).  A forecast
runs the core over the whole state once per event it reaches, so the sample
and the bounds keep its cost to seconds in the bundled run.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from queue_controller.core import (
    Decision,
    Queue,
    Reason,
    ReservationPolicy,
    RuntimeEstimate,
    RuntimeSource,
)
from queue_controller.sim.engine.admission import Admission
from queue_controller.sim.forecast import forecast
from queue_controller.sim.measurement.reservation import ReservationMeter
from queue_controller.sim.scenario.spec import Scenario, SimJob
from queue_controller.sim.world.events import Kind
from queue_controller.sim.world.runstate import JobState

DEFAULT_ESTIMATE_NOISE = 0.2
# The estimated start is forecast for at most this many arriving gangs of a run.
DEFAULT_ETA_SAMPLES = 40
# A forecast's bounds: a week ahead, 100 cycles of the core (the controller's own
# refresh allows 200; half keeps the sample's cost within a minute in the bundled run).
ETA_HORIZON_SECONDS = 7 * 86400.0
ETA_MAX_CYCLES = 100
_WAITING_FOR_ROOM = (Reason.NO_NODE_FIT, Reason.RESERVED)


def with_reservation(scenario: Scenario, policy: ReservationPolicy | None) -> Scenario:
    """``scenario`` with reservation off for every Queue (None), or ``policy`` where a Queue
    sets none of its own."""
    queues = tuple(
        replace(
            queue,
            reservation=ReservationPolicy()
            if policy is None
            else (queue.reservation if queue.reservation.after_seconds is not None else policy),
        )
        for queue in scenario.queues
    )
    return replace(scenario, queues=queues)


def reserving(queues: tuple[Queue, ...]) -> bool:
    return any(q.reservation.after_seconds is not None for q in queues)


def estimate(job: SimJob, *, noise: float, seed: int) -> RuntimeEstimate:
    """The trace's duration, off by a seeded lognormal factor of spread ``noise``."""
    if noise <= 0:
        return RuntimeEstimate(job.duration, RuntimeSource.ANNOTATION, "the trace's duration")
    z = _normal(f"estimate:{seed}:{job.key}")
    return RuntimeEstimate(
        job.duration * math.exp(noise * z),
        RuntimeSource.ANNOTATION,
        f"the trace's duration with noise {noise:g}",
    )


def eta_sample(jobs: Sequence[JobState], *, samples: int) -> frozenset[str]:
    """Every k-th gang in order of arrival, at most ``samples`` of them (keys).

    The k-th, 2k-th, ... rather than the first: the first arrival finds an empty
    cluster, the k-th a run under way.
    """
    if samples <= 0 or not jobs:
        return frozenset()
    ordered = sorted(jobs, key=lambda j: (j.spec.arrival, j.key))
    every = max(1, math.ceil(len(ordered) / samples))
    return frozenset(j.key for j in ordered[every - 1 :: every])


def _normal(key: str) -> float:
    """A standard normal draw that depends on ``key`` alone (Box-Muller)."""
    digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
    u1 = (int.from_bytes(digest[:8]) + 1) / (2**64 + 1)  # in (0, 1): log is finite
    u2 = int.from_bytes(digest[8:]) / 2**64
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


class Reserving:
    """Mixed into :class:`~queue_controller.sim.engine.run.PolicyRun`."""

    # Provided by PolicyRun.
    queue_by_key: dict[tuple[str, str], Queue]
    push: Callable[[float, Kind, Any], None]
    reservations: ReservationMeter | None
    admission: Admission
    pending: dict[str, JobState]
    next_tick: float | None
    eta_sample: frozenset[str]

    @property
    def now(self) -> float:
        raise NotImplementedError

    def _waited(self, job: JobState, decision: Decision) -> None:
        """A pending decision: keep ``no_fit_since`` and the reservation as status would."""
        changed = False
        if decision.reason in _WAITING_FOR_ROOM:
            if job.no_fit_since is None:
                job.no_fit_since = self.now
                changed = True
                after = self._policy(job).after_seconds
                if after is not None:
                    self.push(self.now + after, Kind.DUE, job)  # starved: a cycle then
        elif job.no_fit_since is not None:
            job.no_fit_since = None
            changed = True
        reservation = decision.reservation
        if reservation != job.reservation:
            job.reservation = reservation
            changed = True
            if reservation is not None and reservation.start > self.now:
                self.push(reservation.start, Kind.DUE, job)  # its start: a cycle then
        if reservation is not None and self.reservations is not None:
            self.reservations.reserved(job, reservation, self.now)
        if changed:
            job.changed()

    def _forecast_arrival(self, job: JobState) -> None:
        """A sampled gang just queued: the start the forecast gives it at the next cycle."""
        if job.key not in self.eta_sample or self.reservations is None:
            return
        # The cycle that first decides it runs at the next tick: the forecast starts
        # there, from what that cycle is shown (as the controller's ETA refresh follows
        # a cycle).  A gang admitted at that tick is then estimated exactly.
        at = self.next_tick if self.next_tick is not None else self.now
        snapshot = self.admission.snapshot(self.pending, now=at)
        found = forecast(snapshot, horizon_seconds=ETA_HORIZON_SECONDS, max_cycles=ETA_MAX_CYCLES)
        eta = found.of(job.core_workload().key)
        if eta is None:  # not eligible at that cycle (it always is, just arrived)
            self.reservations.estimated(job, None, "NotForecast", at=at)
        else:
            self.reservations.estimated(job, eta.start, eta.reason.value, at=at)

    def _room_taken(self, job: JobState) -> None:
        """Admitted, or holding room as a preemptor: it no longer waits, nor is reserved for."""
        job.no_fit_since = None
        job.reservation = None
        job.changed()

    def _policy(self, job: JobState) -> ReservationPolicy:
        return self.queue_by_key[(job.spec.namespace, job.spec.queue)].reservation
