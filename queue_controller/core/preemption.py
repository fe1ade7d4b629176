"""Which admitted gangs to evict so that a gang fits: on quota *and* on named nodes.

Kueue and Volcano choose victims by quota alone, so a preemption can free 8
GPUs scattered over several nodes while the 8-GPU pod it was for still fits
nowhere (Kueue #5243).  Here a victim set is accepted only when, with the
victims gone, the gang passes the quota check **and** the same node placement
the core uses for every admission.  It never evicts when the gang would still
not fit.

The search (Kueue's, made placement-aware):

1. *Candidates* are whole admitted gangs that the preemptor's TeamQuota policy
   allows (core/victims.py: ``withinTeamQuota``, ``reclaimWithinCohort``,
   ``borrowWithinCohort``, with Kueue's meanings), ordered by preference: gangs
   of quotas that borrow before gangs within nominal, lower priority first, the
   most recently created first (the least work lost), fewer GPUs first, then by
   key.  In a fair-sharing cohort they are taken from the quota with the
   highest share first, and the minimal set must keep each victim's quota at or
   above the preemptor's share (``PreemptingCycle._victims``).
2. *Greedy*: take candidates out one by one, in that order, until the gang fits.
   If it never does, nothing is evicted.
3. *Minimal*: put each taken candidate back, the last taken first; if the gang
   still fits without evicting it, it is spared.  No victim of the result can be
   spared alone (no proper subset missing one victim works).

Its cost is bounded: at most ``LIMIT`` candidates are considered, and each
greedy or minimising step is one quota check and one placement attempt on the
equivalence index (its moves are patches, not rebuilds), so a preemption costs
at most ``2 * LIMIT`` placements (in a fair-sharing cohort, that once more for
each quota whose share rule the found set breaks).  ``LIMIT`` is far above what
a real preemption evicts (Kueue evicts a handful of workloads per preemption).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from itertools import islice

from queue_controller.core.decisions import Decision, Reason, Verdict, decision_for
from queue_controller.core.explain import count_of
from queue_controller.core.fairshare import INFINITE, FairShares
from queue_controller.core.model import Queue
from queue_controller.core.prepared import Prepared, Usage
from queue_controller.core.quota import QuotaLedger
from queue_controller.core.resources import Resources
from queue_controller.core.shapes import Placement, Placer, SetShape
from queue_controller.core.victims import LIMIT, Holder, candidates, ruled


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
        for candidate in reversed(list(taken)):
            self.put_back(candidate[0])
            if fits():
                taken.remove(candidate)  # spared: the gang fits without evicting it
            else:
                self.take_out(candidate[0])
        return taken


class PreemptingCycle:
    """The preemption half of an admission cycle: core/cycle.py's ``_Cycle`` is one.

    It finds victims for a gang that does not fit, and gives a gang that holds
    nominated room (its victims still going) that room, charged every cycle until
    it is admitted there.
    """

    # The cycle's, set up by it.
    ledger: QuotaLedger
    placer: Placer
    queues: dict[tuple[str, str], Queue]
    shapes: dict[str, tuple[SetShape, ...]]
    held: dict[str, Usage]
    holders: dict[str, Holder]  # by key, in Holder.order; victims leave as they are chosen
    search: VictimSearch
    fair: FairShares

    def _place(self, prepared: Prepared, sets: tuple[SetShape, ...]) -> tuple[list[Placement], str]:
        raise NotImplementedError  # the cycle places, for admissions and for the search alike

    def _holders(self, admitted: Iterable[Prepared]) -> dict[str, Holder]:
        out = []
        for p in admitted:
            queue = self.queues.get((p.workload.namespace, p.workload.queue))
            if p.error or queue is None or queue.team_quota not in self.ledger:
                continue
            held = self.held.get(p.workload.key, {})
            out.append(Holder(p, queue.team_quota, p.need(), held))
        return {holder.key: holder for holder in sorted(out, key=lambda h: h.order)}

    def _fits(self, prepared: Prepared, team: str, need: Resources) -> bool:
        """Whether the gang would be admitted now (changing nothing)."""
        if self.ledger.shortfall(team, need) is not None:
            return False
        sets = self.shapes[prepared.workload.key]
        placed, _ = self._place(prepared, sets)
        for item, placement in zip(sets, placed, strict=False):
            self.placer.release(item.shape, placement)
        return bool(placed)

    def _try_preempt(
        self, prepared: Prepared, queue: Queue, sets: tuple[SetShape, ...], need: Resources
    ) -> Decision | None:
        """Evict the fewest, cheapest gangs that make this one fit, if its policy allows."""
        team = queue.team_quota
        policy = self.ledger.quota(team).preemption
        if not policy.enabled:
            return None
        chosen = candidates(
            preemptor=prepared,
            team_quota=team,
            need=need,
            policy=policy,
            holders=self.holders.values(),
            ledger=self.ledger,
            fair=self.fair.applies(team),
        )
        victims = self._victims(prepared, team, need, chosen)
        if victims is None:
            return None
        placed, _ = self._place(prepared, sets)  # fits, as the search found: committed
        self.ledger.reserve(team, need)
        for holder, _ in victims:
            # Out of every later scan; a dict skips the hole in C, so scans stay short.
            del self.holders[holder.key]
        reasons = [reason for _, reason in victims]
        reason = max(set(reasons), key=lambda r: (reasons.count(r), r.value))
        total: Counter[str] = Counter()
        for placement in placed:
            total.update(placement.nodes)
        names = ", ".join(h.prepared.workload.namespaced_name for h, _ in victims)
        workload = prepared.workload
        message = (
            f"preempting {count_of(len(victims), 'gang')} ({names}) for {reason.value}; "
            f"{count_of(workload.gang_size, 'member')} placed on {count_of(len(total), 'node')} "
            "once they are gone"
        )
        nominated = {
            s.pod_set.name: dict(sorted(p.nodes.items())) for s, p in zip(sets, placed, strict=True)
        }
        return Decision(
            workload.namespaced_name,
            workload.queue,
            Verdict.PREEMPT,
            reason,
            message,
            dict(sorted(total.items())),
            kind=workload.kind,
            victims=tuple((h.key, r) for h, r in victims),
            nominated=nominated,
        )

    def _victims(
        self,
        prepared: Prepared,
        team: str,
        need: Resources,
        chosen: Iterator[tuple[Holder, Reason]],
    ) -> list[tuple[Holder, Reason]] | None:
        """The search, and in a fair-sharing cohort the share rule on what it found.

        A victim of another quota must leave its quota, without all the victims
        taken from it, at or above the preemptor's share with the gang (Kueue's
        ``LessThanOrEqualToFinalShare``, checked on the last victim of each quota,
        the strictest).  The rule is checked on the minimal set rather than at
        each greedy step, so that the greedy may overshoot to find room on one
        node and the minimising pass still sheds what is not needed.  If the set
        breaks it, the quotas that break it are left out and the search runs
        again: at most once per quota in the cohort.
        """

        def fits() -> bool:
            return self._fits(prepared, team, need)

        if not self.fair.applies(team):
            return self.search.search(chosen, fits)
        bounded = list(islice(chosen, LIMIT))  # read again on each try
        excluded: set[str] = set()
        while True:
            order = self._fair_order(
                [c for c in bounded if c[0].team_quota not in excluded or not ruled(c, team)], team
            )
            victims = self.search.search(order, fits)
            if victims is None:
                return None
            mine = self.fair.share(team, need)
            # A quota of weight 0 that would borrow has an infinite share: it takes
            # what it borrows from nobody (two of them would take it in turns).
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

    def _fair_order(
        self, chosen: list[tuple[Holder, Reason]], team: str
    ) -> Iterator[tuple[Holder, Reason]]:
        """Victims in a fair-sharing cohort: the quota furthest above its share first.

        Each quota's candidates keep their order (lower priority, newest, fewer
        GPUs); at each step the next comes from the quota with the highest share
        now, the victims taken so far already gone (the preemptor's own quota,
        whose share is not what is at stake, by its share too).
        """
        groups: dict[str, deque[tuple[Holder, Reason]]] = {}
        for candidate in chosen:
            groups.setdefault(candidate[0].team_quota, deque()).append(candidate)

        def rank(quota: str) -> tuple[Fraction, tuple[int, float, int, str]]:
            return (-self.fair.share(quota), groups[quota][0][0].order)

        while groups:
            quota = min(groups, key=rank)
            yield groups[quota].popleft()
            if not groups[quota]:
                del groups[quota]

    def _charge(self, prepared: Prepared, sign: int) -> None:
        """Take (+1) or give back (-1) the room a pending gang holds for itself."""
        workload = prepared.workload
        queue = self.queues[(workload.namespace, workload.queue)]
        need = prepared.need()
        self.ledger.reserve(queue.team_quota, {r: sign * a for r, a in need.items()})
        for item in self.shapes[workload.key]:
            nodes = workload.nominated.get(item.pod_set.name, {})
            if nodes:
                take = self.placer.commit if sign > 0 else self.placer.release
                take(item.shape, Placement(dict(nodes)))

    def _admit_nominated(self, prepared: Prepared, queue: Queue) -> Decision:
        """A gang holding room its victims are giving back: admitted there once it is free."""
        workload = prepared.workload
        self._charge(prepared, -1)
        need = prepared.need()
        sets = self.shapes[workload.key]
        placements = [
            self.placer.place_on(item.shape, workload.nominated.get(item.pod_set.name, {}))
            for item in sets
        ]
        whole = all(
            p is not None and sum(p.nodes.values()) == item.pod_set.min_count
            for p, item in zip(placements, sets, strict=True)
        )
        if not whole or self.ledger.shortfall(queue.team_quota, need) is not None:
            self._charge(prepared, +1)
            nodes = sorted({n for plan in workload.nominated.values() for n in plan})
            return decision_for(
                workload,
                Verdict.PENDING,
                Reason.PREEMPTING,
                "holding room on " + ", ".join(nodes) + " while the gangs it preempted give "
                "it back",
            )
        for item, placement in zip(sets, placements, strict=True):
            assert placement is not None
            self.placer.commit(item.shape, placement)
        self.ledger.reserve(queue.team_quota, need)
        total: Counter[str] = Counter()
        for placement in placements:
            assert placement is not None
            total.update(placement.nodes)
        by_set = (
            {
                item.pod_set.name: dict(p.nodes)
                for item, p in zip(sets, placements, strict=True)
                if p
            }
            if len(sets) > 1
            else {}
        )
        message = (
            f"{count_of(workload.gang_size, 'member')} placed on {count_of(len(total), 'node')} "
            f"its preemption freed; charged to TeamQuota {queue.team_quota}"
        )
        return decision_for(
            workload, Verdict.ADMIT, Reason.ADMITTED, message, dict(sorted(total.items())), by_set
        )
