"""One admission cycle: a pure, deterministic function from a snapshot to decisions.

The cycle follows Kueue's shape (snapshot, order, nominate, admit) with
Volcano's transaction: each gang is tried against the quota ledger and the
placer without changing either; only a gang that passes both is committed,
so gangs admitted earlier in the cycle are seen by every later one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from queue_controller.core.decisions import Decision, Reason, Verdict
from queue_controller.core.fit import EquivalenceIndex
from queue_controller.core.gpuhealth import unhealthy_note
from queue_controller.core.model import (
    BoundPod,
    Node,
    Ordering,
    PodTemplate,
    Queue,
    Snapshot,
    Workload,
    WorkloadPhase,
)
from queue_controller.core.nodes import may_select
from queue_controller.core.ordering import PriorityTable, order_key
from queue_controller.core.quantity import format_milli
from queue_controller.core.quota import QuotaLedger
from queue_controller.core.requests import InvalidSpecError, pod_request
from queue_controller.core.resources import Resources, scale, scarcity_rank
from queue_controller.core.shapes import GangShape, Placement, Placer, shape_of

PlacerFactory = Callable[[Sequence[Node], Mapping[str, Resources], Iterable[GangShape]], Placer]

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class CycleResult:
    decisions: tuple[Decision, ...]
    # TeamQuota -> resource -> usage after this cycle's admissions.
    quota_usage: Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class _Prepared:
    workload: Workload
    priority: int
    request: Mapping[str, int]  # per pod; empty when invalid
    error: str  # why it is invalid; empty when valid


def _prepare(workload: Workload, priorities: PriorityTable) -> _Prepared:
    # Priority first, so an invalid gang is still listed where it would have queued.
    try:
        priority = priorities.value_of(workload.template)
    except InvalidSpecError as error:
        return _Prepared(workload, 0, {}, f"spec.template.spec.{error.field}: {error.detail}")
    try:
        request = pod_request(workload.template)
    except InvalidSpecError as error:
        return _Prepared(
            workload, priority, {}, f"spec.template.spec.{error.field}: {error.detail}"
        )
    if workload.spec_error:
        return _Prepared(workload, priority, {}, workload.spec_error)
    if workload.gang_size > workload.pod_count:
        return _Prepared(
            workload,
            priority,
            {},
            f"the gang needs {workload.gang_size} members but the {workload.kind} "
            f"runs only {workload.pod_count} pods at once",
        )
    return _Prepared(workload, priority, request, "")


def _node_usage(
    pods: Iterable[BoundPod], admitted: Iterable[_Prepared]
) -> dict[str, dict[str, int]]:
    """What each node has given away.

    That is its bound, non-terminated pods, plus the members of admitted gangs
    that were planned onto it but are not bound yet: between admission and
    binding, the plan itself holds the capacity.
    """
    used: dict[str, dict[str, int]] = {}

    def charge(node: str, request: Mapping[str, int], times: int) -> None:
        # Plain dict arithmetic: this runs for every pod at every cycle.
        node_used = used.get(node)
        if node_used is None:
            used[node] = {r: amount * times for r, amount in request.items()}
            return
        for resource, amount in request.items():
            node_used[resource] = node_used.get(resource, 0) + amount * times

    arrived: Counter[tuple[str, str]] = Counter()
    for pod in pods:
        if pod.workload:
            arrived[(pod.workload, pod.node_name)] += 1
        if pod.phase in TERMINATED_PHASES or not pod.node_name:
            continue
        charge(pod.node_name, pod.request, 1)
    for prepared in admitted:
        workload = prepared.workload
        for node, planned in workload.placement.items():
            waiting = planned - arrived[(workload.key, node)]
            if waiting > 0:
                charge(node, prepared.request, waiting)
    return used


class _Cycle:
    def __init__(self, snapshot: Snapshot, placer_factory: PlacerFactory) -> None:
        self.snapshot = snapshot
        priorities = PriorityTable(snapshot.priority_classes)
        self.queues = {(q.namespace, q.name): q for q in snapshot.queues}
        prepared = [
            _prepare(w, priorities)
            for w in snapshot.workloads
            if w.phase is not WorkloadPhase.FINISHED
        ]
        admitted = [p for p in prepared if p.workload.phase is WorkloadPhase.ADMITTED]
        self.pending = sorted(
            (p for p in prepared if p.workload.phase is WorkloadPhase.PENDING),
            key=lambda p: order_key(p.workload, p.priority),
        )
        self.ledger = QuotaLedger(snapshot.quotas, self._quota_usage(admitted))
        self.shapes: dict[str, GangShape] = {}
        by_template: dict[PodTemplate, GangShape] = {}
        for p in self.pending:
            if not p.error:
                shape = by_template.get(p.workload.template)
                if shape is None:
                    shape = by_template[p.workload.template] = shape_of(
                        p.workload.template, p.request
                    )
                self.shapes[p.workload.key] = shape
        self.placer = placer_factory(
            snapshot.nodes, _node_usage(snapshot.pods, admitted), self.shapes.values()
        )
        # Nodes with some GPUs out, named when a gang does not fit (rarely any).
        self.sick_nodes = [n for n in snapshot.nodes if n.gpu_health is not None]
        # StrictFIFO queue -> the head that holds it up.
        self.blocked_by: dict[tuple[str, str], str] = {}
        # A gang identical to one that already failed in this cycle, with nothing
        # admitted since, fails the same way: quota and nodes only fill up during a
        # cycle.  Saturated clusters queue many identical gangs; this spares them
        # the quota check, the placement attempt and the explanation.
        self.admissions = 0
        self.failed: dict[tuple[object, ...], tuple[int, Decision]] = {}

    def _quota_usage(self, admitted: Iterable[_Prepared]) -> dict[str, dict[str, int]]:
        usage: dict[str, Counter[str]] = defaultdict(Counter)
        for p in admitted:
            queue = self.queues.get((p.workload.namespace, p.workload.queue))
            if queue is None or p.error:
                continue  # nothing to charge it to; its pods still count on nodes
            charged = usage[queue.team_quota]
            pods = p.workload.pod_count
            for resource, amount in p.request.items():
                charged[resource] += amount * pods
        return {name: dict(amounts) for name, amounts in usage.items()}

    def run(self) -> CycleResult:
        decisions = tuple(self._decide(p) for p in self.pending)
        usage = {quota.name: dict(self.ledger.used(quota.name)) for quota in self.snapshot.quotas}
        return CycleResult(decisions, usage)

    def _decide(self, prepared: _Prepared) -> Decision:
        workload = prepared.workload

        def pending(reason: Reason, message: str) -> Decision:
            return Decision(workload.key, workload.queue, Verdict.PENDING, reason, message)

        if prepared.error:
            return Decision(
                workload.key, workload.queue, Verdict.INVALID, Reason.INVALID_SPEC, prepared.error
            )
        queue = self.queues.get((workload.namespace, workload.queue))
        if queue is None:
            return pending(
                Reason.QUEUE_NOT_FOUND,
                f"Queue {workload.namespace}/{workload.queue} does not exist",
            )
        if queue.team_quota not in self.ledger:
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
            wait = _duration(workload.requeue_at - self.snapshot.now)
            return pending(
                Reason.BACKOFF,
                f"requeued {workload.requeue_count} times after eviction; "
                f"eligible again at {due} (in {wait})",
            )
        queue_key = (queue.namespace, queue.name)
        head = self.blocked_by.get(queue_key)
        if head is not None:
            return pending(
                Reason.WAITING_FOR_HEAD,
                f"StrictFIFO queue {queue.namespace}/{queue.name} is held by its head {head}",
            )
        decision = self._try_admit(prepared, queue)
        if decision.verdict is not Verdict.ADMIT and queue.ordering is Ordering.STRICT_FIFO:
            self.blocked_by[queue_key] = workload.key
        return decision

    def _try_admit(self, prepared: _Prepared, queue: Queue) -> Decision:
        workload = prepared.workload
        shape = self.shapes[workload.key]
        twin = (queue.namespace, queue.name, shape.key, workload.gang_size, workload.pod_count)
        earlier = self.failed.get(twin)
        if earlier is not None and earlier[0] == self.admissions:
            same = earlier[1]
            return Decision(workload.key, workload.queue, same.verdict, same.reason, same.message)
        decision = self._attempt(prepared, queue, shape)
        if decision.verdict is Verdict.ADMIT:
            self.admissions += 1
        else:
            self.failed[twin] = (self.admissions, decision)
        return decision

    def _attempt(self, prepared: _Prepared, queue: Queue, shape: GangShape) -> Decision:
        workload = prepared.workload
        need = scale(prepared.request, workload.pod_count)
        shortfall = self.ledger.shortfall(queue.team_quota, need)
        if shortfall is not None:
            return Decision(
                workload.key,
                workload.queue,
                Verdict.PENDING,
                Reason.QUOTA_EXCEEDED,
                shortfall.describe(),
            )
        outcome = self.placer.try_place(shape, workload.gang_size)
        if not isinstance(outcome, Placement):
            explanation = outcome.explanation
            if self.sick_nodes:
                note = unhealthy_note(
                    (n for n in self.sick_nodes if may_select(n, workload.template)),
                    prepared.request,
                )
                explanation += f"; {note}" if note else ""
            return Decision(
                workload.key,
                workload.queue,
                Verdict.PENDING,
                Reason.NO_NODE_FIT,
                explanation,
            )
        borrowed = self._borrowing(queue.team_quota, need)
        self.ledger.reserve(queue.team_quota, need)
        self.placer.commit(shape, outcome)
        nodes = len(outcome.nodes)
        message = (
            f"{_count(workload.gang_size, 'member')} placed on {_count(nodes, 'node')}; "
            f"charged to TeamQuota {queue.team_quota}"
        )
        if borrowed:
            message += " (borrowing " + ", ".join(borrowed) + " from its cohort)"
        return Decision(
            workload.key,
            workload.queue,
            Verdict.ADMIT,
            Reason.ADMITTED,
            message,
            dict(sorted(outcome.nodes.items())),
        )

    def _borrowing(self, quota_name: str, need: Mapping[str, int]) -> list[str]:
        """What admitting ``need`` borrows beyond the quota's nominal, for the message."""
        quota = self.ledger.quota(quota_name)
        used = self.ledger.used(quota_name)
        out = []
        for resource in sorted(need, key=scarcity_rank):
            limits = quota.resources.get(resource)
            if limits is None:
                continue
            before = max(0, used.get(resource, 0) - limits.nominal)
            after = max(0, used.get(resource, 0) + need[resource] - limits.nominal)
            if after > before:
                out.append(f"{format_milli(after - before, resource)} {resource}")
        return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _duration(seconds: float) -> str:
    """A short, rounded duration for messages: 45s, 12m, 3h, 2d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


def schedule(snapshot: Snapshot, *, placer: PlacerFactory = EquivalenceIndex) -> CycleResult:
    """Decide, for every pending gang in order, whether to admit it and where."""
    return _Cycle(snapshot, placer).run()
