"""Small builders for core model values, so tests read as the scenario they check."""

from __future__ import annotations

from collections.abc import Mapping

from queue_controller.core import (
    BoundPod,
    Container,
    Node,
    Ordering,
    PodTemplate,
    Queue,
    ResourceQuota,
    Snapshot,
    Taint,
    TeamQuota,
    Toleration,
    Workload,
    WorkloadPhase,
    one_pod_set,
)
from queue_controller.core.model.objects import NodeSelectorTerm
from queue_controller.core.model.quantity import parse_milli

GPU = "nvidia.com/gpu"


def gpu_node(
    name: str,
    gpus: int = 8,
    *,
    resource: str = GPU,
    cpu: str = "64",
    memory: str = "512Gi",
    labels: Mapping[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    ready: bool = True,
    unschedulable: bool = False,
    extra: Mapping[str, str] | None = None,
) -> Node:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **(extra or {})}
    if gpus:
        allocatable[resource] = str(gpus)
    return Node(
        name=name,
        allocatable={k: parse_milli(v) for k, v in allocatable.items()},
        labels={"kubernetes.io/hostname": name, **(labels or {})},
        taints=taints,
        unschedulable=unschedulable,
        conditions={"Ready": "True" if ready else "False"},
    )


def template(
    gpus: int = 1,
    *,
    resource: str = GPU,
    cpu: str = "1",
    memory: str = "1Gi",
    node_selector: Mapping[str, str] | None = None,
    affinity: tuple[NodeSelectorTerm, ...] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    priority_class: str = "",
) -> PodTemplate:
    limits: dict[str, str | int] = {resource: gpus} if gpus else {}
    return PodTemplate(
        containers=(Container("main", requests={"cpu": cpu, "memory": memory}, limits=limits),),
        node_selector=dict(node_selector or {}),
        required_affinity=affinity,
        tolerations=tolerations,
        priority_class_name=priority_class,
    )


def gang(
    name: str,
    members: int = 1,
    gpus: int = 1,
    *,
    namespace: str = "ns",
    queue: str = "q",
    created: float = 0.0,
    phase: WorkloadPhase = WorkloadPhase.PENDING,
    pod_template: PodTemplate | None = None,
    pod_count: int | None = None,
    kind: str = "Job",
    **kwargs: object,
) -> Workload:
    return Workload(
        kind=kind,
        namespace=namespace,
        name=name,
        queue=queue,
        pod_sets=one_pod_set(
            pod_template or template(gpus),
            count=members if pod_count is None else pod_count,
            min_count=members,
        ),
        phase=phase,
        created=created,
        **kwargs,  # type: ignore[arg-type]
    )


def running_pod(
    node: str, gpus: int, *, name: str = "", workload: str = "", phase: str = "Running"
) -> BoundPod:
    return BoundPod(
        namespace="other",
        name=name or f"pod-on-{node}",
        node_name=node,
        request={GPU: gpus * 1000, "pods": 1000},
        phase=phase,
        workload=workload,
    )


def quota(name: str = "team", cohort: str = "", **resources: ResourceQuota) -> TeamQuota:
    return TeamQuota(name=name, cohort=cohort, resources={_res(k): v for k, v in resources.items()})


def gpus(nominal: int, borrowing: int | None = None, lending: int | None = None) -> ResourceQuota:
    return ResourceQuota(
        nominal * 1000,
        None if borrowing is None else borrowing * 1000,
        None if lending is None else lending * 1000,
    )


def _res(key: str) -> str:
    # Keyword arguments cannot hold dots or slashes: gpu -> nvidia.com/gpu.
    return {"gpu": GPU}.get(key, key)


def queue(
    name: str = "q",
    team: str = "team",
    *,
    namespace: str = "ns",
    ordering: Ordering = Ordering.BEST_EFFORT_FIFO,
) -> Queue:
    return Queue(namespace=namespace, name=name, team_quota=team, ordering=ordering)


def snapshot(**kwargs: object) -> Snapshot:
    """A snapshot with a default unlimited team quota and queue unless given."""
    kwargs.setdefault("quotas", (quota(),))
    kwargs.setdefault("queues", (queue(),))
    listed = (
        "nodes",
        "pods",
        "workloads",
        "queues",
        "quotas",
        "priority_classes",
        "cohorts",
        "topologies",
    )
    for key in listed:
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])  # type: ignore[call-overload]
    return Snapshot(**kwargs)  # type: ignore[arg-type]
