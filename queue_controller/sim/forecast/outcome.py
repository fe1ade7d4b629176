"""What a forecast says about each pending gang: a start, or why there is none.

Reasons are stable (as the core's are): they go to PodGroup ``status.eta.reason``,
``queue-controller eta -o json`` and ``plan --eta``, and users may alert on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from queue_controller.core import Decision, RuntimeEstimate
from queue_controller.core.rules.durations import instant_text


class EtaReason(StrEnum):
    # A start was found: the forecast admits it at ``start``.
    ESTIMATED = "Estimated"
    # It waits behind running gangs whose runtime nobody estimated: they never end here.
    NO_RUNTIME_ESTIMATES = "NoRuntimeEstimates"
    # Its TeamQuota (with what its cohort lends) never has room for it, even once every
    # gang with an estimate has ended.
    BLOCKED_BY_QUOTA = "BlockedByQuota"
    # No node ever holds it, even once every gang with an estimate has ended.
    NEVER_FITS = "NeverFits"
    # Not admitted before the forecast's horizon.
    BEYOND_HORIZON = "BeyondHorizon"
    # The forecast stopped at its bound on cycles before it was admitted.
    FORECAST_BOUND = "ForecastBound"
    # Its spec is invalid: it is never admitted as written.
    INVALID = "Invalid"
    # It waits for something no forecast models (its Queue or TeamQuota missing, its
    # members not all made, deactivated): the message names the core's reason.
    BLOCKED = "Blocked"


@dataclass(frozen=True, slots=True)
class Eta:
    """One pending gang's estimated start, or why it has none."""

    workload: str  # Workload.key ("Job/ns/name")
    queue: str
    start: float | None  # seconds since the epoch; None: unknown (see ``reason``)
    reason: EtaReason
    message: str
    runtime: RuntimeEstimate  # its own estimate: how long it runs once started
    # The gangs whose ends free its room (Workload.keys): those that ended when it
    # started or, without a start, the gangs without an estimate it waits behind.
    after: tuple[str, ...] = ()
    # Pending gangs of its Queue that come before it (Workload.keys), in order.
    ahead: tuple[str, ...] = ()
    # What it waits for now: the current cycle's decision about it.
    waits_for: Decision | None = field(default=None, compare=False)

    @property
    def namespaced_name(self) -> str:
        return self.workload.split("/", 1)[1]

    @property
    def kind(self) -> str:
        return self.workload.split("/", 1)[0]

    @property
    def known(self) -> bool:
        return self.start is not None

    def as_dict(self, *, now: float) -> dict[str, object]:
        """The ``eta -o json`` shape (``in_seconds`` counted from ``now``)."""
        out: dict[str, object] = {
            "kind": self.kind,
            "workload": self.namespaced_name,
            "queue": self.queue,
            "estimatedStart": None if self.start is None else instant_text(self.start),
            "inSeconds": None if self.start is None else round(max(self.start - now, 0.0), 3),
            "reason": self.reason.value,
            "message": self.message,
            "runtime": {
                "seconds": self.runtime.seconds,
                "source": self.runtime.source.value,
                "detail": self.runtime.detail,
            },
            "after": [key.split("/", 1)[1] for key in self.after],
            "ahead": [key.split("/", 1)[1] for key in self.ahead],
        }
        if self.waits_for is not None:
            out["waitsFor"] = {
                "decision": self.waits_for.verdict.value,
                "reason": self.waits_for.reason.value,
                "message": self.waits_for.message,
            }
        return out


@dataclass(frozen=True, slots=True)
class Forecast:
    """Every pending gang's :class:`Eta`, in the order the current cycle decides them."""

    etas: tuple[Eta, ...]
    now: float
    cycles: int  # admission cycles the forecast ran
    reached: float  # the simulated time it stopped at
    # Why it stopped: done (nothing left pending), stalled (nothing left to end),
    # horizon, or bound (``max_cycles``).
    stopped: str

    def of(self, key: str) -> Eta | None:
        """The estimate of the gang with this ``Workload.key``, if it was pending."""
        for eta in self.etas:
            if eta.workload == key:
                return eta
        return None
