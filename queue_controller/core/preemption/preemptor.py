"""Which admitted gangs to evict so that a gang fits: on quota *and* on named nodes.

Kueue and Volcano choose victims by quota alone, so a preemption can free 8
GPUs scattered over several nodes while the 8-GPU pod it was for still fits
nowhere (Kueue #5243).  Here a victim set is accepted only when, with the
victims gone, the gang passes the quota check **and** the same node placement
the core uses for every admission.  It never evicts when the gang would still
not fit.

The search (Kueue's, made placement-aware):

1. *Candidates* are whole admitted gangs that the preemptor's TeamQuota policy
   allows (core/preemption/victims.py: ``withinTeamQuota``, ``reclaimWithinCohort``,
   ``borrowWithinCohort``, with Kueue's meanings), ordered by preference: gangs
   of quotas that borrow before gangs within nominal, lower priority first, the
   most recently created first (the least work lost), fewer GPUs first, then by
   key.  In a fair-sharing cohort they are taken from the quota with the
   highest share first, each only as the cohort's preemption strategies allow
   when it is reached (``Preemptor._victims``, core/preemption/fairvictims.py).
2. *Greedy*: take candidates out one by one, in that order, until the gang fits.
   If it never does, nothing is evicted.
3. *Minimal*: put each taken candidate back, the last taken first; if the gang
   still fits without evicting it, it is spared.  No victim of the result can be
   spared alone (no proper subset missing one victim works).  The last one taken
   is not tried: without it the greedy had not fitted yet.
4. *Only borrowed gangs*: each other quota must still borrow with its largest
   victim back (its victims could be taken one by one while it borrowed); if not,
   the search runs again with borrowing judged as victims are taken out, Kueue's
   way (``Preemptor._lenders_checked``).
5. *Without borrowing*: if nothing is found and the policy reclaims, Kueue's
   attempt in which the gang must end within its own nominal, with other quotas'
   borrowing gangs and its own lower-priority ones as candidates
   (``Preemptor._reclaiming``).

Its cost is bounded: at most ``LIMIT`` candidates are considered, and each
greedy or minimising step is one quota check and one placement attempt on the
equivalence index (its moves are patches, not rebuilds), so a preemption costs
at most ``2 * LIMIT`` placements per search (steps 4 and 5 add at most three
searches; in a fair-sharing cohort the share rule refuses at most ``LIMIT``
more).  ``LIMIT`` is far above what
a real preemption evicts (Kueue evicts a handful of workloads per preemption).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property

from queue_controller.core.model.decisions import Decision, Reason, Verdict, decision_for
from queue_controller.core.model.objects import Preemption, Queue, ReclaimPolicy, WithinPolicy
from queue_controller.core.model.resources import Resources
from queue_controller.core.placement.explain import count_of
from queue_controller.core.placement.shapes import Placement, Placer, SetShape
from queue_controller.core.placement.topology.slices import with_topology
from queue_controller.core.preemption.fairvictims import ShareRuledSearch
from queue_controller.core.preemption.victims import (
    Chooser,
    Holder,
    VictimSearch,
    candidates,
    lenders_still_borrowed,
    reclaim_candidates,
)
from queue_controller.core.quota.fairshare import FairShares
from queue_controller.core.quota.ledger import QuotaLedger
from queue_controller.core.rules.prepared import Prepared, Usage

# How the cycle places a gang's pod sets, as one transaction: (placements, "") or
# ([], why not).  The preemptor's search tries the same placement every admission does.
PlaceSets = Callable[[Prepared, tuple[SetShape, ...]], tuple[list[Placement], str]]


class Preemptor:
    """The preemption half of an admission cycle, built from what it reads.

    It finds victims for a gang that does not fit, and gives a gang that holds
    nominated room (its victims still going) that room, charged every cycle until
    it is admitted there.  It shares the cycle's ledger and placer (what it
    reserves and commits, every later gang of the cycle sees) and places with the
    cycle's own ``place``.
    """

    def __init__(
        self,
        *,
        ledger: QuotaLedger,
        placer: Placer,
        fair: FairShares,
        queues: Mapping[tuple[str, str], Queue],
        shapes: Mapping[str, tuple[SetShape, ...]],
        held: Mapping[str, Usage],
        admitted: Iterable[Prepared],
        place: PlaceSets,
    ) -> None:
        self.ledger, self.placer, self.fair = ledger, placer, fair
        self.queues, self.shapes, self._place = queues, shapes, place
        self._admitted, self._held = list(admitted), held
        self.search = VictimSearch(ledger, placer)
        self._fitted: list[Placement] = []

    @cached_property
    def _victims_index(
        self,
    ) -> tuple[dict[str, Holder], dict[str, str], dict[str, dict[str, Holder]]]:
        """The admitted gangs as candidate victims, worked out the first time a gang may
        preempt: a cycle in which no quota preempts (or no gang is refused) never
        pays for it.  Nothing it reads changes during the cycle before then."""
        out = []
        for p in self._admitted:
            queue = self.queues.get((p.workload.namespace, p.workload.queue))
            if p.error or queue is None or queue.team_quota not in self.ledger:
                continue
            out.append(Holder(p, queue.team_quota, p.need(), self._held.get(p.workload.key, {})))
        holders = {holder.key: holder for holder in sorted(out, key=lambda h: h.order)}
        quota_of = {key: holder.team_quota for key, holder in holders.items()}
        by_quota: dict[str, dict[str, Holder]] = defaultdict(dict)
        for key, holder in holders.items():
            by_quota[holder.team_quota][key] = holder
        return holders, quota_of, by_quota

    @property
    def holders(self) -> dict[str, Holder]:
        """What each admitted gang would give back, by key, in Holder.order; victims
        leave as they are chosen."""
        return self._victims_index[0]

    @property
    def holder_quota(self) -> dict[str, str]:
        """Each admitted gang's TeamQuota, victims included (fair sharing's turns read it)."""
        return self._victims_index[1]

    @property
    def by_quota(self) -> dict[str, dict[str, Holder]]:
        """The same as :attr:`holders`, quota by quota."""
        return self._victims_index[2]

    def _fits(self, prepared: Prepared, team: str, need: Resources) -> bool:
        """Whether the gang would be admitted now (changing nothing).

        The placement of the last that fitted is kept: a search ends in the state of
        its last fitting step (the greedy stops on one; the minimal pass keeps a victim
        back only when the gang then fits, and takes it out again otherwise), so that
        placement is the one to commit, without placing again."""
        if self.ledger.shortfall(team, need) is not None:
            return False
        sets = self.shapes[prepared.workload.key]
        placed, _ = self._place(prepared, sets)
        for item, placement in zip(sets, placed, strict=False):
            self.placer.release(item.shape, placement)
        if placed:
            self._fitted = placed
        return bool(placed)

    def try_preempt(
        self, prepared: Prepared, queue: Queue, sets: tuple[SetShape, ...], need: Resources
    ) -> Decision | None:
        """Evict the fewest, cheapest gangs that make this one fit, if its policy allows."""
        team = queue.team_quota
        policy = self.ledger.quota(team).preemption
        if not policy.enabled:
            return None
        fair = self.fair.applies(team)

        def chosen(live: bool) -> Chooser:
            return candidates(
                preemptor=prepared,
                team_quota=team,
                need=need,
                policy=policy,
                ledger=self.ledger,
                fair=fair,
                live=live,
            )

        victims = self._victims(prepared, team, need, chosen)
        if victims is None and not fair and self.ledger.quota(team).cohort:
            victims = self._reclaiming(prepared, team, need, policy)
        if victims is None:
            return None
        placed = self._fitted  # where the search's last fitting step placed it
        for item, placement in zip(sets, placed, strict=True):
            self.placer.commit(item.shape, placement)
        self.ledger.reserve(team, need)
        for holder, _ in victims:
            # Out of every later scan; a dict skips the hole in C, so scans stay short.
            del self.holders[holder.key]
            del self.by_quota[holder.team_quota][holder.key]
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
        chosen: Callable[[bool], Chooser],
    ) -> list[tuple[Holder, Reason]] | None:
        """The search over the candidates ``chosen`` gives (live or once-judged
        borrowing, :class:`~.victims._Borrowing`); in a fair-sharing cohort, quota by
        quota under the share rule (core/preemption/fairvictims.py)."""

        def fits() -> bool:
            return self._fits(prepared, team, need)

        if not self.fair.applies(team):
            return self._lenders_checked(chosen, team, need, fits)
        # One chooser for every quota: it judges each quota's borrowing as it goes.
        choose = chosen(True)
        streams = {
            quota: choose(self.by_quota[quota].values())
            for quota in self.ledger.tree_members(team)
            if self.by_quota.get(quota)
        }
        return ShareRuledSearch(self.search, self.fair).run(streams, team, need, fits)

    def _lenders_checked(
        self,
        chosen: Callable[[bool], Chooser],
        team: str,
        need: Resources,
        fits: Callable[[], bool],
    ) -> list[tuple[Holder, Reason]] | None:
        """The search with borrowing judged once (it finds the placements a greedy
        order misses), kept only if every lender still borrowed as each of its victims
        was taken; otherwise the search again with borrowing judged as it goes, which
        never takes a gang that runs within its quota's nominal (Kueue's answer)."""
        found = self.search.search(chosen(False)(self.holders.values()), fits)
        if found is None or lenders_still_borrowed(found, team, self.ledger, need):
            return found
        for holder, _ in reversed(found):
            self.search.put_back(holder)
        return self.search.search(chosen(True)(self.holders.values()), fits)

    def _reclaiming(
        self, prepared: Prepared, team: str, need: Resources, policy: Preemption
    ) -> list[tuple[Holder, Reason]] | None:
        """Kueue's attempt without borrowing: the gang fits within its own nominal once
        its own lower-priority gangs and what other quotas borrow are taken back.

        The first search judges "within nominal" before anything is taken out, so a
        gang over its nominal by its own lower-priority gangs could never reclaim from
        the quotas that borrow; here it may, as long as it ends within its nominal.
        """
        if policy.reclaim_within_cohort is ReclaimPolicy.NEVER:
            return None
        if policy.within_team_quota is WithinPolicy.NEVER or not self.by_quota.get(team):
            # Without its own gangs to give up, the gang's use of its quota cannot fall:
            # within its nominal, the first search already tried every reclaim (with a
            # looser fit); over it, it stays over.  Nothing to try, so nothing is spent.
            return None

        def chosen(live: bool) -> Chooser:
            return reclaim_candidates(
                preemptor=prepared,
                team_quota=team,
                need=need,
                policy=policy,
                ledger=self.ledger,
                live=live,
            )

        def fits() -> bool:
            return self.ledger.within_nominal(team, need) and self._fits(prepared, team, need)

        return self._lenders_checked(chosen, team, need, fits)

    def charge(self, prepared: Prepared, sign: int) -> None:
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

    def admit_nominated(self, prepared: Prepared, queue: Queue) -> Decision:
        """A gang holding room its victims are giving back: admitted there once it is free."""
        workload = prepared.workload
        self.charge(prepared, -1)
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
            self.charge(prepared, +1)
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
        decision = decision_for(
            workload, Verdict.ADMIT, Reason.ADMITTED, message, dict(sorted(total.items())), by_set
        )
        return with_topology(decision, sets, [p for p in placements if p is not None])
