"""One admission cycle: a pure, deterministic function from a snapshot to decisions.

The cycle follows Kueue's shape (snapshot, order, nominate, admit) with
Volcano's transaction: each gang is tried against the quota ledger and the
placer without changing either; only a gang that passes both is committed,
so gangs admitted earlier in the cycle are seen by every later one.
"""

from __future__ import annotations

import gc
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from queue_controller.core.cycle.devicecatalog import DeviceCatalog
from queue_controller.core.cycle.devicecycle import settle_usage, with_devices
from queue_controller.core.cycle.gangshapes import gang_shapes
from queue_controller.core.cycle.pacing import CreationPacer
from queue_controller.core.cycle.replacement import lost_plans, replace_lost
from queue_controller.core.model.decisions import (
    Decision,
    Reason,
    Replacement,
    Verdict,
    decision_for,
)
from queue_controller.core.model.objects import (
    Node,
    Ordering,
    Queue,
    Snapshot,
    Workload,
    WorkloadPhase,
)
from queue_controller.core.model.resources import Resources
from queue_controller.core.placement.explain import count_of
from queue_controller.core.placement.fit import EquivalenceIndex
from queue_controller.core.placement.gangsets import SetsRefused, group_of, place_sets
from queue_controller.core.placement.shapes import GangShape, Placement, Placer, SetShape
from queue_controller.core.placement.topology.slices import with_topology
from queue_controller.core.preemption.preemptor import Preemptor
from queue_controller.core.quota.admissionfair import FairQueues, QueueKey, QueueUsage
from queue_controller.core.quota.fairshare import (
    CohortFigures,
    FairShares,
    FairTurns,
    cohort_figures,
)
from queue_controller.core.quota.ledger import QuotaLedger
from queue_controller.core.reservation.book import ReservationBook
from queue_controller.core.rules.durations import duration_text
from queue_controller.core.rules.gpuhealth import unhealthy_note
from queue_controller.core.rules.nodes import may_select
from queue_controller.core.rules.ordering import PriorityTable, order_key
from queue_controller.core.rules.prepared import Prepared, node_usage, prepare

PlacerFactory = Callable[[Sequence[Node], Mapping[str, Resources], Iterable[GangShape]], Placer]


@dataclass(frozen=True, slots=True)
class CycleResult:
    decisions: tuple[Decision, ...]
    # TeamQuota -> resource -> usage after this cycle's admissions.
    quota_usage: Mapping[str, Mapping[str, int]]
    # TeamQuota in a fair-sharing cohort -> its weighted share after this cycle,
    # as Kueue's status.fairSharing.weightedShare (x1000).
    weighted_shares: Mapping[str, int] = field(default_factory=dict)
    # Pods of the gangs admitted before this cycle that their controllers have not made
    # yet (what pacing counts, whether it is on or not).
    awaiting_creation: int = 0
    # Cohort (of a Cohort object) -> its subtree's quota, use and weighted share.
    cohorts: Mapping[str, CohortFigures] = field(default_factory=dict)
    # Queue of a TeamQuota with admission fair sharing -> its decayed usage after
    # this cycle, sampled anew where its interval is up (core/quota/admissionfair.py).
    queue_usage: Mapping[QueueKey, QueueUsage] = field(default_factory=dict)
    # Lost nodes of admitted gangs' plans and the nodes that take their members
    # (core/cycle/replacement.py), decided before any pending gang.
    replacements: tuple[Replacement, ...] = ()
    # Admitted gangs with a lost node that chose Replace but got none: gang key -> why.
    unreplaced: Mapping[str, str] = field(default_factory=dict)


