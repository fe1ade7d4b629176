"""Seeded synthetic GPU clusters and pending gangs for the admission benchmark.

Pools, as the issue asks: 8xH100 whole GPUs, 8xA100 in MIG mixed mode
(mig-parted ``all-balanced``: per GPU 2x1g.10gb + 2g.20gb + 3g.40gb) and
4xL4 time-sliced with 4 replicas (advertised as ``nvidia.com/gpu.shared``).
About 40% of the cluster already runs pods of realistic shapes, every node
runs a small DaemonSet pod, and a few nodes are tainted, cordoned or down.

Gang sizes run from 1 to 64 pods with many small gangs and a heavy tail;
70% of gangs pin a GPU product with a nodeSelector, as teams do.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from queue_controller.core import (
    BoundPod,
    Container,
    Node,
    Ordering,
    PodTemplate,
    PriorityClass,
    Queue,
    ResourceQuota,
    Snapshot,
    Taint,
    TeamQuota,
    Toleration,
    Workload,
    one_pod_set,
)

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG = ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb")
GI = 2**30 * 1000  # one GiB in milli-units

POOLS = {
    # name: (share of nodes, product label, allocatable)
    "h100": (0.5, "NVIDIA-H100-80GB-HBM3", {GPU: 8, "cpu": 190, "memory": 1900, "pods": 110}),
    "a100": (
        0.3,
        "NVIDIA-A100-SXM4-80GB",
        {MIG[0]: 16, MIG[1]: 8, MIG[2]: 8, "cpu": 126, "memory": 990, "pods": 110},
    ),
    "l4": (0.2, "NVIDIA-L4", {SHARED: 16, "cpu": 46, "memory": 180, "pods": 110}),
}
# Per-pod shapes for each pool: (resource, amount, cpu, memory GiB).
SHAPES = {
    "h100": [(GPU, 1, 12, 100), (GPU, 2, 24, 200), (GPU, 4, 48, 400), (GPU, 8, 96, 800)],
    "a100": [(MIG[0], 1, 4, 32), (MIG[1], 1, 8, 64), (MIG[2], 1, 16, 128), (MIG[0], 2, 8, 64)],
    "l4": [(SHARED, 1, 4, 16), (SHARED, 2, 8, 32), (SHARED, 4, 12, 48)],
}
# Gang size distribution: many singletons, a heavy tail up to 64.
GANG_SIZES = [(1, 0.50), (2, 0.15), (4, 0.12), (8, 0.10), (16, 0.07), (32, 0.04), (64, 0.02)]


def _milli(resources: dict[str, int]) -> dict[str, int]:
    return {r: a * (GI if r == "memory" else 1000) for r, a in resources.items()}


@dataclass(frozen=True)
class Cluster:
    snapshot: Snapshot
    running_pods: int


def _nodes(count: int, rng: random.Random) -> list[tuple[Node, str]]:
    out = []
    pools = list(POOLS)
    weights = [POOLS[p][0] for p in pools]
    for i in range(count):
        pool = rng.choices(pools, weights)[0]
        _, product, allocatable = POOLS[pool]
        roll = rng.random()
        out.append(
            (
                Node(
                    name=f"{pool}-{i:05d}",
                    allocatable=_milli(allocatable),
                    labels={
                        "kubernetes.io/hostname": f"{pool}-{i:05d}",
                        "nvidia.com/gpu.product": product,
                        "topology.kubernetes.io/zone": f"zone-{i % 4}",
                        "pool": pool,
                        **({"nvidia.com/mig.config.state": "success"} if pool == "a100" else {}),
                    },
                    taints=(Taint("nvidia.com/gpu-unhealthy", "NoSchedule"),)
                    if roll < 0.01
                    else (),
                    unschedulable=0.01 <= roll < 0.015,
                    conditions={"Ready": "False" if 0.015 <= roll < 0.02 else "True"},
                ),
                pool,
            )
        )
    return out


def _running(nodes: list[tuple[Node, str]], rng: random.Random) -> list[BoundPod]:
    pods = []
    for node, pool in nodes:
        free = dict(node.allocatable)
        daemon = {"cpu": 500, "memory": GI, "pods": 1000}
        pods.append(BoundPod("kube-system", f"agent-{node.name}", node.name, daemon))
        for r, a in daemon.items():
            free[r] -= a
        # Fill about 40% of the accelerators with running work.
        for j in range(8):
            if rng.random() > 0.4:
                continue
            resource, amount, cpu, mem = rng.choice(SHAPES[pool])
            request = _milli({resource: amount, "cpu": cpu, "memory": mem}) | {"pods": 1000}
            if all(free.get(r, 0) >= a for r, a in request.items()):
                for r, a in request.items():
                    free[r] -= a
                pods.append(BoundPod("running", f"{node.name}-w{j}", node.name, request))
    return pods


def _quotas(nodes: list[tuple[Node, str]]) -> list[TeamQuota]:
    """Eight teams in two cohorts whose nominal quotas add up to the cluster."""
    total: dict[str, int] = {}
    for node, _ in nodes:
        for r, a in node.allocatable.items():
            if r in (GPU, SHARED, *MIG):
                total[r] = total.get(r, 0) + a
    teams = []
    for t in range(8):
        resources = {
            r: ResourceQuota(
                nominal=(a // 8 // 1000) * 1000,
                borrowing_limit=None if t % 3 else (a // 16 // 1000) * 1000,
                lending_limit=None if t % 4 else (a // 16 // 1000) * 1000,
            )
            for r, a in total.items()
        }
        teams.append(TeamQuota(f"team-{t}", resources, cohort=f"cohort-{t % 2}"))
    return teams


def _template(pool: str, size: int, rng: random.Random) -> PodTemplate:
    shapes = SHAPES[pool]
    # Big gangs are made of big pods.
    resource, amount, cpu, mem = shapes[-1] if size >= 16 and pool == "h100" else rng.choice(shapes)
    selector = {"nvidia.com/gpu.product": POOLS[pool][1]} if rng.random() < 0.7 else {}
    return PodTemplate(
        containers=(
            Container(
                "main",
                requests={"cpu": str(cpu), "memory": f"{mem}Gi"},
                limits={resource: str(amount)},
            ),
        ),
        node_selector=selector,
        tolerations=(Toleration("nvidia.com/gpu-unhealthy", "Exists"),)
        if rng.random() < 0.02
        else (),
        priority_class_name=rng.choice(["", "", "batch-high", "batch-low"]),
    )


def _gangs(count: int, queues: list[Queue], rng: random.Random) -> list[Workload]:
    sizes = [s for s, _ in GANG_SIZES]
    weights = [w for _, w in GANG_SIZES]
    pools = list(POOLS)
    pool_weights = [POOLS[p][0] for p in pools]
    out = []
    for i in range(count):
        size = rng.choices(sizes, weights)[0]
        pool = "h100" if size >= 16 else rng.choices(pools, pool_weights)[0]
        queue = rng.choice(queues)
        out.append(
            Workload(
                kind="Job",
                namespace=queue.namespace,
                name=f"job-{i:06d}",
                queue=queue.name,
                pod_sets=one_pod_set(_template(pool, size, rng), count=size),
                created=float(rng.randrange(0, 86_400)),
            )
        )
    return out


def make_cluster(nodes: int, gangs: int, *, seed: int = 1) -> Cluster:
    rng = random.Random(seed)
    node_pools = _nodes(nodes, rng)
    running = _running(node_pools, rng)
    quotas = _quotas(node_pools)
    queues = [
        Queue(
            f"team-{t}",
            "training",
            f"team-{t}",
            Ordering.STRICT_FIFO if t == 7 else Ordering.BEST_EFFORT_FIFO,
        )
        for t in range(8)
    ]
    snapshot = Snapshot(
        nodes=tuple(n for n, _ in node_pools),
        pods=tuple(running),
        workloads=tuple(_gangs(gangs, queues, rng)),
        queues=tuple(queues),
        quotas=tuple(quotas),
        priority_classes=(PriorityClass("batch-high", 1000), PriorityClass("batch-low", 100)),
    )
    return Cluster(snapshot, len(running))
