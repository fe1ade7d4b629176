"""Victims in a fair-sharing cohort: taken by share, and kept only under the share rule.

The search is :class:`VictimSearch`'s (greedy, then minimal), fed quota by quota:
at each step the next candidate comes from the quota with the highest share
now, the victims taken so far already gone (the preemptor's own quota by its
share too), each quota's candidates in their own order (lower priority,
newest, fewer GPUs).

In a cohort tree, "the quota" in what follows is the node just below the lowest
cohort that holds both the victim's quota and the preemptor's (Kueue's
almost-LCA), and candidates come from the node with the highest share at each
level, from the root down.

The rule: the cohort's preemption strategies, any of them (Kueue tries them in
order, and a victim passes by the first that allows it): a victim of another
quota must leave its quota, without all the victims taken from it, at or above
the preemptor's share with the gang (``LessThanOrEqualToFinalShare``), or the
preemptor's share with the gang must be below the quota's share with its last
victim back (``LessThanInitialShare``).  It is checked on the minimal set rather than at each
greedy step, so that the greedy may overshoot to free one whole node and the
minimising pass still sheds what is not needed.  If the set breaks it, the
quotas that break it are left out and the search runs again: at most once per
quota in the cohort.  A preemptor of weight 0 that would borrow has an
infinite share and takes from nobody (two of them would take the same GPUs in
turns); ``LessThanInitialShare`` is not applied against a victim's quota of
weight 0 either, whose share is infinite however little it borrows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction

from queue_controller.core.model.decisions import Reason
from queue_controller.core.model.objects import FairStrategy
from queue_controller.core.model.resources import Resources
from queue_controller.core.preemption.victims import Holder, VictimSearch, ruled
from queue_controller.core.quota.fairshare import INFINITE, FairShares
from queue_controller.core.quota.tree import Node

Candidate = tuple[Holder, Reason]


class _Stream:
    """One quota's candidates, read lazily and kept, so a second try reads them again."""

    def __init__(self, source: Iterator[Candidate]) -> None:
        self._source: Iterator[Candidate] | None = source
        self._read: list[Candidate] = []

    def at(self, index: int) -> Candidate | None:
        while len(self._read) <= index and self._source is not None:
            following = next(self._source, None)
            if following is None:
                self._source = None
            else:
                self._read.append(following)
        return self._read[index] if index < len(self._read) else None


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
        """The victims, minimal and under the share rule; None if there are none."""
        kept = {quota: _Stream(source) for quota, source in streams.items()}
        excluded: set[str] = set()
        while True:
            victims = self.search.search(self._by_share(kept, team, excluded), fits)
            if victims is None:
                return None
            broken = self._broken(victims, team, need)
            if not broken:
                return victims
            for holder, _ in victims:
                self.search.put_back(holder)
            excluded |= broken

    def _broken(self, victims: list[Candidate], team: str, need: Resources) -> set[str]:
        """The quotas whose victims no strategy of the cohort allows (the victims out
        of the ledger): ``LessThanOrEqualToFinalShare`` judges the quota without all
        of them; ``LessThanInitialShare`` with the last taken back, the largest (the
        victims may be taken in any order, and that one is the most lenient)."""
        strategies = self.fair.strategies(team)
        by_quota: dict[str, list[Holder]] = {}
        for holder, reason in victims:
            if ruled((holder, reason), team):
                by_quota.setdefault(holder.team_quota, []).append(holder)
        broken = set()
        for quota, holders in by_quota.items():
            # In a tree, the shares compared are those of the nodes just below the
            # lowest cohort both quotas are in (Kueue's almost-LCAs).
            ours, theirs = self.fair.almost_lcas(team, quota)
            mine = self.fair.node_share(ours, team, need)
            if mine >= INFINITE or not any(
                self._allows(strategy, mine, theirs, quota, holders) for strategy in strategies
            ):
                broken.add(quota)
        return broken

    def _allows(
        self,
        strategy: FairStrategy,
        mine: Fraction,
        theirs: Node,
        quota: str,
        holders: list[Holder],
    ) -> bool:
        if strategy is FairStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
            return mine <= self.fair.node_share(theirs)
        largest = max(holders, key=lambda h: self.fair.node_share(theirs, quota, h.need))
        initial = self.fair.node_share(theirs, quota, largest.need)
        # Not against a share of weight 0: it is infinite while the quota borrows at all,
        # so the rule would take its gangs down to far within its nominal, and those would
        # take the room back (ping-pong).  LessThanOrEqualToFinalShare still takes back
        # what it borrows.
        return initial < INFINITE and mine < initial

    def _by_share(
        self, streams: Mapping[str, _Stream], team: str, excluded: set[str]
    ) -> Iterator[Candidate]:
        """The candidates, the quota furthest above its share first, read as taken."""
        position = dict.fromkeys(streams, 0)

        def following(quota: str) -> Candidate | None:
            # The quota's next candidate; an excluded quota offers only those the
            # share rule does not judge (so none: it judges every other quota's).
            while (candidate := streams[quota].at(position[quota])) is not None:
                if quota not in excluded or not ruled(candidate, team):
                    return candidate
                position[quota] += 1
            return None

        def rank(quota: str) -> tuple[tuple[Fraction, ...], tuple[int, float, int, str]]:
            # From the root down, the node with the highest share first (Kueue's
            # target ordering): the shares along the quota's path, root's child first.
            candidate = following(quota)
            assert candidate is not None
            path = list(self.fair.ledger.leaf(quota).path())[:-1]
            return (tuple(-self.fair.node_share(n) for n in reversed(path)), candidate[0].order)

        while True:
            live = [quota for quota in streams if following(quota) is not None]
            if not live:
                return
            # One quota with candidates left (often): nothing to rank.
            quota = live[0] if len(live) == 1 else min(live, key=rank)
            candidate = following(quota)
            assert candidate is not None
            position[quota] += 1
            yield candidate
