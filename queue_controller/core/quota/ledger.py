"""Team quotas, and lending within a cohort tree.

Each TeamQuota ``q`` names some resources; a resource it does not name is not
limited by it.  For a named resource, with nominal ``N``, usage ``U``,
borrowing limit ``B`` and lending limit ``L`` (default: all of ``N``):

* ``N - L`` is guaranteed to ``q`` and can never be lent;
* its cohort holds what its members lend, ``sum(L)``, plus the cohort's own
  quota, and lends it on to its parent as the cohort's own limits allow
  (core/quota/tree.py: Kueue's hierarchical cohorts, with Kueue's arithmetic);
* each member's usage above its guarantee, ``max(0, U - (N - L))``, is drawn
  from its cohort, so no cohort at any level can ever be overdrawn; and
* a member never holds more than ``N + B`` in total.

This is the same accounting Kueue uses for ``lendingLimit``: unused nominal is
lent, but never more of it than the lender's ``lendingLimit`` allows.  A quota
without a cohort simply stops at ``N``.  Admissions are reserved in the ledger
as the cycle goes, so gangs admitted earlier in a cycle count against later ones.

Nominal quota is a guarantee: when a gang is refused while its quota has idle
nominal that the cohort has lent out, or that a borrower could take from under
it, what is still idle of the quota's lendable nominal, up to what the gang
needs, is *held* for it for the rest of the cycle, and is not lent again
(Kueue's ``reserveCapacityForUnreclaimablePreempt``).  Without it, small
borrowers would take every GPU the lender gets back, one at a time, and the
lender's gang could wait for good.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from queue_controller.core.model.objects import (
    BorrowPolicy,
    Cohort,
    ReclaimPolicy,
    ResourceQuota,
    TeamQuota,
)
from queue_controller.core.model.quantity import format_milli
from queue_controller.core.model.resources import Resources, scarcity_rank
from queue_controller.core.quota.tree import Node, QuotaTree


@dataclass(frozen=True, slots=True)
class QuotaShortfall:
    quota: TeamQuota
    resource: str
    needed: int
    available: int
    used: int
    # Cohort members that borrow this resource, and how much: where its nominal went.
    lent_to: tuple[tuple[str, int], ...] = ()
    # Cohort members whose idle nominal is held this cycle for a gang of theirs.
    held_for: tuple[str, ...] = ()

    def describe(self) -> str:
        limits = self.quota.resources[self.resource]

        def q(milli: int) -> str:
            return format_milli(milli, self.resource)

        terms = [f"nominal {q(limits.nominal)}", f"{q(self.used)} in use"]
        if self.quota.cohort:
            borrow = "unlimited" if limits.borrowing_limit is None else q(limits.borrowing_limit)
            terms.append(f"borrowing limit {borrow} from cohort {self.quota.cohort}")
        message = (
            f"TeamQuota {self.quota.name}: {self.resource} needs {q(self.needed)}, "
            f"only {q(self.available)} available ({', '.join(terms)})"
        )
        idle = limits.nominal - self.used
        if self.lent_to and idle > self.available:
            borrowers = ", ".join(f"{name} ({q(amount)})" for name, amount in self.lent_to)
            message += f"; {q(idle - self.available)} of its nominal is lent to {borrowers}"
        if self.held_for:
            names = ", ".join(self.held_for)
            message += f"; idle nominal held this cycle for a gang of {names}"
        return message


def guaranteed(limits: ResourceQuota) -> int:
    """The part of the nominal quota that is never lent."""
    if limits.lending_limit is None:
        return 0
    return max(0, limits.nominal - limits.lending_limit)


def lendable(limits: ResourceQuota) -> int:
    return limits.nominal - guaranteed(limits)


class QuotaLedger:
    """Usage per quota, kept up to date through the cohort tree as admissions are reserved."""

    def __init__(
        self,
        quotas: Iterable[TeamQuota],
        usage: Mapping[str, Resources],
        cohorts: Iterable[Cohort] = (),
    ) -> None:
        self._quotas = {quota.name: quota for quota in quotas}
        self.tree = QuotaTree(self._quotas.values(), cohorts, usage)
        # (quota, resource) -> its idle lendable nominal, held for it this cycle: in
        # use, as far as every other node of the tree can tell.
        self._held: dict[tuple[str, str], int] = {}
        self._order: dict[str, tuple[str, ...]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._quotas

    def leaf(self, name: str) -> Node:
        return self.tree.quotas[name]

    def tree_members(self, name: str) -> list[str]:
        """Every quota of ``name``'s cohort tree (``name`` too), by name: those that can
        lend to it or borrow from it."""
        leaf = self.tree.quotas[name]
        if leaf.parent is None:
            return [name]
        return self.tree.members(leaf.root())

    def quota(self, name: str) -> TeamQuota:
        return self._quotas[name]

    def used(self, name: str) -> Mapping[str, int]:
        return self.tree.quotas[name].usage

    def available(self, name: str, resource: str) -> int | None:
        """How much more of ``resource`` quota ``name`` may take now; None if unlimited."""
        quota = self._quotas[name]
        limits = quota.resources.get(resource)
        if limits is None:
            return None
        leaf = self.tree.quotas[name]
        # Rarely anything is held: the key is not even built then (asked of every gang).
        own = self._held.get((name, resource), 0) if self._held else 0
        if own:  # what it holds, it holds for itself
            self._hold(leaf, resource, -own)
        try:
            room = self.tree.available(leaf, resource)
        finally:
            if own:
                self._hold(leaf, resource, own)
        return max(0, room)

    def _hold(self, leaf: Node, resource: str, amount: int) -> None:
        if leaf.parent is not None:
            self.tree.add(leaf.parent, resource, amount)

    def within_nominal(self, name: str, need: Resources) -> bool:
        """Whether ``need`` fits in what is left of the quota's own nominal."""
        # A plain loop: the cycle asks this of every pending gang whose quota has a cohort.
        limits = self._quotas[name].resources
        usage = self.tree.quotas[name].usage
        for resource, amount in need.items():
            if amount > 0:
                quota = limits.get(resource)
                if quota is not None and usage.get(resource, 0) + amount > quota.nominal:
                    return False
        return True

    def hold_idle_nominal(self, name: str, need: Resources) -> None:
        """Keep idle nominal of ``name``, up to what ``need`` asks, from being lent this cycle.

        As Kueue reserves a blocked head's request: only what the gang needs is held
        (never more than what is idle of the quota's lendable nominal, nor than its
        cohort could still give), so the rest stays lendable.
        """
        leaf = self.tree.quotas[name]
        if leaf.parent is None:
            return
        for resource, amount in need.items():
            limits = self._quotas[name].resources.get(resource)
            if limits is None or amount <= 0:
                continue
            used = leaf.usage.get(resource, 0)
            idle = lendable(limits) - max(0, used - guaranteed(limits))
            before = self._held.get((name, resource), 0)
            left = self.tree.available(leaf.parent, resource) + before
            free = min(amount, idle, left)
            if free > before:
                self._hold(leaf, resource, free - before)
                self._held[(name, resource)] = free

    def holders(self, name: str, resource: str) -> tuple[str, ...]:
        """Other quotas of the tree holding idle nominal of ``resource`` this cycle."""
        tree = set(self.tree_members(name))
        return tuple(
            sorted(
                holder
                for (holder, r), amount in self._held.items()
                if r == resource and amount and holder != name and holder in tree
            )
        )

    def borrowers(self, name: str, resource: str) -> tuple[tuple[str, int], ...]:
        """Quotas of the tree using more of ``resource`` than their nominal, with how much."""
        out = []
        for other in self.tree_members(name):
            limits = self._quotas[other].resources.get(resource)
            if other == name or limits is None:
                continue
            over = self.used(other).get(resource, 0) - limits.nominal
            if over > 0:
                out.append((other, over))
        return tuple(out)

    def drawn_from(self, name: str, need: Resources) -> dict[str, list[tuple[str, int]]]:
        """For the admission message: per resource, each cohort that admitting
        ``need`` borrows from, nearest first, with how much."""
        leaf = self.tree.quotas[name]
        out = {}
        for resource in sorted(need, key=scarcity_rank):
            if need[resource] > 0 and resource in leaf.limits:
                drawn = self.tree.borrowed_above(leaf, resource, need[resource])
                if drawn:
                    out[resource] = [(node.name, amount) for node, amount in drawn]
        return out

    def holds_nominal(self, name: str, need: Mapping[str, int]) -> bool:
        """Whether a gang refused for quota holds its quota's idle nominal this cycle.

        A gang within its nominal always does: the cohort lent its nominal out.  One
        that must borrow does when its quota may preempt to borrow
        (``borrowWithinCohort``), it could fit by preempting, found no victim, and
        may not take everything back later: its quota does not reclaim ``Any``
        (Kueue's ``reserveCapacityForUnreclaimablePreempt``, which skips a queue that
        can always reclaim).  Otherwise borrowers would take what frees up first.
        """
        if self.within_nominal(name, need):
            return True
        quota = self._quotas[name]
        policy = quota.preemption
        if (
            policy.borrow_within_cohort is BorrowPolicy.NEVER
            or policy.reclaim_within_cohort is ReclaimPolicy.ANY
        ):
            return False
        leaf = self.tree.quotas[name]
        return all(
            amount <= self.tree.potential(leaf, resource)
            for resource, amount in need.items()
            if amount > 0 and resource in quota.resources
        )

    def borrowed(self, name: str, need: Mapping[str, int]) -> list[str]:
        """What admitting ``need`` borrows beyond the quota's nominal, and which cohorts
        of the tree it comes from, for the message: "4 nvidia.com/gpu from cohort
        research, 2 of it from cohort org via research"."""
        quota = self._quotas[name]
        leaf = self.tree.quotas[name]
        # Only a quota whose cohort has a parent can borrow from more than one level;
        # in a flat cohort (or none) it is the cohort alone, and the tree is not walked.
        nested = leaf.parent is not None and leaf.parent.parent is not None
        used = leaf.usage
        out = []
        for resource in sorted(need, key=scarcity_rank):
            limits = quota.resources.get(resource)
            if limits is None:
                continue
            before = max(0, used.get(resource, 0) - limits.nominal)
            after = max(0, used.get(resource, 0) + need[resource] - limits.nominal)
            if after <= before:
                continue
            amount = after - before
            # As drawn_from says it, worked out only for what is borrowed.
            drawn = self.tree.borrowed_above(leaf, resource, need[resource]) if nested else []
            levels = [(node.name, up) for node, up in drawn] or [(quota.cohort, amount)]
            text = f"{format_milli(amount, resource)} {resource} from cohort {levels[0][0]}"
            for (below, _), (cohort, up) in itertools.pairwise(levels):
                part = format_milli(min(up, amount), resource)
                text += f", {part} of it from cohort {cohort} via {below}"
            out.append(text)
        return out

    def shortfall(self, name: str, need: Resources) -> QuotaShortfall | None:
        """The first resource (scarcest first) that ``need`` would overrun, if any."""
        for resource in self._scarcest_first(name):
            amount = need.get(resource, 0)
            if amount <= 0:
                continue
            room = self.available(name, resource)
            if room is not None and amount > room:
                used = self.used(name).get(resource, 0)
                return QuotaShortfall(
                    self._quotas[name],
                    resource,
                    amount,
                    room,
                    used,
                    lent_to=self.borrowers(name, resource),
                    held_for=self.holders(name, resource),
                )
        return None

    def _scarcest_first(self, name: str) -> tuple[str, ...]:
        """The resources quota ``name`` limits, scarcest first: only those can fall
        short, and a shortfall names the scarcest (asked for every gang tried)."""
        order = self._order.get(name)
        if order is None:
            order = self._order[name] = tuple(
                sorted(self._quotas[name].resources, key=scarcity_rank)
            )
        return order

    def reserve(self, name: str, need: Resources) -> None:
        leaf = self.tree.quotas[name]
        holding = bool(self._held)  # rarely: the victim search reserves in a tight loop
        for resource, amount in need.items():
            if not amount:
                continue
            held = self._held.get((name, resource), 0) if holding else 0
            if not held:
                self.tree.add(leaf, resource, amount)
                continue
            self._hold(leaf, resource, -held)
            keep = leaf.guaranteed(resource)
            before = max(0, leaf.usage.get(resource, 0) - keep)
            self.tree.add(leaf, resource, amount)
            # What it holds for itself it now uses.
            drawn = max(0, leaf.usage.get(resource, 0) - keep) - before
            held = max(0, held - drawn)
            self._held[(name, resource)] = held
            self._hold(leaf, resource, held)
