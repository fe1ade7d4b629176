"""Translate Kubernetes objects, once, into the core's snapshot and typed gang views.

``plan`` feeds it the documents of a dump; the controller feeds it the
objects its watches hold.  Both therefore read the cluster the same way:

* a bound pod that has not terminated uses node capacity;
* a workload kind (kube/kinds) claims its member pods and reads each gang;
* a gang that is held (a suspended Job, gated pods) is pending; one that is
  not, or whose PodGroup says Admitted or Running, holds quota;
* a gang's PodGroup sets the gang size and carries requeue state and the
  planned placement.

Every raw object is read here and nowhere else; what comes out is typed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

from queue_controller.core.model import (
    BoundPod,
    ClaimTemplate,
    DeviceClass,
    GpuHealth,
    Node,
    PriorityClass,
    Queue,
    ResourceClaim,
    ResourceSlice,
    Snapshot,
    TeamQuota,
    Topology,
)
from queue_controller.core.reservation import DEFAULT_MIN_HISTORY
from queue_controller.errors import InputError, InvalidSpecError, UnreadableObject, plain
from queue_controller.kube import dra, kinds, objects
from queue_controller.kube.cohorts import CohortView, cycle_error, in_cycles
from queue_controller.kube.fields import Obj, describe, get
from queue_controller.kube.fields import objects as objects_of
from queue_controller.kube.gangs import (
    WORKLOAD_KIND_LABEL,
    GangView,
    GroupIndex,
    GroupView,
    workload_of,
)
from queue_controller.kube.kinds import KindGang, WorkloadKind
from queue_controller.kube.kinds.runtime import RuntimeHistory
from queue_controller.kube.memo import TranslationMemo, key_of
from queue_controller.kube.pieces import PodPiece, read_head, read_node, read_pod
from queue_controller.kube.resources import COHORT, FIELD_MANAGER, POD_GROUP, QUEUE, TEAM_QUOTA
from queue_controller.kube.runtimes import Runtimes
from queue_controller.kube.unread import Unread, broken_gang, left_out
from queue_controller.kube.views import MemberPod, Ref, ref_of

SUPPORTED_KINDS = {(r.api_version, r.kind) for r in kinds.WATCHED}


@dataclass(frozen=True, slots=True)
class Located:
    """An object and where it came from ("dump.yaml document 3"), for messages.

    ``None``: the object's own ``Kind/namespace/name`` (the controller's objects), made
    only when a message needs it: tens of thousands of objects a cycle, rarely a message.
    """

    origin: str | None
    obj: Obj

    @property
    def where(self) -> str:
        return self.origin if self.origin is not None else describe(self.obj)


@dataclass(frozen=True, slots=True)
class QueueView:
    model: Queue
    ref: Ref
    status: dict[str, object]


@dataclass(frozen=True, slots=True)
class QuotaView:
    model: TeamQuota
    ref: Ref
    status: dict[str, object]


@dataclass(frozen=True, slots=True)
class Translation:
    """Everything one cycle reads, each object translated once."""

    snapshot: Snapshot
    gangs: tuple[GangView, ...]
    # PodGroups the controller made whose gang is gone (pods deleted for good).
    orphans: tuple[GroupView, ...]
    queues: tuple[QueueView, ...]
    quotas: tuple[QuotaView, ...]
    # Node -> (its GPU health, when its GPUHealthy condition turned False).
    node_health: dict[str, tuple[GpuHealth, float]]
    # Objects left out because they could not be read (with ``skip``; issue 22).
    left_out: tuple[Unread, ...] = ()
    cohorts: tuple[CohortView, ...] = ()


@dataclass
class _Collected:
    nodes: list[Node] = field(default_factory=list)
    health: dict[str, tuple[GpuHealth, float]] = field(default_factory=dict)
    pods: list[tuple[Located, PodPiece]] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    quotas: list[QuotaView] = field(default_factory=list)
    cohorts: list[CohortView] = field(default_factory=list)
    topologies: list[Topology] = field(default_factory=list)
    queues: list[QueueView] = field(default_factory=list)
    groups: list[GroupView] = field(default_factory=list)
    device_classes: list[DeviceClass] = field(default_factory=list)
    resource_slices: list[ResourceSlice] = field(default_factory=list)
    resource_claims: list[ResourceClaim] = field(default_factory=list)
    claim_templates: list[ClaimTemplate] = field(default_factory=list)
    # Kind -> its queued heads, each with its namespace and name.
    heads: dict[str, list[tuple[Located, str, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    left_out: list[Unread] = field(default_factory=list)


def is_supported(obj: Obj) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in SUPPORTED_KINDS


def _status(obj: Obj) -> dict[str, object]:
    return dict(get(obj, "status", dict, {}))


def phase_writer(obj: Obj) -> str | None:
    """The field manager that owns status.phase (metadata.managedFields), if the object says.

    Where several own it (server-side apply shares a field between appliers that set the
    same value), any that is not the controller is the answer.
    """
    owners: list[str] = []
    for entry in objects_of(obj, "metadata.managedFields"):
        fields = entry.get("fieldsV1")
        status = fields.get("f:status") if isinstance(fields, dict) else None
        if isinstance(status, dict) and "f:phase" in status:
            manager = entry.get("manager")
            owners.append(manager if isinstance(manager, str) else "")
    others = [m for m in owners if m != FIELD_MANAGER]
    return others[0] if others else (FIELD_MANAGER if owners else None)


def _collect_one(item: Located, into: _Collected, memo: TranslationMemo) -> None:
    obj = item.obj
    kind = obj.get("kind")
    if kind == "Node":
        node, health = memo.piece(obj, lambda: read_node(obj))
        into.nodes.append(node)
        if health is not None:
            into.health[node.name] = health
    elif kind == "Pod":
        into.pods.append((item, memo.piece(obj, lambda: read_pod(obj))))
    elif kind == "PriorityClass":
        into.priority_classes.append(memo.piece(obj, lambda: objects.priority_class(obj)))
    elif kind == "TeamQuota":
        into.quotas.append(
            memo.piece(
                obj,
                lambda: QuotaView(objects.team_quota(obj), ref_of(TEAM_QUOTA, obj), _status(obj)),
            )
        )
    elif kind == "Cohort":
        into.cohorts.append(
            memo.piece(
                obj, lambda: CohortView(objects.cohort(obj), ref_of(COHORT, obj), _status(obj))
            )
        )
    elif kind == "Topology":
        into.topologies.append(memo.piece(obj, lambda: objects.topology(obj)))
    elif kind == "Queue":
        into.queues.append(
            memo.piece(obj, lambda: QueueView(objects.queue(obj), ref_of(QUEUE, obj), _status(obj)))
        )
    elif kind == "PodGroup":
        into.groups.append(
            memo.piece(
                obj,
                lambda: GroupView(
                    objects.pod_group(obj), ref_of(POD_GROUP, obj), phase_writer(obj)
                ),
            )
        )
    elif kind == "ResourceSlice":
        into.resource_slices.append(memo.piece(obj, lambda: dra.resource_slice(obj)))
    elif kind == "ResourceClaim":
        into.resource_claims.append(memo.piece(obj, lambda: dra.resource_claim(obj)))
    elif kind == "ResourceClaimTemplate":
        into.claim_templates.append(memo.piece(obj, lambda: dra.claim_template(obj)))
    elif kind == "DeviceClass":
        into.device_classes.append(memo.piece(obj, lambda: dra.device_class(obj)))
    elif isinstance(kind, str) and kind in kinds.BY_HEAD:
        head = memo.piece(obj, lambda: read_head(obj))
        if head is not None:  # None: not in a queue, not ours to hold
            into.heads[str(kind)].append((item, *head))
    else:
        raise InputError(f"unsupported kind {plain(obj.get('apiVersion'))}/{plain(kind)}")


def _identity(item: Located) -> tuple[str, str, str]:
    """(kind, namespace, name): what makes an object unique in a cluster."""
    try:
        name = get(item.obj, "metadata.name", str, "")
        namespace = get(item.obj, "metadata.namespace", str, "")
    except InputError as error:
        raise error.located(where=item.where) from None
    if not name:
        raise InputError("every object needs a name", where=item.where, field="metadata.name")
    return str(item.obj.get("kind")), namespace, name


def _check_unique(items: Iterable[Located]) -> None:
    seen: dict[tuple[str, str, str], str] = {}
    for item in items:
        key = _identity(item)
        if key in seen:
            raise InputError(f"the same {key[0]} also appears at {seen[key]}", where=item.where)
        seen[key] = item.where


Skip = Callable[[InputError], None]


def translate(
    items: Iterable[Located],
    *,
    now: float,
    skip: Skip | None = None,
    memo: TranslationMemo | None = None,
    history: RuntimeHistory | None = None,
    min_history: int = DEFAULT_MIN_HISTORY,
    reservation_limit: int = 8,
) -> Translation:
    """Translate every object, once.

    Without ``skip`` (``plan``), the first bad object raises :class:`InputError`
    naming it.  With ``skip`` (the controller, which reads what the API server
    already accepted and must keep scheduling), a bad object is reported to
    ``skip`` and left out.  With ``memo`` (the controller, from cycle to cycle), an
    object at the version it was read at last time is not read again.

    Each object is read behind its own error boundary (issue 22): any exception but an
    :class:`InputError` is a bug in a reader, and becomes the object's
    :class:`UnreadableObject`, so one object can never fail the whole translation.
    A gang whose kind could not read it is ``InvalidSpec`` on its own PodGroup.

    ``history`` (like gangs' finished runtimes, from the journal) and ``min_history``
    make runtime estimates (kinds/runtime.py); ``reservation_limit`` is the cluster's
    cap on reservations held at once.
    """
    memo = memo if memo is not None else TranslationMemo()
    collected = _Collected()

    def fail(error: InputError) -> None:
        if skip is None:
            raise error
        skip(error)

    items = list(items)
    if skip is None:
        _check_unique(items)  # also checks that every object has a name
    for item in items:
        try:
            try:
                _collect_one(item, collected, memo)
            except InputError:
                raise
            except Exception as bug:  # outside a reader: in the collecting itself
                raise memo.unreadable(key_of(item.obj), bug) from bug
        except InputError as error:
            located = error.located(where=item.where)
            fail(located)
            collected.left_out.append(left_out(item.obj, located))
    _refuse_cycles(items, collected, fail)
    queues = {(q.model.namespace, q.model.name): q.model for q in collected.queues}
    index = GroupIndex(collected.groups)
    members = _claim_members(collected.pods)
    runtimes = Runtimes(history if history is not None else {}, min_history)
    gangs = _gangs(collected, members, index, queues, fail, memo, runtimes)

    def fail_pod(item: Located, error: InputError) -> None:
        fail(error)
        collected.left_out.append(left_out(item.obj, error))

    bound = _bound_pods(collected.pods, members, fail_pod, memo)
    memo.end_cycle()
    orphans = tuple(g for g in index.unclaimed() if WORKLOAD_KIND_LABEL in g.model.metadata.labels)
    snapshot = Snapshot(
        nodes=tuple(collected.nodes),
        pods=tuple(bound),
        workloads=tuple(g.workload for g in gangs),
        queues=tuple(queues.values()),
        quotas=tuple(q.model for q in collected.quotas),
        priority_classes=tuple(collected.priority_classes),
        now=now,
        cohorts=tuple(c.model for c in collected.cohorts),
        topologies=tuple(collected.topologies),
        device_classes=tuple(collected.device_classes),
        resource_slices=tuple(collected.resource_slices),
        resource_claims=tuple(collected.resource_claims),
        claim_templates=tuple(collected.claim_templates),
        left_out=tuple(u.model for u in collected.left_out),
        reservation_limit=reservation_limit,
    )
    return Translation(
        snapshot,
        tuple(gangs),
        orphans,
        tuple(collected.queues),
        tuple(collected.quotas),
        collected.health,
        tuple(collected.left_out),
        tuple(collected.cohorts),
    )


def _refuse_cycles(items: list[Located], collected: _Collected, fail: Skip) -> None:
    """Leave out the Cohorts and TeamQuotas of a cohort tree with a cycle (kube/cohorts.py)."""
    bad = in_cycles((c.model for c in collected.cohorts), (q.model for q in collected.quotas))
    if not bad:
        return
    # The Cohorts first: the cycle is theirs; a TeamQuota only hangs from it.
    for item in sorted(items, key=lambda i: i.obj.get("kind") != "Cohort"):
        key = (str(item.obj.get("kind")), str(get(item.obj, "metadata.name", str, "")))
        if key in bad:
            error = cycle_error(key[0], bad[key], where=item.where)
            fail(error)
            collected.left_out.append(left_out(item.obj, error))
    collected.cohorts = [c for c in collected.cohorts if ("Cohort", c.model.name) not in bad]
    collected.quotas = [q for q in collected.quotas if ("TeamQuota", q.model.name) not in bad]


def build_snapshot(items: Iterable[Located], *, now: float, skip: Skip | None = None) -> Snapshot:
    """The core's snapshot alone (``plan``)."""
    return translate(items, now=now, skip=skip).snapshot


# (kind name, namespace, gang name) -> its member pods
_Members = dict[tuple[str, str, str], list[MemberPod]]


def _claim_members(pods: list[tuple[Located, PodPiece]]) -> _Members:
    members: _Members = defaultdict(list)
    for _, piece in pods:
        if piece.gang is not None:
            members[piece.gang].append(piece.pod)
    return members


def _gangs(
    collected: _Collected,
    members: _Members,
    index: GroupIndex,
    queues: dict[tuple[str, str], Queue],
    fail: Skip,
    memo: TranslationMemo,
    runtimes: Runtimes,
) -> list[GangView]:
    out: list[GangView] = []
    for kind in kinds.KINDS:
        if kind.head is not None:
            for item, namespace, name in collected.heads.get(kind.head.kind, []):
                pods = members.get((kind.name, namespace, name), [])
                # Where the head is, said only if it is wrong: saying it walks the object.
                view = _view(
                    kind,
                    item.obj,
                    namespace,
                    name,
                    pods,
                    index,
                    queues,
                    _where(item),
                    fail,
                    memo,
                    runtimes,
                )
                if view is not None:
                    out.append(view)
        else:
            for (kind_name, namespace, name), pods in sorted(members.items()):
                if kind_name != kind.name:
                    continue
                where = partial(str, f"{kind.name} group {namespace}/{name}")
                view = _view(
                    kind, None, namespace, name, pods, index, queues, where, fail, memo, runtimes
                )
                if view is not None:
                    out.append(view)
    return sorted(out, key=lambda g: g.key)


def _view(
    kind: WorkloadKind,
    head: Obj | None,
    namespace: str,
    name: str,
    pods: list[MemberPod],
    index: GroupIndex,
    queues: dict[tuple[str, str], Queue],
    where: Callable[[], str],
    fail: Skip,
    memo: TranslationMemo,
    runtimes: Runtimes,
) -> GangView | None:
    members = tuple(pods)
    key = (kind.name, namespace, name)

    def broken(error: InputError) -> KindGang:
        located = error.located(where=where())
        return broken_gang(
            kind, namespace=namespace, name=name, head=head, members=members, error=located
        )

    try:
        try:
            gang = memo.gang(
                key,
                head,
                members,
                None,
                lambda: kind.read(namespace=namespace, name=name, head=head, members=members),
            )
        except UnreadableObject as error:  # a reader's bug: InvalidSpec on its own gang
            gang = broken(error)
        group = index.find(kind, gang)
        # Its workload also reads its PodGroup: kept apart, under the gang it was read for.
        try:
            workload = memo.gang(
                (f"{kind.name}/workload", namespace, name),
                None,
                (gang,),
                group,
                lambda: workload_of(kind, gang, group),
            )
        except UnreadableObject as error:
            gang = broken(error)
            workload = workload_of(kind, gang, group)
        workload = runtimes.of(gang, workload, memo)
    except InputError as error:  # what even a broken gang must get right (its name)
        fail(error.located(where=where()))
        return None
    except Exception as bug:  # the boundary's last line: the gang alone is left out
        fail(memo.unreadable(key, bug).located(where=where()))
        return None
    return GangView(
        kind=kind,
        gang=gang,
        workload=workload,
        group=group,
        queue=queues.get((namespace, gang.facts.queue)),
    )


def _where(item: Located) -> Callable[[], str]:
    return lambda: item.where


def _bound_pods(
    pods: list[tuple[Located, PodPiece]],
    members: _Members,
    fail: Callable[[Located, InputError], None],
    memo: TranslationMemo,
) -> list[BoundPod]:
    owner_of: dict[int, str] = {}
    for (kind_name, namespace, name), group in members.items():
        workload = kinds.by_name(kind_name).pod_group_name(name)
        for pod in group:
            owner_of[id(pod)] = f"{kind_name}/{namespace}/{workload}"
    out = []
    for item, piece in pods:
        pod, request = piece.pod, piece.request
        if not pod.node_name or request is None:
            continue
        if isinstance(request, InvalidSpecError):
            fail(item, InputError(request.detail, where=item.where, field=f"spec.{request.field}"))
            continue
        workload = owner_of.get(id(pod), "")
        out.append(memo.derived(piece, workload, partial(_as_bound, pod, request, workload)))
    return out


def _as_bound(pod: MemberPod, request: dict[str, int], workload: str) -> BoundPod:
    return BoundPod(
        namespace=pod.ref.namespace or "default",
        name=pod.ref.name,
        node_name=pod.node_name or "",
        request=request,
        phase=pod.phase,
        workload=workload,
        pod_set=pod.pod_set,
        deleting=pod.deleting,
    )


__all__ = [
    "SUPPORTED_KINDS",
    "GangView",
    "Located",
    "QueueView",
    "QuotaView",
    "Translation",
    "build_snapshot",
    "is_supported",
    "translate",
]
