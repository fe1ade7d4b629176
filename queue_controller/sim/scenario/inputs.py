"""Read a simulation's inputs: the cluster, the Queues and TeamQuotas, and a workload trace.

Nodes, Queues, TeamQuotas, Cohorts and PriorityClasses go through the code ``plan``
reads a dump with (:func:`queue_controller.dump.read_objects`, then
:func:`queue_controller.kube.snapshot.build_snapshot`), so a file ``plan``
refuses is refused here in the same words.  A cluster may also be a NodePools
file (``deploy/local-cluster/nodes.yaml``).  The trace format lives in
:mod:`queue_controller.sim.scenario.trace`.  Every error is an :class:`InputError`
naming the file, the document or row, and the field.

Where ``plan`` leaves a bad object out and decides the rest, a simulation refuses
the first one: its files define an experiment, and leaving a node or a quota out
would quietly simulate another cluster than the one given.  A key written twice
in any of the files is refused too (:class:`queue_controller.dump.StrictLoader`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from queue_controller import nodepools
from queue_controller.api import v1alpha1
from queue_controller.core import Cohort, Node, PriorityClass, Queue, TeamQuota
from queue_controller.core.rules import BUILTIN_PRIORITY_CLASSES
from queue_controller.dump import read_file, read_objects
from queue_controller.errors import InputError
from queue_controller.kube.fields import describe
from queue_controller.kube.snapshot import Located, build_snapshot
from queue_controller.sim.scenario.spec import Scenario
from queue_controller.sim.scenario.trace import load_trace, read_trace

__all__ = ["QueueObjects", "load_cluster", "load_queues", "load_scenario", "load_trace"]

_NODE = ("v1", "Node")
_QUEUE_KINDS = {
    (v1alpha1.API_VERSION, "Queue"),
    (v1alpha1.API_VERSION, "TeamQuota"),
    (v1alpha1.API_VERSION, "Cohort"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
}
_SKIPPED = {("v1", "Namespace")}  # applied alongside the quotas; nothing to simulate


class QueueObjects(NamedTuple):
    """What queue files hold, as the core reads it."""

    queues: tuple[Queue, ...]
    quotas: tuple[TeamQuota, ...]
    priority_classes: tuple[PriorityClass, ...]
    cohorts: tuple[Cohort, ...] = ()


def _api_kind(item: Located) -> tuple[Any, Any]:
    return item.obj.get("apiVersion"), item.obj.get("kind")


def load_cluster(path: Path) -> tuple[Node, ...]:
    """Nodes from a NodePools file or from Kubernetes Node objects (documents or a List)."""
    source = str(path)
    items = read_objects(source, read_file(source))
    if len(items) == 1 and items[0].obj.get("kind") == "NodePools":
        items = _pool_nodes(path)
    if not items:
        raise InputError("no nodes: expected a NodePools file or Node objects", where=source)
    for item in items:
        if _api_kind(item) != _NODE:
            hint = "is not a v1/Node; a cluster file holds Nodes or one NodePools document"
            kind = "/".join(map(str, _api_kind(item)))
            raise InputError(f"{kind} {hint}", where=item.where, field="kind")
    return build_snapshot(items, now=0.0).nodes


def _pool_nodes(path: Path) -> list[Located]:
    pools = nodepools.load(path)
    nodes = pools.nodes()
    if not nodes:
        raise InputError("no nodes: every pool has count 0", where=str(path), field="pools")
    out = []
    for node in nodes:
        # kwok reports the nodes it runs as Ready; a pool with `ready: false` is left alone,
        # and the node lifecycle controller marks such a node Unknown.
        ready = nodepools.KWOK_ANNOTATION in node["metadata"]["annotations"]
        node["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "Unknown"}]
        out.append(Located(f"{path} ({describe(node)})", node))
    return out


def load_queues(paths: Sequence[Path]) -> QueueObjects:
    """Queues, TeamQuotas, Cohorts and PriorityClasses from the YAML a user applies;
    Namespaces skipped."""
    if not paths:
        raise InputError("no Queue files given")
    kept: list[Located] = []
    for path in paths:
        for item in read_objects(str(path), read_file(str(path))):
            if _api_kind(item) in _SKIPPED:
                continue
            if _api_kind(item) not in _QUEUE_KINDS:
                kind = "/".join(map(str, _api_kind(item)))
                hint = (
                    "queue files hold Queues, TeamQuotas, Cohorts, PriorityClasses (and Namespaces)"
                )
                raise InputError(f"unsupported kind {kind}; {hint}", where=item.where, field="kind")
            kept.append(item)
    snapshot = build_snapshot(kept, now=0.0)
    if not snapshot.queues:
        raise InputError("no Queue objects", where=", ".join(str(p) for p in paths))
    quotas = sorted(q.name for q in snapshot.quotas)
    queue_items = [item for item in kept if item.obj.get("kind") == "Queue"]
    for item, queue in zip(queue_items, snapshot.queues, strict=True):
        if queue.team_quota not in quotas:
            detail = (
                f"no TeamQuota {queue.team_quota!r} (TeamQuotas: {', '.join(quotas) or 'none'})"
            )
            raise InputError(detail, where=item.where, field="spec.teamQuota")
    return QueueObjects(
        snapshot.queues, snapshot.quotas, snapshot.priority_classes, snapshot.cohorts
    )


def load_scenario(
    *, cluster: Path, queues: Sequence[Path], trace: Path, name: str | None = None
) -> Scenario:
    """The three inputs together; every job's queue (and PriorityClass) must exist."""
    nodes = load_cluster(cluster)
    queue_objects, quotas, priority_classes, cohorts = load_queues(queues)
    jobs = read_trace(trace)
    known = {f"{q.namespace}/{q.name}" for q in queue_objects}
    classes = {c.name for c in priority_classes} | set(BUILTIN_PRIORITY_CLASSES)
    for job, where in jobs:
        if f"{job.namespace}/{job.queue}" not in known:
            raise InputError(
                f"no Queue {job.namespace}/{job.queue} in the queue files "
                f"(Queues: {', '.join(sorted(known))})",
                where=where,
                field="queue",
            )
        if job.priority_class and job.priority_class not in classes:
            raise InputError(
                f"no PriorityClass named {job.priority_class!r} in the queue files "
                f"(PriorityClasses: {', '.join(sorted(classes)) or 'none'})",
                where=where,
                field="priority",
            )
    return Scenario(
        name=name or trace.stem,
        nodes=nodes,
        queues=queue_objects,
        quotas=quotas,
        jobs=tuple(job for job, _ in jobs),
        priority_classes=priority_classes,
        cohorts=cohorts,
        sources={
            "cluster": str(cluster),
            "queues": ", ".join(str(p) for p in queues),
            "trace": str(trace),
        },
    )
