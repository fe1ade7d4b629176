"""Fair sharing within a cohort: each TeamQuota's weighted share of what it borrows.

A quota's share is Kueue's *dominant resource share* (DRF): for each resource
it names, what it uses beyond its nominal divided by all that the cohort lends
of that resource, and the largest of these, divided by the quota's weight.  A
quota within its nominal everywhere has share 0; a quota of weight 0 that
borrows has an infinite share (Kueue reports it as the largest int64), so it
borrows only what no quota of positive weight asks for.

In a cohort tree every node has a share: what its subtree uses beyond its
subtree's quota, divided by what its parent could give it (Kueue's
``potentialAvailable``), divided by its own weight; a root has none.  Fair
sharing then works at every level: gangs take turns, and victims are judged,
by the shares of the two nodes just below the lowest cohort the quotas share.

Shares are exact fractions: two quotas that borrow the same part of the cohort
have equal shares, and "at or above" in the preemption rule means just that.

Where a tree's root Cohort enables fair sharing:

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

import itertools
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from queue_controller.core.model.objects import Cohort, FairStrategy
from queue_controller.core.quota.ledger import QuotaLedger
from queue_controller.core.quota.tree import Node
from queue_controller.core.rules.prepared import Prepared

# Kueue reports a borrowing quota of weight 0 with the largest int64 share.
INFINITE = Fraction(2**63 - 1)

# A gang waiting its fair turn: (position, gang, its quota charge, that charge as a key).
_Waiting = tuple[int, Prepared, Mapping[str, int], tuple[tuple[str, int], ...]]


class FairShares:
    """The shares of the nodes of fair-sharing cohort trees, read off the cycle's ledger.

    Fair sharing is switched on, and its strategies chosen, by a tree's root
    Cohort; it then applies at every level (Kueue's hierarchical fair sharing).
    """

    def __init__(self, ledger: QuotaLedger, cohorts: Iterable[Cohort]) -> None:
        self.ledger = ledger
        self._strategies = {c.name: c.preemption_strategies for c in cohorts if c.fair_sharing}
        self.cohorts = frozenset(self._strategies)
        # The tree does not change shape in a cycle; every preemption asks these again.
        self._lcas: dict[tuple[str, str], tuple[Node, Node]] = {}
        self._paths: dict[str, tuple[Node, ...]] = {}

    def _root(self, quota_name: str) -> Node | None:
        leaf = self.ledger.leaf(quota_name)
        return None if leaf.parent is None else leaf.root()

    def strategies(self, quota_name: str) -> tuple[FairStrategy, ...]:
        """The preemption strategies of the quota's fair-sharing tree, in order."""
        root = self._root(quota_name)
        return () if root is None else self._strategies.get(root.name, ())

    def applies(self, quota_name: str) -> bool:
        """Whether ``quota_name`` belongs to a tree whose root enables fair sharing."""
        if quota_name not in self.ledger:
            return False
        root = self._root(quota_name)
        return root is not None and root.name in self.cohorts

    def share(self, quota_name: str, change: Mapping[str, int] | None = None) -> Fraction:
        """The quota's weighted share, with ``change`` added to its usage (to try a gang
        on, or take a victim off)."""
        return self.node_share(self.ledger.leaf(quota_name), quota_name, change)

    def node_share(
        self, node: Node, quota_name: str = "", change: Mapping[str, int] | None = None
    ) -> Fraction:
        """A node's weighted share (Kueue's DRS), with ``change`` added to the usage of
        TeamQuota ``quota_name`` below it: what it uses beyond its subtree's quota,
        divided by what its parent could give it, the largest over resources, divided
        by its weight.  A root has none."""
        if node.parent is None:
            return Fraction(0)
        if not change or not node.cohort:
            return self._share(node, change or {})
        # A cohort's usage with the change: what it would move up to the cohort.
        tree, leaf = self.ledger.tree, self.ledger.leaf(quota_name)
        moved = {
            resource: tree.usage_with(node, leaf, resource, amount) - node.usage.get(resource, 0)
            for resource, amount in change.items()
            if resource in node.subtree
        }
        return self._share(node, moved)

    def _share(self, node: Node, change: Mapping[str, int]) -> Fraction:
        assert node.parent is not None
        # The largest borrowed / lent, kept as a pair of integers until the end: this runs
        # for every turn and every victim, and one Fraction costs more than the rest.
        top, bottom = 0, 1
        borrowing = False
        for resource, quota in node.subtree.items():
            borrowed = node.usage.get(resource, 0) + change.get(resource, 0) - quota
            if borrowed <= 0:
                continue
            borrowing = True
            lent = self.ledger.tree.potential(node.parent, resource)
            if lent > 0 and borrowed * bottom > top * lent:
                top, bottom = borrowed, lent
        if not borrowing:
            return Fraction(0)
        if node.weight <= 0:
            return INFINITE
        return Fraction(top * 1000, bottom * node.weight)

    def weighted_share(self, quota_name: str, change: Mapping[str, int] | None = None) -> int:
        """The share as Kueue's ``status.fairSharing.weightedShare``: times 1000, rounded down."""
        return _weighted(self.share(quota_name, change))

    def cohort_share(self, cohort: str) -> int:
        """A cohort's weighted share, as its status shows it (0 for a root)."""
        node = self.ledger.tree.cohorts.get(cohort)
        return 0 if node is None else _weighted(self.node_share(node))

    def why_not_preempted(self, quota_name: str, need: Mapping[str, int]) -> str:
        """For a pending message: the shares that kept a gang from taking back borrowed
        quota (weighted shares, as the TeamQuotas' status shows them); empty when no
        other quota borrows."""
        others = [
            f"{other} {self.weighted_share(other)}"
            for other in self.ledger.tree_members(quota_name)
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

    def path_below_root(self, quota_name: str) -> tuple[Node, ...]:
        """The nodes from the root's child down to the quota's leaf."""
        path = self._paths.get(quota_name)
        if path is None:
            path = tuple(reversed(list(self.ledger.leaf(quota_name).path())[:-1]))
            self._paths[quota_name] = path
        return path

    def almost_lcas(self, preemptor: str, target: str) -> tuple[Node, Node]:
        """The two nodes just below the lowest cohort that holds both quotas (Kueue's
        almost-LCAs): where fair sharing compares a preemptor with a victim's quota."""
        known = self._lcas.get((preemptor, target))
        if known is None:
            known = self._lcas[(preemptor, target)] = self._almost_lcas(preemptor, target)
        return known

    def _almost_lcas(self, preemptor: str, target: str) -> tuple[Node, Node]:
        mine = list(self.ledger.leaf(preemptor).path())
        theirs = list(self.ledger.leaf(target).path())
        ancestors = {id(node) for node in mine}
        for below, node in itertools.pairwise(theirs):
            if id(node) in ancestors:
                return mine[[id(n) for n in mine].index(id(node)) - 1], below
        return mine[-1], theirs[-1]  # different trees: never asked


def _weighted(share: Fraction) -> int:
    return int(share) if share == INFINITE else int(share * 1000)


class FairTurns:
    """Who goes next among one fair-sharing tree's borrowing gangs.

    Each quota's gangs wait in their own order (priority, then age).  From the
    root down, each cohort picks, among its children that have a gang waiting,
    the one whose share would be lowest with its own pick admitted (ties: the
    earlier gang), as Kueue's fair-sharing iterator walks the tree.  What a node
    picks depends only on usage below it, so after each decision only the paths
    of the quotas it changed (the decided gang's, and those of the gangs it
    preempted) are judged again.
    """

    def __init__(self, shares: FairShares, gangs: Iterable[tuple[str, Prepared]]) -> None:
        self._shares = shares
        # quota -> its gangs, in order: (position, gang, its quota charge, that as a key)
        self._waiting: dict[str, deque[_Waiting]] = defaultdict(deque)
        for position, (quota, prepared) in enumerate(gangs):
            need = prepared.need()
            self._waiting[quota].append((position, prepared, need, tuple(sorted(need.items()))))
        # id(node) -> its pick: (the gang's position, its quota); None: nobody waits below.
        self._picks: dict[int, tuple[int, str] | None] = {}
        # id(node) -> its share with its pick admitted, asked only where siblings compete,
        # and what it was read for: the tree's version, the pick's quota and charge (a gang
        # like the last, refused, leaves it as it was).
        self._share_with: dict[int, tuple[int, str, tuple[tuple[str, int], ...], Fraction]] = {}
        roots = {id(r): r for r in (shares.ledger.leaf(q).root() for q in self._waiting)}
        self._roots = list(roots.values())

    def _pick(self, node: Node) -> tuple[int, str] | None:
        key = id(node)
        if key in self._picks:
            return self._picks[key]
        pick: tuple[int, str] | None = None
        if not node.cohort:
            waiting = self._waiting.get(node.name)
            if waiting:
                pick = (waiting[0][0], node.name)
        else:
            picks = [(child, p) for child in node.children if (p := self._pick(child)) is not None]
            if len(picks) == 1:
                pick = picks[0][1]
            elif picks:
                pick = min(picks, key=lambda c: (self._share_of(c[0], c[1][1]), c[1][0]))[1]
        self._picks[key] = pick
        return pick

    def _share_of(self, node: Node, quota: str) -> Fraction:
        """``node``'s share with its pick (a gang of ``quota``) admitted."""
        _, _, need, charge = self._waiting[quota][0]
        version = self._shares.ledger.tree.version
        known = self._share_with.get(id(node))
        if known is not None and known[:3] == (version, quota, charge):
            return known[3]
        share = self._shares.node_share(node, quota, need)
        self._share_with[id(node)] = (version, quota, charge, share)
        return share

    def _forget(self, quota: str) -> None:
        ledger = self._shares.ledger
        for node in ledger.tree.path(ledger.leaf(quota)):
            self._picks.pop(id(node), None)

    def next(self) -> tuple[str, Prepared]:
        """The gang to decide now; call :meth:`decided` once it is decided."""
        if len(self._roots) == 1:  # most often: one tree
            only = self._pick(self._roots[0])
            assert only is not None, "next() with nobody waiting"
            quota = only[1]
        else:
            picks = [p for p in (self._pick(root) for root in self._roots) if p is not None]
            _, quota = min(picks)
        self._forget(quota)
        return quota, self._waiting[quota].popleft()[1]

    def decided(self, changed: Iterable[str]) -> None:
        """The quotas whose usage the decision changed (the decided gang's first)."""
        decided, *victims = changed
        # The decided gang's path was forgotten when it was picked, and nothing was
        # picked since: only its victims' paths are still known.
        for quota in dict.fromkeys(victims):
            if quota != decided and quota in self._shares.ledger:
                self._forget(quota)


@dataclass(frozen=True, slots=True)
class CohortFigures:
    """What a Cohort's status shows, read off the ledger at the end of a cycle."""

    subtree_quota: Mapping[str, int]  # its own nominal and what its children lend it
    used: Mapping[str, int]  # what the TeamQuotas of its subtree use of what they name
    weighted_share: int | None  # None where its tree's root does not enable fair sharing


def cohort_figures(fair: FairShares, names: Iterable[str]) -> dict[str, CohortFigures]:
    """The figures of the cohorts ``names`` (those a Cohort object defines)."""
    tree = fair.ledger.tree
    out = {}
    for name in names:
        node = tree.cohorts.get(name)
        if node is None:
            continue
        used: dict[str, int] = {}
        for leaf in tree.leaves(node):
            for resource in leaf.limits:  # what the quotas name, as a TeamQuota's status
                used[resource] = used.get(resource, 0) + leaf.usage.get(resource, 0)
        on = node.root().name in fair.cohorts
        out[name] = CohortFigures(
            subtree_quota=dict(node.subtree),
            used=used,
            weighted_share=fair.cohort_share(name) if on else None,
        )
    return out