class _Cycle:
    def __init__(
        self, snapshot: Snapshot, placer_factory: PlacerFactory, creation_backlog: int | None
    ) -> None:
        self.snapshot = snapshot
        priorities = PriorityTable(snapshot.priority_classes)
        self.queues = {(q.namespace, q.name): q for q in snapshot.queues}
        # What the adapter could not read: a gang waits naming its Queue or TeamQuota.
        self.left_out = {(o.kind, o.namespace, o.name): o.why for o in snapshot.left_out}
        prepared = [
            prepare(w, priorities)
            for w in snapshot.workloads
            if w.phase is not WorkloadPhase.FINISHED
        ]
        # DRA: claims read, devices signed, requests completed; None without DRA.
        devices = DeviceCatalog(snapshot) if DeviceCatalog.wanted(snapshot) else None
        if devices is not None:
            prepared = with_devices(devices, prepared)
        admitted = [p for p in prepared if p.workload.phase is WorkloadPhase.ADMITTED]
        self.pacer = CreationPacer.of(creation_backlog, (p.workload for p in admitted))
        # (TeamQuota, need) of each gang pacing holds: charged for the cycle, then forgotten.
        self.assumed: list[tuple[str, Mapping[str, int]]] = []
        self.ledger = QuotaLedger(snapshot.quotas, self._quota_usage(admitted), snapshot.cohorts)
        self.pending = sorted(
            (p for p in prepared if p.workload.phase is WorkloadPhase.PENDING),
            key=lambda p: order_key(p.workload, p.priority),
        )
        # Each pending gang's pod-set shapes, and (workload key -> refusal) the gangs
        # whose topology request cannot be met as written.
        self.shapes, self.refused = gang_shapes(
            self.pending, self.queues, snapshot.topologies, devices
        )
        used, self.held = node_usage(snapshot.pods, admitted)
        nodes: Sequence[Node] = snapshot.nodes
        if devices is not None:
            settle_usage(devices, used, self.held, snapshot.pods)
            nodes = devices.with_devices(nodes)
        # Admitted gangs with a lost node to replace (rare: nothing is built without one).
        by_name = {node.name: node for node in nodes}
        lost = lost_plans(
            admitted,
            queues=self.queues,
            quotas={q.name: q for q in snapshot.quotas},
            nodes=by_name,
            pods=snapshot.pods,
        )
        lost_shapes = (
            gang_shapes([p.prepared for p in lost], self.queues, snapshot.topologies, devices)[0]
            if lost
            else {}
        )
        self.placer = placer_factory(
            nodes,
            used,
            (
                s.shape
                for shapes in (self.shapes, lost_shapes)
                for sets in shapes.values()
                for s in sets
            ),
        )
        # Replacements first, as Kueue gives them priority: the gang already runs.
        self.replacements, self.unreplaced = replace_lost(
            lost, shapes=lost_shapes, placer=self.placer, nodes=by_name, used=used, held=self.held
        )
        # Nodes with some GPUs out, named when a gang does not fit (rarely any).
        self.sick_nodes = [n for n in snapshot.nodes if n.gpu_health is not None]
        self.fair = FairShares(self.ledger, snapshot.cohorts)
        # Admission fair sharing: a TeamQuota's Queues take its turns by decayed usage.
        self.fair_queues = FairQueues(
            quotas=snapshot.quotas, queues=self.queues, admitted=admitted, now=snapshot.now
        )
        # Preemption: what each admitted gang would give back, and the search over them.
        self.preemptor = Preemptor(
            ledger=self.ledger,
            placer=self.placer,
            fair=self.fair,
            queues=self.queues,
            shapes=self.shapes,
            held=self.held,
            admitted=admitted,
            place=self._place,
        )
        # Pending gangs holding nominated room (their victims are still going): the
        # room is charged now, so that no gang before them takes it.
        self.holding: set[str] = set()
        # Only a gang that preempted names such room: no other is looked up here.
        nominating = [p for p in self.pending if p.workload.nominated]
        known = {node.name for node in snapshot.nodes} if nominating else set()
        for p in nominating:
            nominated = p.workload.nominated
            queue = self.queues.get((p.workload.namespace, p.workload.queue))
            if p.error or p.workload.key not in self.shapes:
                continue
            if queue is None or queue.team_quota not in self.ledger:
                continue
            if any(node not in known for nodes in nominated.values() for node in nodes):
                continue  # a node of its room is gone: it is tried afresh
            if any(
                sum(nominated.get(item.pod_set.name, {}).values()) != item.pod_set.min_count
                for item in self.shapes[p.workload.key]
            ):
                continue  # the gang changed since it took the room: it is tried afresh
            self.preemptor.charge(p, +1)
            self.holding.add(p.workload.key)
        # Reservation with backfill: only built where some Queue turned it on.
        self.book = (
            ReservationBook(
                pending=self.pending,
                admitted=admitted,
                queues=self.queues,
                shapes=self.shapes,
                placer=self.placer,
                nodes=nodes,
                used=used,
                held=self.held,
                now=snapshot.now,
                limit=snapshot.reservation_limit,
                placer_factory=placer_factory,
            )
            if ReservationBook.wanted(snapshot.queues)
            else None
        )
        # StrictFIFO queue -> the head that holds it up.
        self.blocked_by: dict[tuple[str, str], str] = {}
        # A gang identical to one that already failed in this cycle, with nothing
        # admitted since, fails the same way: quota and nodes only fill up during a
        # cycle.  Saturated clusters queue many identical gangs; this spares them
        # the quota check, the placement attempt and the explanation.
        self.admissions = 0
        self.failed: dict[tuple[object, ...], tuple[int, Decision]] = {}

    def _quota_usage(self, admitted: Iterable[Prepared]) -> dict[str, dict[str, int]]:
        usage: dict[str, Counter[str]] = defaultdict(Counter)
        for p in admitted:
            queue = self.queues.get((p.workload.namespace, p.workload.queue))
            if queue is None or p.error:
                continue  # nothing to charge it to; its pods still count on nodes
            usage[queue.team_quota].update(p.need())
        return {name: dict(amounts) for name, amounts in usage.items()}

    def run(self) -> CycleResult:
        """Two passes: gangs within their quota's nominal first, then the borrowers.

        As Kueue's scheduler orders its heads, a gang that fits within what is left
        of its own TeamQuota's nominal is tried before any gang that would borrow,
        so an older borrower cannot take a team's idle nominal from under the
        team's own gang.  Whether a gang borrows is judged when its turn comes in
        the first pass, on the quota as the cycle has used it so far.  A StrictFIFO
        queue keeps its order: once one of its gangs is put off to the second pass,
        every later gang of that queue goes with it.
        """
        awaiting_creation = self.pacer.backlog  # before this cycle's admissions add to it
        decisions: list[Decision] = []
        borrowers: list[Prepared] = []
        put_off: set[tuple[str, str]] = set()
        for prepared in self.fair_queues.turns(self.pending):
            queue_key = (prepared.workload.namespace, prepared.workload.queue)
            if queue_key in put_off or self._borrows(prepared):
                borrowers.append(prepared)
                queue = self.queues.get(queue_key)
                if queue is not None and queue.ordering is Ordering.STRICT_FIFO:
                    put_off.add(queue_key)
                continue
            decision = self._decide(prepared)
            self.fair_queues.decided(prepared, decision)
            decisions.append(decision)
        for prepared, decision in self._borrowing_turns(borrowers):
            self.fair_queues.decided(prepared, decision)
            decisions.append(decision)
        for quota_name, need in self.assumed:
            self.ledger.reserve(quota_name, {r: -amount for r, amount in need.items()})
        usage = {quota.name: dict(self.ledger.used(quota.name)) for quota in self.snapshot.quotas}
        shares = {
            quota.name: self.fair.weighted_share(quota.name)
            for quota in self.snapshot.quotas
            if self.fair.applies(quota.name)
        }
        cohorts = cohort_figures(self.fair, (c.name for c in self.snapshot.cohorts))
        return CycleResult(
            tuple(decisions),
            usage,
            shares,
            awaiting_creation,
            cohorts=cohorts,
            queue_usage=self.fair_queues.result(),
            replacements=self.replacements,
            unreplaced=self.unreplaced,
        )

    def _borrowing_turns(self, borrowers: list[Prepared]) -> Iterator[tuple[Prepared, Decision]]:
        """The second pass: in order, except within a fair-sharing cohort.

        A cohort's gangs keep the turns their priority and age give them among
        everyone's, but each of its turns goes to the gang whose quota's share
        is lowest (:class:`FairTurns`), so fair sharing reorders a cohort and
        never the cluster.
        """
        turns: dict[str, FairTurns] = {}
        cohort_of: dict[str, str] = {}
        fair: dict[str, list[tuple[str, Prepared]]] = defaultdict(list)
        for p in borrowers:
            queue = self.queues.get((p.workload.namespace, p.workload.queue))
            if queue is not None and self.fair.applies(queue.team_quota):
                cohort_of[p.workload.key] = cohort = self.ledger.leaf(queue.team_quota).root().name
                fair[cohort].append((queue.team_quota, p))
        for cohort, gangs in fair.items():
            turns[cohort] = FairTurns(self.fair, gangs)
        for p in borrowers:
            fair_cohort = cohort_of.get(p.workload.key)
            if fair_cohort is None:
                yield p, self._decide(p)
                continue
            quota, chosen = turns[fair_cohort].next()
            decision = self._decide(chosen)
            victims = (self.preemptor.holder_quota[key] for key, _ in decision.victims)
            turns[fair_cohort].decided((quota, *victims))
            yield chosen, decision

    def _borrows(self, prepared: Prepared) -> bool:
        """Whether admitting the gang now would borrow from its cohort.

        Only a gang that could be admitted is judged: an invalid one, or one whose
        queue or quota is missing, keeps its place to be reported.  Without a
        cohort nothing can be borrowed: such a gang fits its quota or it does not.
        """
        workload = prepared.workload
        queue = self.queues.get((workload.namespace, workload.queue))
        if prepared.error or queue is None or queue.team_quota not in self.ledger:
            return False
        if not self.ledger.quota(queue.team_quota).cohort:
            return False
        return not self.ledger.within_nominal(queue.team_quota, prepared.need())

    def _decide(self, prepared: Prepared) -> Decision:
        workload = prepared.workload

        def pending(reason: Reason, message: str) -> Decision:
            return decision_for(workload, Verdict.PENDING, reason, message)

        if prepared.error:
            return decision_for(workload, Verdict.INVALID, Reason.INVALID_SPEC, prepared.error)
        queue = self.queues.get((workload.namespace, workload.queue))
        if queue is None:
            why = self.left_out.get(("Queue", workload.namespace, workload.queue))
            if why is not None:
                return pending(
                    Reason.QUEUE_INVALID,
                    f"Queue {workload.namespace}/{workload.queue} was left out: {why}",
                )
            return pending(
                Reason.QUEUE_NOT_FOUND,
                f"Queue {workload.namespace}/{workload.queue} does not exist",
            )
        if queue.team_quota not in self.ledger:
            why = self.left_out.get(("TeamQuota", "", queue.team_quota))
            if why is not None:
                return pending(
                    Reason.TEAM_QUOTA_INVALID,
                    f"TeamQuota {queue.team_quota} was left out: {why}",
                )
            return pending(
                Reason.TEAM_QUOTA_NOT_FOUND,
                f"Queue {workload.namespace}/{queue.name} draws from TeamQuota "
                f"{queue.team_quota!r}, which does not exist",
            )
        if workload.deactivated:
            return pending(
                Reason.DEACTIVATED,
                f"evicted and requeued {workload.requeue_count} times, past the queue's "
                "backoffLimit; it is not retried until its PodGroup is reset",
            )
        if workload.requeue_at is not None and workload.requeue_at > self.snapshot.now:
            due = datetime.fromtimestamp(workload.requeue_at, tz=UTC).isoformat()
            wait = duration_text(workload.requeue_at - self.snapshot.now)
            return pending(
                Reason.BACKOFF,
                f"requeued {workload.requeue_count} times after eviction; "
                f"eligible again at {due} (in {wait})",
            )
        # Topology refusals and preemptors' room are rare: without any, no key is built.
        refusal = self.refused.get(workload.key) if self.refused else None
        if refusal is not None and refusal.missing_topology:
            return pending(Reason.TOPOLOGY_NOT_FOUND, refusal.message)
        if refusal is not None:
            return decision_for(workload, Verdict.INVALID, Reason.INVALID_SPEC, refusal.message)
        if workload.absent_members > 0:
            # Not a head: a gang that cannot be tried holds up no StrictFIFO queue.
            return pending(Reason.WAITING_FOR_MEMBERS, self._waiting(workload, queue))
        queue_key = (queue.namespace, queue.name)
        head = self.blocked_by.get(queue_key)
        if head is not None:
            return pending(
                Reason.WAITING_FOR_HEAD,
                f"StrictFIFO queue {queue.namespace}/{queue.name} is held by its head {head}",
            )
        book = self.book
        if book is not None and book.holds(workload.key):
            book.give_back(workload.key)  # its own reserved nodes, for its own attempt
        if self.holding and workload.key in self.holding:
            decision = self.preemptor.admit_nominated(prepared, queue)
        else:
            decision = self._try_admit(prepared, queue)
        if book is not None:
            if decision.verdict is Verdict.ADMIT:
                book.admitted_now(prepared, self.shapes[workload.key], decision)
            decision = book.decided(prepared, queue, decision)
            if decision.reason is Reason.RESERVATION_OVERRUN:
                self.ledger.reserve(queue.team_quota, prepared.need())
        if decision.verdict is Verdict.ADMIT:
            self.pacer.admitted(workload)
        if decision.verdict is not Verdict.ADMIT and queue.ordering is Ordering.STRICT_FIFO:
            self.blocked_by[queue_key] = workload.namespaced_name
        return decision

    def _waiting(self, workload: Workload, queue: Queue) -> str:
        total = workload.pod_count + workload.absent_members
        message = (
            f"{workload.pod_count} of {total} members exist; the gang is tried once all {total} do"
        )
        timeout = queue.pods_ready_timeout_seconds
        waited = self.snapshot.now - workload.created
        if timeout is not None and workload.created and waited >= timeout:
            message += f" (still short after {duration_text(waited)}, past the queue's {timeout}s)"
        return message

    def _try_admit(self, prepared: Prepared, queue: Queue) -> Decision:
        workload = prepared.workload
        sets = self.shapes[workload.key]
        twin = (
            queue.namespace,
            queue.name,
            tuple((s.shape.key, s.pod_set.min_count, s.pod_set.count) for s in sets),
            # A group places its pod sets together: grouped and not are not twins.
            tuple(map(group_of, sets)) if len(sets) > 1 else (),
            # With reservations, a gang's runtime says where it may backfill, and a
            # reserved gang is let onto its own nodes: neither has a twin.
            None if self.book is None else self._backfill_key(prepared),
        )
        earlier = self.failed.get(twin)
        if earlier is not None and earlier[0] == self.admissions:
            same = earlier[1]
            return decision_for(workload, same.verdict, same.reason, same.message)
        decision = self._attempt(prepared, queue, sets)
        if self.book is not None and decision.reason is Reason.NO_NODE_FIT:
            decision = self._backfill(prepared, queue, sets, decision)
        held = decision.reason is Reason.POD_CREATION_BACKLOG
        if decision.verdict in (Verdict.ADMIT, Verdict.PREEMPT) or held:
            # Room was taken (a gang held by pacing is assumed admitted): a twin of an
            # earlier failure may be decided differently now.
            self.admissions += 1
        else:
            self.failed[twin] = (self.admissions, decision)
        return decision

    def _backfill_key(self, prepared: Prepared) -> object:
        assert self.book is not None
        if self.book.holds(prepared.workload.key):
            return prepared.workload.key
        return prepared.workload.runtime.seconds

    def _backfill(
        self, prepared: Prepared, queue: Queue, sets: tuple[SetShape, ...], refused: Decision
    ) -> Decision:
        """Tried again with the reservations it would end before opened to it."""
        assert self.book is not None
        windows = self.book.windows(prepared)
        if not windows:
            return refused
        self.book.open(windows)
        try:
            again = self._attempt(prepared, queue, sets)
        finally:
            self.book.close(windows)
        if again.verdict is not Verdict.ADMIT:
            return refused
        over = self.book.backfilled_over(windows, again.placement)
        if not over:
            return again
        runtime = prepared.workload.runtime
        return replace(
            again,
            message=f"{again.message}; backfilled onto nodes reserved for "
            f"{', '.join(key.split('/', 1)[1] for key in over)}, as it should end in "
            f"{duration_text(runtime.seconds or 0)} ({runtime.source.value.lower()} estimate)",
            backfilled_over=over,
        )

    def _place(self, prepared: Prepared, sets: tuple[SetShape, ...]) -> tuple[list[Placement], str]:
        """Every pod set placed, as one transaction: (placements, "") or ([], why not).

        Each set's placement is committed before the next is tried, so the sets
        never count the same free capacity twice; if a later set does not fit,
        the earlier ones are released again (Volcano's statement discard).
        """
        outcome = place_sets(self.placer, sets)
        if not isinstance(outcome, SetsRefused):
            return outcome, ""
        explanation = outcome.explanation
        names = [sets[i].pod_set.name for i in outcome.pod_sets]
        if outcome.group:
            explanation = (
                f"pod set{'s' if len(names) > 1 else ''} {', '.join(names)} of topology group "
                f"{outcome.group!r}: {explanation}"
            )
        elif len(sets) > 1:
            explanation = f"pod set {names[0]}: {explanation}"
        if self.sick_nodes:
            index = outcome.pod_sets[0]
            template, request = sets[index].pod_set.template, prepared.requests[index]
            note = unhealthy_note((n for n in self.sick_nodes if may_select(n, template)), request)
            explanation += f"; {note}" if note else ""
        return [], explanation

    def _attempt(self, prepared: Prepared, queue: Queue, sets: tuple[SetShape, ...]) -> Decision:
        workload = prepared.workload
        need = prepared.need()
        shortfall = self.ledger.shortfall(queue.team_quota, need)
        # Past the pacing budget, no gang preempts: its victims would go for a gang that waits.
        paced = self.pacer.would_hold(workload)
        if shortfall is not None:
            preempting = None if paced else self.preemptor.try_preempt(prepared, queue, sets, need)
            if preempting is not None:
                return preempting
            message = shortfall.describe()
            if self.ledger.holds_nominal(queue.team_quota, need):
                # Its own nominal would hold it, or it needs preempting it may not do:
                # what is still idle of its nominal is not lent again this cycle.
                self.ledger.hold_idle_nominal(queue.team_quota, need)
            if not self.ledger.within_nominal(queue.team_quota, need) and self.fair.applies(
                queue.team_quota
            ):
                why = self.fair.why_not_preempted(queue.team_quota, need)
                message += f"; {why}" if why else ""
            return decision_for(workload, Verdict.PENDING, Reason.QUOTA_EXCEEDED, message)
        placed, explanation = self._place(prepared, sets)
        if not placed:
            preempting = None if paced else self.preemptor.try_preempt(prepared, queue, sets, need)
            if preempting is not None:
                return preempting
            return decision_for(workload, Verdict.PENDING, Reason.NO_NODE_FIT, explanation)
        if self.pacer.holds(workload):
            # Assumed admitted for the rest of the cycle, so that every later gang is
            # decided as it would be had this one gone (no overtaking, reasons that do not
            # flip); its quota is forgotten when the cycle ends, and nothing is written.
            self.ledger.reserve(queue.team_quota, need)
            self.assumed.append((queue.team_quota, need))
            message = self.pacer.message()
            return decision_for(workload, Verdict.PENDING, Reason.POD_CREATION_BACKLOG, message)
        borrowed = self.ledger.borrowed(queue.team_quota, need)
        self.ledger.reserve(queue.team_quota, need)
        # One pod set, as nearly every gang has: its nodes are the total, nothing to add.
        total: Mapping[str, int] = placed[0].nodes
        if len(placed) > 1:
            summed: Counter[str] = Counter()
            for placement in placed:
                summed.update(placement.nodes)
            total = summed
        message = (
            f"{count_of(workload.gang_size, 'member')} placed on {count_of(len(total), 'node')}; "
            f"charged to TeamQuota {queue.team_quota}"
        )
        if borrowed:
            message += " (borrowing " + "; ".join(borrowed) + ")"
        by_set = (
            {
                s.pod_set.name: dict(sorted(p.nodes.items()))
                for s, p in zip(sets, placed, strict=True)
            }
            if len(sets) > 1
            else {}
        )
        decision = decision_for(
            workload,
            Verdict.ADMIT,
            Reason.ADMITTED,
            message,
            dict(sorted(total.items())),
            by_set,
        )
        return with_topology(decision, sets, placed)


def schedule(
    snapshot: Snapshot,
    *,
    placer: PlacerFactory = EquivalenceIndex,
    creation_backlog: int | None = None,
) -> CycleResult:
    """Decide, for every pending gang in order, whether to admit it and where.

    ``creation_backlog`` paces admission (see :mod:`queue_controller.core.cycle.pacing`): the
    most pods of admitted gangs that may still wait to be made; None, no limit.
    """
    # The cyclic garbage collector is paused for the cycle.  A cycle allocates tens of
    # thousands of objects, most freed by reference counting, and each full collection
    # they trigger would walk the whole snapshot again: with DRA's thousands of devices
    # that was a third of the cycle.  What the cycle leaves in reference cycles is
    # collected once the collector runs again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _Cycle(snapshot, placer, creation_backlog).run()
    finally:
        if collecting:
            gc.enable()
