"""Victims in a fair-sharing cohort: taken by share, each one only as the share rule allows.

The search is :class:`VictimSearch`'s (greedy, then minimal), fed quota by quota:
at each step the next candidate comes from the quota with the highest share
now, the victims taken so far already gone (the preemptor's own quota by its
share too), each quota's candidates in their own order (lower priority,
newest, fewer GPUs).

In a cohort tree, "the quota" in what follows is the node just below the lowest
cohort that holds both the victim's quota and the preemptor's (Kueue's
almost-LCA), and candidates come from the node with the highest share at each
level, from the root down.

The rule, Kueue's, judged for each candidate as it is reached, with the victims
taken before it already out of the ledger: the cohort's preemption strategies,
tried in order.  Under the first, every candidate of another quota is taken
only if the strategy allows it, and those it refuses wait; if the gang still
does not fit, the next strategy judges the refused ones, in the same order, and
so on.  ``LessThanOrEqualToFinalShare``: the quota, without the candidate,
stays at or above the preemptor's share with the gang.
``LessThanInitialShare``: the preemptor's share with the gang is below the
quota's share now, the candidate still in.  So the victims that pass are kept
one by one, as Kueue keeps them, while the search still judges every set by
whether the gang then fits on named nodes.  The minimising pass that follows
only puts victims back, which raises their quotas' shares: every kept victim
still passes.  A preemptor of weight 0 that would borrow has an infinite share
and takes from nobody (two of them would take the same GPUs in turns);
``LessThanInitialShare`` is not applied against a quota of weight 0 either,
whose share is infinite however little it borrows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction

from queue_controller.core.model.decisions import Reason
from queue_controller.core.model.objects import FairStrategy
from queue_controller.core.model.resources import Resources
from queue_controller.core.preemption.victims import (
    LIMIT,
    Holder,
    VictimSearch,
    quota_borrows,
    ruled,
)
from queue_controller.core.quota.fairshare import INFINITE, FairShares

Candidate = tuple[Holder, Reason]


class ShareRuledSearch:
    def __init__(self, search: VictimSearch, fair: FairShares) -> None:
        self.search = search
        self.fair = fair

    def run(
        self,
        streams: Mapping[str, Iterator[Candidate]],
        team: str,
        need: Resources,
        fits: Callable[[], bool],
    ) -> list[Candidate] | None:
        """The victims, minimal, each allowed by the share rule; None if there are none."""
        return self.search.search(self._judged(streams, team, need), fits)

    def _judged(
        self, streams: Mapping[str, Iterator[Candidate]], team: str, need: Resources
    ) -> Iterator[Candidate]:
        """The candidates the search may take, strategy by strategy (Kueue's order)."""
        waiting: Mapping[str, Iterator[Candidate]] = streams
        # The preemptor's share with the gang, by the node it is compared at: it changes
        # only when a victim below that node is taken out.
        mine: dict[int, Fraction] = {}
        for turn, strategy in enumerate(self.fair.strategies(team)):
            refused: dict[str, list[Candidate]] = defaultdict(list)
            judge = self._judge(strategy, team, need, refused, mine, replayed=turn > 0)
            for candidate in self._by_share(waiting, judge):
                yield candidate  # the search takes it out before it reads on
                if mine:
                    for node in self.fair.path_below_root(candidate[0].team_quota):
                        mine.pop(id(node), None)
            if not refused:
                return  # nothing for a later strategy to judge
            waiting = {quota: iter(candidates) for quota, candidates in refused.items()}

    def _judge(
        self,
        strategy: FairStrategy,
        team: str,
        need: Resources,
        refused: dict[str, list[Candidate]],
        mine: dict[int, Fraction],
        *,
        replayed: bool,
    ) -> Callable[[Candidate], bool]:
        """Whether a candidate may be taken under ``strategy``; one refused is kept in
        ``refused`` for the next strategy to judge.  A candidate read afresh was read
        while its quota borrowed; one ``replayed`` from an earlier strategy's refusals
        may since have lost that, to the victims taken after it was read."""

        def judge(candidate: Candidate) -> bool:
            if not ruled(candidate, team):
                return True
            quota = candidate[0].team_quota
            if replayed and not quota_borrows(self.fair.ledger, quota, need):
                return False  # back within its nominal: it lends now, so it is spared
            if self._allows(strategy, candidate, team, need, mine):
                return True
            refused[quota].append(candidate)
            return False

        return judge

    def _allows(
        self,
        strategy: FairStrategy,
        candidate: Candidate,
        team: str,
        need: Resources,
        known: dict[int, Fraction],
    ) -> bool:
        """Whether ``strategy`` lets the preemptor take this candidate of another quota now
        (``known``: the preemptor's shares already worked out, by node)."""
        holder = candidate[0]
        quota = holder.team_quota
        # In a tree, the shares compared are those of the nodes just below the lowest
        # cohort both quotas are in (Kueue's almost-LCAs).
        ours, theirs = self.fair.almost_lcas(team, quota)
        mine = known.get(id(ours))
        if mine is None:
            mine = known[id(ours)] = self.fair.node_share(ours, team, need)
        if mine >= INFINITE:
            return False
        if strategy is FairStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
            if not mine:
                return True  # no share is below 0: within its own, it takes back from anyone
            without = {resource: -amount for resource, amount in holder.need.items()}
            return mine <= self.fair.node_share(theirs, quota, without)
        initial = self.fair.node_share(theirs)
        # Not against a share of weight 0: it is infinite while the quota borrows at all,
        # so the rule would take its gangs down to far within its nominal, and those would
        # take the room back (ping-pong).  LessThanOrEqualToFinalShare still takes back
        # what it borrows.
        return initial < INFINITE and mine < initial

    def _by_share(
        self,
        streams: Mapping[str, Iterator[Candidate]],
        judge: Callable[[Candidate], bool],
    ) -> Iterator[Candidate]:
        """The candidates ``judge`` allows, the quota furthest above its share first, read
        as taken: after each one taken the shares are ranked again; after one refused,
        the same quota's next candidate is judged (Kueue's order).  Bounded as the
        search is: after ``LIMIT`` refusals nothing more is read."""
        refusals = 0
        # Each quota's next candidate, read only when asked: the search takes a victim out
        # before the next is read, so a lender's borrowing is judged as it now stands.
        heads: dict[str, Candidate | None] = {}

        def head(quota: str) -> Candidate | None:
            if quota not in heads:
                heads[quota] = next(streams[quota], None)
            return heads[quota]

        def rank(quota: str) -> tuple[tuple[Fraction, ...], tuple[int, float, int, str]]:
            # From the root down, the node with the highest share first (Kueue's
            # target ordering): the shares along the quota's path, root's child first.
            candidate = heads[quota]
            assert candidate is not None
            path = self.fair.path_below_root(quota)
            return (tuple(-self.fair.node_share(n) for n in path), candidate[0].order)

        live = list(streams)
        while live := [quota for quota in live if head(quota) is not None]:
            # One quota with candidates left (often): nothing to rank.
            quota = live[0] if len(live) == 1 else min(live, key=rank)
            while (candidate := heads.pop(quota, None)) is not None:
                if judge(candidate):
                    yield candidate
                    break
                refusals += 1
                if refusals >= LIMIT:
                    return
                heads[quota] = next(streams[quota], None)  # nothing changed: read on
