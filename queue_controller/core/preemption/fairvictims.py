"""Victims in a fair-sharing cohort: taken by share, and kept only under the share rule.

The search is :class:`VictimSearch`'s (greedy, then minimal), fed quota by quota:
at each step the next candidate comes from the quota with the highest share
now, the victims taken so far already gone (the preemptor's own quota by its
share too), each quota's candidates in their own order (lower priority,
newest, fewer GPUs).

The rule: a victim of another quota must leave its quota, without all the
victims taken from it, at or above the preemptor's share with the gang
(Kueue's ``LessThanOrEqualToFinalShare``, checked on the last victim of each
quota, the strictest).  It is checked on the minimal set rather than at each
greedy step, so that the greedy may overshoot to free one whole node and the
minimising pass still sheds what is not needed.  If the set breaks it, the
quotas that break it are left out and the search runs again: at most once per
quota in the cohort.  A preemptor of weight 0 that would borrow has an
infinite share and takes from nobody (two of them would take the same GPUs in
turns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction

from queue_controller.core.model.decisions import Reason
from queue_controller.core.model.resources import Resources
from queue_controller.core.preemption.victims import Holder, VictimSearch, ruled
from queue_controller.core.quota.fairshare import INFINITE, FairShares

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
            mine = self.fair.share(team, need)
            broken = {
                holder.team_quota
                for holder, reason in victims
                if ruled((holder, reason), team)
                and (mine >= INFINITE or self.fair.share(holder.team_quota) < mine)
            }
            if not broken:
                return victims
            for holder, _ in victims:
                self.search.put_back(holder)
            excluded |= broken

    def _by_share(
        self, streams: Mapping[str, _Stream], team: str, excluded: set[str]
    ) -> Iterator[Candidate]:
        """The candidates, the quota furthest above its share first, read as taken."""
        position = dict.fromkeys(streams, 0)

        def following(quota: str) -> Candidate | None:
            # The quota's next candidate; an excluded quota offers only the ones the
            # share rule does not judge (below borrowWithinCohort's threshold).
            while (candidate := streams[quota].at(position[quota])) is not None:
                if quota not in excluded or not ruled(candidate, team):
                    return candidate
                position[quota] += 1
            return None

        def rank(quota: str) -> tuple[Fraction, tuple[int, float, int, str]]:
            candidate = following(quota)
            assert candidate is not None
            return (-self.fair.share(quota), candidate[0].order)

        while True:
            live = [quota for quota in streams if following(quota) is not None]
            if not live:
                return
            quota = min(live, key=rank)
            candidate = following(quota)
            assert candidate is not None
            position[quota] += 1
            yield candidate
