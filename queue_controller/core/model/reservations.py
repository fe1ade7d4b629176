"""The vocabulary of reservation with backfill: a Queue's policy, a gang's runtime
estimate and the reservation it holds (core/reservation uses them; Queue and Workload
carry them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Overrun(StrEnum):
    """What a reservation does when its start comes and a backfilled gang still runs."""

    WAIT = "Wait"  # the reserved gang waits for the room to free
    PREEMPT = "Preempt"  # the gangs backfilled onto its nodes are evicted


@dataclass(frozen=True, slots=True)
class ReservationPolicy:
    """A Queue's ``spec.reservation``: how its head is kept from starving (Slurm's backfill).

    A head that has waited ``NoNodeFit`` for ``after_seconds`` gets named nodes and a
    start time; other gangs may run there only if their estimated end comes
    ``backfill_margin_seconds`` before that start.  None: off.
    """

    after_seconds: int | None = None
    max_per_team_quota: int = 1
    overrun: Overrun = Overrun.WAIT
    backfill_margin_seconds: int = 60


RESERVATION_OFF = ReservationPolicy()


class RuntimeSource(StrEnum):
    """Where a gang's runtime estimate came from, in the order they are tried."""

    ANNOTATION = "Annotation"  # queue-controller.io/expected-runtime-seconds
    HISTORY = "History"  # the median of like gangs that finished (the journal)
    DEADLINE = "Deadline"  # activeDeadlineSeconds: an upper bound
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class RuntimeEstimate:
    seconds: float | None = None  # None: unknown
    source: RuntimeSource = RuntimeSource.UNKNOWN
    detail: str = ""  # what it rests on, for ``eta`` and messages

    @property
    def known(self) -> bool:
        return self.seconds is not None


UNKNOWN_RUNTIME = RuntimeEstimate()


@dataclass(frozen=True, slots=True)
class Reservation:
    """Named nodes held for a pending head from an estimated start (PodGroup status)."""

    placement: Mapping[str, Mapping[str, int]]  # pod set -> node -> members
    start: float  # seconds since the epoch: when the room is expected to be free
    made: float  # when it was made: gangs admitted onto its nodes since are backfilled

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(node for nodes in self.placement.values() for node in nodes)
