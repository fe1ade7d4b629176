"""Build a core :class:`Snapshot` from Kubernetes objects.

``plan`` feeds it the documents of a dump; the controller feeds it the
objects its watches hold.  Both therefore read the cluster the same way:

* a bound pod that has not terminated uses node capacity;
* a queued job that is not suspended and not finished holds quota;
* a suspended queued job is a pending gang;
* a job's PodGroup (owned by it, else of the same name) sets the gang size
  and carries requeue state and the planned placement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from queue_controller.api import v1alpha1
from queue_controller.core.model import (
    BoundPod,
    Node,
    PriorityClass,
    Queue,
    Snapshot,
    TeamQuota,
    Workload,
)
from queue_controller.errors import InputError
from queue_controller.kube import jobs, objects
from queue_controller.kube.fields import Obj, get

CORE_KINDS = {
    ("v1", "Node"),
    ("v1", "Pod"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    (v1alpha1.API_VERSION, "TeamQuota"),
    (v1alpha1.API_VERSION, "Queue"),
    (v1alpha1.API_VERSION, "PodGroup"),
}
SUPPORTED_KINDS = CORE_KINDS | {(kind.api_version, name) for name, kind in jobs.JOB_KINDS.items()}


@dataclass(frozen=True, slots=True)
class Located:
    """An object and where it came from ("dump.yaml document 3"), for messages."""

    where: str
    obj: Obj


@dataclass
class _Collected:
    nodes: list[Node] = field(default_factory=list)
    pods: list[BoundPod] = field(default_factory=list)
    priority_classes: list[PriorityClass] = field(default_factory=list)
    quotas: list[TeamQuota] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    groups: list[v1alpha1.PodGroup] = field(default_factory=list)
    jobs: list[Located] = field(default_factory=list)


def is_supported(obj: Obj) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in SUPPORTED_KINDS


def _collect_one(item: Located, into: _Collected) -> None:
    obj = item.obj
    kind = obj.get("kind")
    if kind == "Node":
        into.nodes.append(objects.node(obj))
    elif kind == "Pod":
        pod = objects.bound_pod(obj)
        if pod is not None:
            into.pods.append(pod)
    elif kind == "PriorityClass":
        into.priority_classes.append(objects.priority_class(obj))
    elif kind == "TeamQuota":
        into.quotas.append(objects.team_quota(obj))
    elif kind == "Queue":
        into.queues.append(objects.queue(obj))
    elif kind == "PodGroup":
        into.groups.append(objects.pod_group(obj))
    elif kind in jobs.JOB_KINDS:
        if jobs.queue_name(obj):  # jobs outside any queue are not ours to hold
            into.jobs.append(item)
    else:
        raise InputError(f"unsupported kind {obj.get('apiVersion')}/{kind}")


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


def build_snapshot(items: Iterable[Located], *, now: float, skip: Skip | None = None) -> Snapshot:
    """Translate every object.

    Without ``skip`` (``plan``), the first bad object raises :class:`InputError`
    naming it.  With ``skip`` (the controller, which reads what the API server
    already accepted and must keep scheduling), a bad object is reported to
    ``skip`` and left out.
    """

    def fail(error: InputError) -> None:
        if skip is None:
            raise error
        skip(error)

    items = list(items)
    if skip is None:
        _check_unique(items)  # also checks that every object has a name
    collected = _Collected()
    for item in items:
        try:
            _collect_one(item, collected)
        except InputError as error:
            fail(error.located(where=item.where))
    return Snapshot(
        nodes=tuple(collected.nodes),
        pods=tuple(collected.pods),
        workloads=tuple(_workloads(collected, fail)),
        queues=tuple(collected.queues),
        quotas=tuple(collected.quotas),
        priority_classes=tuple(collected.priority_classes),
        now=now,
    )


def _workloads(collected: _Collected, fail: Skip) -> list[Workload]:
    groups = _GroupIndex(collected.groups)
    out = []
    for item in collected.jobs:
        kind = jobs.JOB_KINDS[str(item.obj.get("kind"))]
        try:
            out.append(jobs.workload(item.obj, kind, groups.find(item.obj)))
        except InputError as error:  # metadata that even a broken job must get right
            fail(error.located(where=item.where))
    return out


class _GroupIndex:
    """PodGroups by what can tie them to a job: owner uid, owner name, own name."""

    def __init__(self, groups: Iterable[v1alpha1.PodGroup]) -> None:
        self._by: dict[tuple[str, str, str], v1alpha1.PodGroup] = {}
        for group in groups:
            namespace = group.metadata.namespace or "default"
            for ref in group.metadata.ownerReferences:
                kind = str(ref.get("kind", ""))
                if ref.get("uid"):
                    self._by.setdefault((namespace, kind, f"uid:{ref['uid']}"), group)
                if ref.get("name"):
                    self._by.setdefault((namespace, kind, f"name:{ref['name']}"), group)
            if not group.metadata.ownerReferences:
                self._by.setdefault((namespace, "", f"name:{group.metadata.name}"), group)

    def find(self, obj: Obj) -> v1alpha1.PodGroup | None:
        namespace = get(obj, "metadata.namespace", str, "default")
        kind = str(obj.get("kind", ""))
        uid = get(obj, "metadata.uid", str, "")
        name = get(obj, "metadata.name", str, "")
        for key in (
            (namespace, kind, f"uid:{uid}") if uid else None,
            (namespace, kind, f"name:{name}"),
            (namespace, "", f"name:{name}"),
        ):
            if key is not None and key in self._by:
                group = self._by[key]
                if jobs.owned_by(group, obj):
                    return group
        return None
