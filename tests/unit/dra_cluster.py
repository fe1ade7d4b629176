"""Snapshots with DRA GPUs, for the core's DRA tests: nodes, slices, classes, claims."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from queue_controller.core.model.dra import (
    AllocatedDevice,
    ClaimTemplate,
    Device,
    DeviceClass,
    DeviceRequest,
    ResourceClaim,
    ResourceSlice,
)
from queue_controller.core.model.objects import (
    Container,
    Node,
    PodClaim,
    PodTemplate,
    Queue,
    ResourceQuota,
    Snapshot,
    TeamQuota,
    Workload,
    one_pod_set,
)

NV = "gpu.nvidia.com"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100 SXM4 80GB"
GPU_CLASS = DeviceClass(
    NV, (f'device.driver == "{NV}" && device.attributes["{NV}"].type == "gpu"',)
)
NAMESPACE = "team-a"


def product_is(product: str) -> str:
    return f'device.attributes["{NV}"].productName == "{product}"'


def gpus(node: str, products: Sequence[str]) -> tuple[Device, ...]:
    """A node's GPUs as NVIDIA's driver publishes them: each with its own uuid and index."""
    return tuple(
        Device.from_slice(
            NV,
            f"gpu-{i}",
            {
                "type": {"string": "gpu"},
                "productName": {"string": product},
                "uuid": {"string": f"GPU-{node}-{i}"},
                "index": {"int": i},
            },
            {"memory": {"value": "80Gi"}},
        )
        for i, product in enumerate(products)
    )


def node(name: str, **allocatable: int) -> Node:
    base = {"cpu": 64_000, "memory": 512 * 2**30 * 1000, "pods": 110_000}
    return Node(name, {**base, **allocatable}, conditions={"Ready": "True"})


def cluster(
    layout: Mapping[str, Sequence[str]],
) -> tuple[tuple[Node, ...], tuple[ResourceSlice, ...]]:
    """Nodes and their slices: node name -> the product of each of its GPUs."""
    nodes = tuple(node(name) for name in layout)
    slices = tuple(
        ResourceSlice(f"{name}-{NV}", NV, name, name, gpus(name, products))
        for name, products in layout.items()
    )
    return nodes, slices


def template(name: str, *requests: DeviceRequest) -> ClaimTemplate:
    return ClaimTemplate(NAMESPACE, name, requests)


def exactly(name: str, count: int, *selectors: str, device_class: str = NV) -> DeviceRequest:
    return DeviceRequest(name, device_class, count, selectors=selectors)


def held(claim: str, node: str, devices: Sequence[int], pod: str = "") -> ResourceClaim:
    """An allocated claim holding ``devices`` (by index) of ``node``."""
    return ResourceClaim(
        NAMESPACE,
        claim,
        (),
        tuple(AllocatedDevice("gpus", NV, node, f"gpu-{i}") for i in devices),
        (f"{NAMESPACE}/{pod}",) if pod else (),
    )


def job(
    name: str,
    *claims: PodClaim,
    members: int = 2,
    created: float = 1.0,
    queue: str = "q",
    requests: dict[str, str] | None = None,
) -> Workload:
    limits = {k: v for k, v in (requests or {}).items() if "/" in k}
    pod = PodTemplate(
        (Container("main", {"cpu": "1", **(requests or {})}, limits),),
        resource_claims=claims,
    )
    return Workload(
        NAMESPACE,
        name,
        queue,
        one_pod_set(pod, count=members, path="spec.template.spec"),
        "Job",
        created=created,
    )


def from_template(name: str) -> PodClaim:
    return PodClaim("gpus", template_name=name)


def snapshot(
    layout: Mapping[str, Sequence[str]],
    *workloads: Workload,
    templates: Sequence[ClaimTemplate] = (),
    claims: Sequence[ResourceClaim] = (),
    classes: Sequence[DeviceClass] = (GPU_CLASS,),
    quota: dict[str, int] | None = None,
    extra_nodes: Sequence[Node] = (),
) -> Snapshot:
    nodes, slices = cluster(layout)
    limits = quota if quota is not None else {NV: 1_000}
    return Snapshot(
        nodes=nodes + tuple(extra_nodes),
        workloads=workloads,
        queues=(Queue(NAMESPACE, "q", "team-a"),),
        quotas=(TeamQuota("team-a", {r: ResourceQuota(n * 1000) for r, n in limits.items()}),),
        device_classes=tuple(classes),
        resource_slices=slices,
        resource_claims=tuple(claims),
        claim_templates=tuple(templates),
        now=100.0,
    )
