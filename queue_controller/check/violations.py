"""What ``check`` reports: one broken invariant, the objects involved, and since when."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Invariant(StrEnum):
    """The invariants, by stable names: scripts and alerts match on them."""

    NODE_OVERCOMMITTED = "NodeOvercommitted"
    QUOTA_OVERDRAWN = "QuotaOverdrawn"
    LENDING_LIMIT_EXCEEDED = "LendingLimitExceeded"
    ADMITTED_TWICE = "AdmittedTwice"
    PARTIALLY_PLACED_TOO_LONG = "PartiallyPlacedTooLong"
    EVICTED_STILL_HOLDING = "EvictedStillHolding"
    MEMBER_OFF_PLAN = "MemberOffPlan"
    MEMBER_OFF_SLICE = "MemberOffSlice"


DESCRIPTIONS = {
    Invariant.NODE_OVERCOMMITTED: "no node is over-committed on any extended resource, "
    "counting bound pods",
    Invariant.QUOTA_OVERDRAWN: "no TeamQuota is used past its nominal plus what it may borrow",
    Invariant.LENDING_LIMIT_EXCEEDED: "no cohort borrows what its lenders keep back "
    "(nominal less lendingLimit)",
    Invariant.ADMITTED_TWICE: "no gang is admitted twice: one PodGroup per workload, and no "
    "members beyond its size",
    Invariant.PARTIALLY_PLACED_TOO_LONG: "no gang is partially placed for longer than its "
    "timeout plus one scheduling cycle",
    Invariant.EVICTED_STILL_HOLDING: "an evicted gang holds no quota and no running members "
    "one cycle after its eviction",
    Invariant.MEMBER_OFF_PLAN: "every admitted member runs on a node its PodGroup planned",
    Invariant.MEMBER_OFF_SLICE: "every admitted member of a sliced pod set runs on a node its "
    "slice planned (slice i // k for completion index i)",
}


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: Invariant
    # "Kind namespace/name" (or "Kind name" for cluster-scoped objects), sorted.
    objects: tuple[str, ...]
    message: str
    # Seconds since the epoch: since when it has held, as far as the objects tell
    # (a watch narrows it to when it was first seen); None when they do not say.
    since: float | None = None

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        """The same violation from one look to the next."""
        return (self.invariant.value, self.objects)

    def as_dict(self) -> dict[str, object]:
        return {
            "invariant": self.invariant.value,
            "objects": list(self.objects),
            "message": self.message,
            "since": self.since,
        }
