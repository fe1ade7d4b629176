"""Which admitted gangs to evict so that a gang fits: on quota *and* on named nodes.

Kueue and Volcano choose victims by quota alone, so a preemption can free 8
GPUs scattered over several nodes while the 8-GPU pod it was for still fits
nowhere (Kueue #5243).  Here a victim set is accepted only when, with the
victims gone, the gang passes the quota check **and** the same node placement
the core uses for every admission.  It never evicts when the gang would still
not fit.

The search (Kueue's, made placement-aware):

1. *Candidates* are whole admitted gangs that the preemptor's TeamQuota policy
   allows (``withinTeamQuota``, ``reclaimWithinCohort``, ``borrowWithinCohort``,
   with Kueue's meanings), ordered by preference: gangs of quotas that borrow
   before gangs within nominal, lower priority first, the most recently created
   first (the least work lost), fewer GPUs first, then by key.
2. *Greedy*: take candidates out one by one, in that order, until the gang fits.
   If it never does, nothing is evicted.
3. *Minimal*: put each taken candidate back, the last taken first; if the gang
   still fits without evicting it, it is spared.  No victim of the result can be
   spared alone (no proper subset missing one victim works).

Its cost is bounded: at most ``LIMIT`` candidates are considered, and each
greedy or minimising step is one quota check and one placement attempt on the
equivalence index (its moves are patches, not rebuilds), so a preemption costs
at most ``2 * LIMIT`` placements.  ``LIMIT`` is far above what a real
preemption evicts (Kueue evicts a handful of workloads per preemption).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from queue_controller.core.decisions import Reason
from queue_controller.core.model import (
    BorrowPolicy,
    Preemption,
    ReclaimPolicy,
    WithinPolicy,
)
from queue_controller.core.prepared import Prepared
from queue_controller.core.quota import QuotaLedger
from queue_controller.core.resources import is_extended
from queue_controller.core.shapes import Placer

LIMIT = 256


@dataclass(frozen=True, slots=True)
class Holder:
    """An admitted gang, as a candidate victim: what evicting it gives back."""

    prepared: Prepared
    team_quota: str
    need: Mapping[str, int]  # its quota charge
    held: Mapping[str, Mapping[str, int]]  # node -> resources it holds there
    # Read by every preemption's candidate scan: computed once.
    key: str = field(init=False)
    priority: int = field(init=False)
    created: float = field(init=False)
    accelerators: int = field(init=False)

    def __post_init__(self) -> None:
        workload = self.prepared.workload
        object.__setattr__(self, "key", workload.key)
        object.__setattr__(self, "priority", self.prepared.priority)
        object.__setattr__(self, "created", workload.created)
        gpus = sum(amount for name, amount in self.need.items() if is_extended(name))
        object.__setattr__(self, "accelerators", gpus)

    @property
    def order(self) -> tuple[int, float, int, str]:
        """Preference within a class: lower priority, newest, fewer GPUs, then by key."""
        return (self.priority, -self.created, self.accelerators, self.key)


class VictimSearch:
    """Takes victims out of the ledger and the placer while it looks, and puts back
    whatever it does not choose."""

    def __init__(self, ledger: QuotaLedger, placer: Placer) -> None:
        self.ledger = ledger
        self.placer = placer

    def take_out(self, holder: Holder) -> None:
        self.ledger.reserve(holder.team_quota, {r: -a for r, a in holder.need.items()})
        for node, amounts in holder.held.items():
            self.placer.adjust(node, amounts)

    def put_back(self, holder: Holder) -> None:
        self.ledger.reserve(holder.team_quota, holder.need)
        for node, amounts in holder.held.items():
            self.placer.adjust(node, {r: -a for r, a in amounts.items()})

    def search(
        self, candidates: list[tuple[Holder, Reason]], fits: Callable[[], bool]
    ) -> list[tuple[Holder, Reason]] | None:
        """The victims after whose eviction ``fits()``, minimal; None if there are none.

        On success the victims stay taken out (the caller evicts them); on failure
        everything is as it was.
        """
        taken: list[tuple[Holder, Reason]] = []
        for candidate in candidates[:LIMIT]:
            self.take_out(candidate[0])
            taken.append(candidate)
            if fits():
                break
        else:
            for holder, _ in reversed(taken):
                self.put_back(holder)
            return None
        for candidate in reversed(list(taken)):
            self.put_back(candidate[0])
            if fits():
                taken.remove(candidate)  # spared: the gang fits without evicting it
            else:
                self.take_out(candidate[0])
        return taken


def candidates(
    *,
    preemptor: Prepared,
    team_quota: str,
    need: Mapping[str, int],
    policy: Preemption,
    holders: list[Holder],
    ledger: QuotaLedger,
    taken: set[str],
) -> list[tuple[Holder, Reason]]:
    """The admitted gangs ``policy`` lets ``preemptor`` evict, in order of preference.

    ``holders`` comes sorted by :attr:`Holder.order`; gangs of quotas that borrow go
    first.  The scan stops once ``LIMIT`` of those are found, so a busy cluster's
    thousands of admitted gangs are not all looked at for every preemption.
    """
    mine = ledger.quota(team_quota)
    priority = preemptor.priority
    created = preemptor.workload.created
    within_nominal = ledger.within_nominal(team_quota, need)
    borrowing: dict[str, bool] = {}

    def borrows(team: str) -> bool:
        found = borrowing.get(team)
        if found is None:
            found = borrowing[team] = _borrows(ledger, team, need)
        return found

    first: list[tuple[Holder, Reason]] = []
    rest: list[tuple[Holder, Reason]] = []
    for holder in holders:
        if holder.key in taken:
            continue
        other = holder.priority
        reason: Reason | None = None
        if holder.team_quota == team_quota:
            within = policy.within_team_quota
            if (within is WithinPolicy.LOWER_PRIORITY and other < priority) or (
                within is WithinPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
                and (other < priority or (other == priority and holder.created > created))
            ):
                reason = Reason.WITHIN_TEAM_QUOTA
        elif mine.cohort and ledger.quota(holder.team_quota).cohort == mine.cohort:
            if not borrows(holder.team_quota):
                continue  # only what is lent can be taken back
            reclaim = policy.reclaim_within_cohort
            borrow = policy.borrow_within_cohort
            threshold = policy.borrow_max_priority
            if within_nominal and (
                reclaim is ReclaimPolicy.ANY
                or (reclaim is ReclaimPolicy.LOWER_PRIORITY and other < priority)
            ):
                reason = Reason.RECLAIM_WITHIN_COHORT
            elif (
                not within_nominal
                and borrow is BorrowPolicy.LOWER_PRIORITY
                and other < priority
                and (threshold is None or other <= threshold)
            ):
                reason = Reason.BORROW_WITHIN_COHORT
        if reason is None:
            continue
        (first if borrows(holder.team_quota) else rest).append((holder, reason))
        if len(first) >= LIMIT:
            break
    return (first + rest)[:LIMIT]


def _borrows(ledger: QuotaLedger, team_quota: str, need: Mapping[str, int]) -> bool:
    """Whether the quota uses more than its nominal of a resource ``need`` asks for."""
    quota = ledger.quota(team_quota)
    used = ledger.used(team_quota)
    return any(
        used.get(resource, 0) > limits.nominal
        for resource, limits in quota.resources.items()
        if need.get(resource, 0) > 0
    )
