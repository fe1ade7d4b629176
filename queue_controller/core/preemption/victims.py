"""Who may be evicted for a pending gang, and the search among them.

The candidates are those its TeamQuota's policy allows.

Kueue's policies with Kueue's meanings (``withinTeamQuota``,
``reclaimWithinCohort``, ``borrowWithinCohort``; in a fair-sharing cohort,
``reclaimWithinCohort`` says whom and the shares say when), in order of
preference: gangs of quotas that borrow before gangs within nominal, lower
priority first, the most recently created first (the least work lost), fewer
GPUs first, then by key.  :class:`VictimSearch` finds the fewest among them
that make the gang fit (see core/preemption/preemptor.py for the whole story).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice

from queue_controller.core.model.decisions import Reason
from queue_controller.core.model.objects import (
    BorrowPolicy,
    Preemption,
    ReclaimPolicy,
    WithinPolicy,
)
from queue_controller.core.model.resources import is_extended
from queue_controller.core.placement.shapes import Placer
from queue_controller.core.quota.ledger import QuotaLedger
from queue_controller.core.rules.prepared import Prepared

# At most this many candidates are considered for one preemption (see core/preemption/preemptor.py).
LIMIT = 256

# The candidates among some holders (sorted by Holder.order), lazily, best first.
Chooser = Callable[[Iterable["Holder"]], Iterator[tuple["Holder", Reason]]]


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


def candidates(
    *,
    preemptor: Prepared,
    team_quota: str,
    need: Mapping[str, int],
    policy: Preemption,
    ledger: QuotaLedger,
    fair: bool = False,
    live: bool = False,
) -> Chooser:
    """Which of some admitted gangs ``policy`` lets ``preemptor`` evict, in order of preference.

    The chooser is given holders sorted by :attr:`Holder.order`, without the gangs
    already chosen as victims; gangs of quotas that borrow go first.  The
    candidates are produced lazily, so the search, which mostly needs a handful,
    reads only those: a busy cluster's thousands of admitted gangs are not all
    looked at for every preemption.  Whether the preemptor is within its nominal
    is judged once, now; whether a candidate's quota borrows, once too, or, with
    ``live``, as each candidate is reached (:class:`_Borrowing`).
    """
    context = _Context(
        team_quota=team_quota,
        policy=policy,
        priority=preemptor.priority,
        created=preemptor.workload.created,
        within_nominal=ledger.within_nominal(team_quota, need),
        fair=fair,
    )
    borrowing = _Borrowing(ledger, need, team_quota, live=live)
    return lambda holders: _in_order(holders, borrowing, context)


def reclaim_candidates(
    *,
    preemptor: Prepared,
    team_quota: str,
    need: Mapping[str, int],
    policy: Preemption,
    ledger: QuotaLedger,
    live: bool = False,
) -> Chooser:
    """The candidates of Kueue's attempt without borrowing, in Kueue's order.

    Tried when the first search finds nothing.  The gang must then fit within its
    own quota's nominal, so what other quotas borrow may be taken back
    (``reclaimWithinCohort``) whether or not the gang is within its nominal now:
    its own lower-priority gangs (``withinTeamQuota``) may be what brings it back
    within.  Other quotas' gangs come first, then the gang's own.
    """
    context = _Context(
        team_quota=team_quota,
        policy=policy,
        priority=preemptor.priority,
        created=preemptor.workload.created,
        within_nominal=True,  # what the fit requires at the end, not what holds now
        fair=False,
    )
    borrowing = _Borrowing(ledger, need, team_quota, live=live)

    def chosen(holders: Iterable[Holder]) -> Iterator[tuple[Holder, Reason]]:
        own: list[tuple[Holder, Reason]] = []
        for holder in holders:
            if holder.team_quota == team_quota:
                reason = _reason(holder, borrowing, context)
                if reason is not None:
                    own.append((holder, reason))
                continue
            if borrowing.get(holder.team_quota, False):
                reason = _reason(holder, borrowing, context)
                if reason is not None:
                    yield holder, reason
        yield from own

    return chosen


class _Borrowing:
    """Whether a quota of the preemptor's cohort borrows a resource the gang needs.

    Judged once, before the search takes anything out, or, ``live``, each time it
    is asked: the search asks for the next candidate only after taking the last one
    out of the ledger, so a lender that its first victim brings back within its
    nominal is no longer borrowing, and its other gangs are spared (Kueue re-judges
    a candidate's ClusterQueue so).  The once-judged order finds more placements
    (two gangs of one node where the greedy order took a third elsewhere first);
    :func:`lenders_still_borrowed` checks its result, and the live order is the
    fallback when it fails.
    """

    def __init__(
        self,
        ledger: QuotaLedger,
        need: Mapping[str, int],
        team_quota: str,
        *,
        live: bool,
    ) -> None:
        self.ledger, self.need, self.live = ledger, need, live
        members = ledger.tree_members(team_quota)
        self.once = {name: quota_borrows(ledger, name, need) for name in {team_quota, *members}}

    def get(self, team_quota: str, default: bool = False) -> bool:
        if team_quota not in self.once:
            return default  # another cohort's: nothing of it is lent to this gang
        if not self.live:
            return self.once[team_quota]
        return quota_borrows(self.ledger, team_quota, self.need)


def lenders_still_borrowed(
    victims: Iterable[tuple[Holder, Reason]],
    team: str,
    ledger: QuotaLedger,
    need: Mapping[str, int],
) -> bool:
    """Whether each other quota's victims could have been taken one by one, each while
    the quota still borrowed (with the victims out of ``ledger``): so it must still
    borrow with its largest victim back.  Otherwise a gang that runs within its own
    quota's nominal would be evicted."""
    by_quota: dict[str, list[Holder]] = {}
    for holder, _ in victims:
        if holder.team_quota != team:
            by_quota.setdefault(holder.team_quota, []).append(holder)
    for name, holders in by_quota.items():
        if len(holders) == 1:
            continue  # its only victim was a candidate because its quota borrowed then
        if not any(_borrows_with(ledger, name, h.need, need) for h in holders):
            return False
    return True


def _borrows_with(
    ledger: QuotaLedger, name: str, back: Mapping[str, int], need: Mapping[str, int]
) -> bool:
    """:func:`quota_borrows`, were ``back`` in use again (read off, nothing changed)."""
    used = ledger.used(name)
    return any(
        used.get(resource, 0) + back.get(resource, 0) > limits.nominal
        for resource, limits in ledger.quota(name).resources.items()
        if need.get(resource, 0) > 0
    )


@dataclass(frozen=True, slots=True)
class _Context:
    team_quota: str
    policy: Preemption
    priority: int
    created: float
    within_nominal: bool
    fair: bool


def _in_order(
    holders: Iterable[Holder], borrowing: _Borrowing, context: _Context
) -> Iterator[tuple[Holder, Reason]]:
    rest: list[tuple[Holder, Reason]] = []
    first = 0
    for holder in holders:
        reason = _reason(holder, borrowing, context)
        if reason is None:
            continue
        if borrowing.get(holder.team_quota):
            yield holder, reason
            first += 1
            if first >= LIMIT:
                break
        else:
            rest.append((holder, reason))
    yield from rest


def _reason(holder: Holder, borrowing: _Borrowing, context: _Context) -> Reason | None:
    """Why ``holder`` may be evicted, or None if it may not."""
    other = holder.priority
    priority = context.priority
    policy = context.policy
    if holder.team_quota == context.team_quota:
        within = policy.within_team_quota
        if (within is WithinPolicy.LOWER_PRIORITY and other < priority) or (
            within is WithinPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY
            and (other < priority or (other == priority and holder.created > context.created))
        ):
            return Reason.WITHIN_TEAM_QUOTA
        return None
    if not borrowing.get(holder.team_quota, False):
        return None  # another cohort's, or lending: only what is lent can be taken back
    reclaim = policy.reclaim_within_cohort
    borrow = policy.borrow_within_cohort
    threshold = policy.borrow_max_priority
    within_nominal = context.within_nominal
    reclaims = reclaim is ReclaimPolicy.ANY or (
        reclaim is ReclaimPolicy.LOWER_PRIORITY and other < priority
    )
    below_threshold = (
        borrow is BorrowPolicy.LOWER_PRIORITY
        and other < priority
        and (threshold is None or other <= threshold)
    )
    if context.fair:
        # Kueue's fair sharing: reclaimWithinCohort decides whom, the shares decide
        # when (Preemptor._victims).  borrowWithinCohort is not applied, as Kueue's
        # fair preemption does not apply it: the shares already say when a borrower's
        # gang may go, and a priority threshold beside them would let a gang take
        # from a quota whose share is below its own.
        if reclaims:
            return Reason.RECLAIM_WITHIN_COHORT if within_nominal else Reason.FAIR_SHARING
        return None
    if within_nominal and reclaims:
        return Reason.RECLAIM_WITHIN_COHORT
    if not within_nominal and below_threshold:
        return Reason.BORROW_WITHIN_COHORT
    return None


def ruled(candidate: tuple[Holder, Reason], team: str) -> bool:
    """Whether fair sharing's share rule judges this victim: another quota's gang."""
    return candidate[0].team_quota != team


def quota_borrows(ledger: QuotaLedger, team_quota: str, need: Mapping[str, int]) -> bool:
    """Whether the quota uses more than its nominal of a resource ``need`` asks for."""
    quota = ledger.quota(team_quota)
    used = ledger.used(team_quota)
    return any(
        used.get(resource, 0) > limits.nominal
        for resource, limits in quota.resources.items()
        if need.get(resource, 0) > 0
    )


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
        self, candidates: Iterable[tuple[Holder, Reason]], fits: Callable[[], bool]
    ) -> list[tuple[Holder, Reason]] | None:
        """The victims after whose eviction ``fits()``, minimal; None if there are none.

        ``candidates`` is read lazily, one at a time between take-outs, so an order
        that depends on what is already taken out (fair sharing's) sees it.  On
        success the victims stay taken out (the caller evicts them); on failure
        everything is as it was.
        """
        taken: list[tuple[Holder, Reason]] = []
        for candidate in islice(candidates, LIMIT):
            self.take_out(candidate[0])
            taken.append(candidate)
            if fits():
                break
        else:
            for holder, _ in reversed(taken):
                self.put_back(holder)
            return None
        # The last one taken stays: without it the greedy had not fitted yet.
        for candidate in reversed(taken[:-1]):
            self.put_back(candidate[0])
            if fits():
                taken.remove(candidate)  # spared: the gang fits without evicting it
            else:
                self.take_out(candidate[0])
        return taken
