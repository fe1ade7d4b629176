"""Fair sharing within a cohort: each TeamQuota's weighted share of what it borrows.

A quota's share is Kueue's *dominant resource share* (DRF): for each resource
it names, what it uses beyond its nominal divided by all that the cohort lends
of that resource, and the largest of these, divided by the quota's weight.  A
quota within its nominal everywhere has share 0; a quota of weight 0 that
borrows has an infinite share (Kueue reports it as the largest int64), so it
borrows only what no quota of positive weight asks for.

Shares are exact fractions: two quotas that borrow the same part of the cohort
have equal shares, and "at or above" in the preemption rule means just that.

Where a Cohort object enables fair sharing:

* gangs of its quotas that borrow are tried lowest share first, the share
  counted as it would be once the gang is admitted (Kueue's order), so a
  quota that borrows little goes before one that borrows much whatever the
  priorities of their gangs; within a quota, priority and age still order;
* a gang may preempt another quota's borrowing gang only as the cohort's
  preemption strategies allow, tried in order (Kueue's, and its default both):
  ``LessThanOrEqualToFinalShare``, the victim's quota stays, without the victim,
  at or above the preemptor's share with the gang; ``LessThanInitialShare``,
  the preemptor's share with the gang is below the victim's quota's share with
  the victim.  Either way the victim cannot take the room back by the same
  rule: there is no ping-pong.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping
from fractions import Fraction

from queue_controller.core.model.objects import Cohort, FairStrategy
from queue_controller.core.quota.ledger import QuotaLedger
from queue_controller.core.rules.prepared import Prepared

# Kueue reports a borrowing quota of weight 0 with the largest int64 share.
INFINITE = Fraction(2**63 - 1)


class FairShares:
    """The shares of the quotas in fair-sharing cohorts, read off the cycle's ledger."""

    def __init__(self, ledger: QuotaLedger, cohorts: Iterable[Cohort]) -> None:
        self.ledger = ledger
        self._strategies = {c.name: c.preemption_strategies for c in cohorts if c.fair_sharing}
        self.cohorts = frozenset(self._strategies)

    def strategies(self, quota_name: str) -> tuple[FairStrategy, ...]:
        """The preemption strategies of the quota's fair-sharing cohort, in order."""
        return self._strategies.get(self.ledger.quota(quota_name).cohort, ())

    def applies(self, quota_name: str) -> bool:
        """Whether ``quota_name`` belongs to a cohort with fair sharing enabled."""
        if quota_name not in self.ledger:
            return False
        cohort = self.ledger.quota(quota_name).cohort
        return bool(cohort) and cohort in self.cohorts

    def share(self, quota_name: str, change: Mapping[str, int] | None = None) -> Fraction:
        """The quota's weighted share, with ``change`` added to its usage (to try a gang
        on, or take a victim off)."""
        quota = self.ledger.quota(quota_name)
        used = self.ledger.used(quota_name)
        change = change or {}
        dominant = Fraction(0)
        for resource, limits in quota.resources.items():
            borrowed = used.get(resource, 0) + change.get(resource, 0) - limits.nominal
            lent = self.ledger.pool_size(quota.cohort, resource)
            if borrowed > 0 and lent > 0:
                dominant = max(dominant, Fraction(borrowed, lent))
        if not dominant:
            return dominant
        if quota.fair_weight <= 0:
            return INFINITE
        return dominant * 1000 / quota.fair_weight

    def weighted_share(self, quota_name: str, change: Mapping[str, int] | None = None) -> int:
        """The share as Kueue's ``status.fairSharing.weightedShare``: times 1000, rounded down."""
        share = self.share(quota_name, change)
        return int(share) if share == INFINITE else int(share * 1000)

    def why_not_preempted(self, quota_name: str, need: Mapping[str, int]) -> str:
        """For a pending message: the shares that kept a gang from taking back borrowed
        quota (weighted shares, as the TeamQuotas' status shows them); empty when no
        other quota borrows."""
        cohort = self.ledger.quota(quota_name).cohort
        others = [
            f"{other} {self.weighted_share(other)}"
            for other in self.ledger.members(cohort)
            if other != quota_name and self.share(other) > 0
        ]
        mine = self.weighted_share(quota_name, need)
        if not others:
            return ""  # nobody to take back from: the quota message says it all
        rules = {
            FairStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE: "to stay at or above that",
            FairStrategy.LESS_THAN_INITIAL_SHARE: "from a share above it",
        }
        ways = ", or ".join(rules[s] for s in self.strategies(quota_name))
        return (
            f"fair sharing: TeamQuota {quota_name}'s weighted share would be {mine} with it; "
            f"a borrower gives way only {ways} ({', '.join(others)})"
        )


class FairTurns:
    """Who goes next among one fair-sharing cohort's borrowing gangs.

    Each quota's gangs wait in their own order (priority, then age); of the
    quotas' first gangs, the one whose quota's share would be lowest with it
    admitted goes first (ties: the earlier gang).  After each decision the
    shares of the quotas it changed are read again: the decided gang's, and
    those of the gangs it preempted.
    """

    def __init__(self, shares: FairShares, gangs: Iterable[tuple[str, Prepared]]) -> None:
        self._shares = shares
        self._waiting: dict[str, deque[tuple[int, Prepared]]] = defaultdict(deque)
        for position, (quota, prepared) in enumerate(gangs):
            self._waiting[quota].append((position, prepared))
        self._heap: list[tuple[Fraction, int, str, int]] = []
        self._version: Counter[str] = Counter()
        for quota in self._waiting:
            self._push(quota)

    def _push(self, quota: str) -> None:
        waiting = self._waiting.get(quota)
        if waiting:
            position, prepared = waiting[0]
            share = self._shares.share(quota, prepared.need())
            heapq.heappush(self._heap, (share, position, quota, self._version[quota]))

    def next(self) -> tuple[str, Prepared]:
        """The gang to decide now; call :meth:`decided` once it is decided."""
        while True:
            _, _, quota, version = heapq.heappop(self._heap)
            if version == self._version[quota]:
                self._version[quota] += 1  # out of the heap until it is decided
                return quota, self._waiting[quota].popleft()[1]

    def decided(self, changed: Iterable[str]) -> None:
        """The quotas whose usage the decision changed (the decided gang's first)."""
        for quota in dict.fromkeys(changed):
            if quota in self._waiting:
                self._version[quota] += 1
                self._push(quota)
