"""Hypothesis strategies: random GPU clusters, quotas with cohorts, queues and gangs."""

from __future__ import annotations

from hypothesis import strategies as st

from queue_controller.core import (
    BoundPod,
    Node,
    Ordering,
    PodTemplate,
    PriorityClass,
    Queue,
    ResourceQuota,
    Taint,
    TeamQuota,
    Toleration,
    Workload,
    one_pod_set,
)
from queue_controller.core.model.objects import Container

GPU = "nvidia.com/gpu"
MIG_SMALL = "nvidia.com/mig-1g.10gb"
MIG_BIG = "nvidia.com/mig-3g.40gb"
SHARED = "nvidia.com/gpu.shared"
BROKEN = Taint("gpu", "NoSchedule", "broken")

POOLS = {
    "h100": {GPU: 8, "cpu": 96, "pods": 110},
    "a100-mig": {MIG_SMALL: 7, MIG_BIG: 2, "cpu": 64, "pods": 110},
    "l4": {SHARED: 16, "cpu": 32, "pods": 110},
    "cpu": {"cpu": 32, "pods": 8},
}
POD_SHAPES = {
    # 16 GPUs or 48 CPUs per pod: more than one node of the pool holds, so the
    # index's "hopeless" views (and their explanations) are exercised too.
    "h100": [(GPU, n) for n in (1, 2, 3, 4, 8, 16)],
    "a100-mig": [(MIG_SMALL, 1), (MIG_SMALL, 2), (MIG_BIG, 1)],
    "l4": [(SHARED, 1), (SHARED, 4)],
    "cpu": [("cpu", 2), ("cpu", 48)],
}


@st.composite
def nodes(draw: st.DrawFn) -> list[Node]:
    count = draw(st.integers(1, 10))
    out = []
    for i in range(count):
        pool = draw(st.sampled_from(sorted(POOLS)))
        labels = {"pool": pool, "zone": draw(st.sampled_from(["a", "b"]))}
        if pool == "a100-mig":
            labels["nvidia.com/mig.config.state"] = draw(
                st.sampled_from(["success", "success", "pending"])
            )
        out.append(
            Node(
                name=f"{pool}-{i}",
                allocatable={k: v * 1000 for k, v in POOLS[pool].items()},
                labels=labels,
                taints=(BROKEN,) if draw(st.integers(0, 9)) == 0 else (),
                unschedulable=draw(st.integers(0, 14)) == 0,
                conditions={"Ready": "False" if draw(st.integers(0, 14)) == 0 else "True"},
            )
        )
    return out


@st.composite
def bound_pods(draw: st.DrawFn, cluster: list[Node]) -> list[BoundPod]:
    """Pods already running, never more than a node holds."""
    out = []
    for node in cluster:
        pool = node.labels["pool"]
        free = dict(node.allocatable)
        for j in range(draw(st.integers(0, 3))):
            resource, amount = draw(st.sampled_from(POD_SHAPES[pool]))
            request = {resource: amount * 1000, "pods": 1000}
            if all(free.get(r, 0) >= a for r, a in request.items()):
                for r, a in request.items():
                    free[r] -= a
                phase = draw(st.sampled_from(["Running", "Running", "Succeeded"]))
                out.append(BoundPod("other", f"{node.name}-p{j}", node.name, request, phase))
    return out


@st.composite
def quotas(draw: st.DrawFn) -> list[TeamQuota]:
    """Quotas that often share a cohort, with limits small enough to bind."""
    out = []
    for i in range(draw(st.integers(1, 4))):
        resources = {}
        names = draw(st.sets(st.sampled_from([GPU, GPU, MIG_SMALL, SHARED, "cpu"]), max_size=3))
        for resource in names:
            nominal = draw(st.sampled_from([0, 1, 2, 4, 8, 16, 24]))
            lending = draw(st.one_of(st.none(), st.integers(0, nominal)))
            borrowing = draw(st.sampled_from([None, None, 0, 1, 2, 4, 8]))
            resources[resource] = ResourceQuota(
                nominal * 1000,
                None if borrowing is None else borrowing * 1000,
                None if lending is None else lending * 1000,
            )
        cohort = draw(st.sampled_from(["", "pool-a", "pool-a", "pool-a", "pool-b"]))
        out.append(TeamQuota(f"team-{i}", resources, cohort))
    return out


def queues_for(team_quotas: list[TeamQuota], orderings: list[Ordering]) -> list[Queue]:
    out = [
        Queue("ns", f"q{i}", quota.name, orderings[i % len(orderings)])
        for i, quota in enumerate(team_quotas)
    ]
    out.append(Queue("ns", "dangling", "no-such-quota"))
    return out


PRIORITIES = [PriorityClass("high", 100), PriorityClass("low", 1)]


@st.composite
def pod_template(draw: st.DrawFn) -> PodTemplate:
    pool = draw(st.sampled_from(sorted(POOLS)))
    resource, amount = draw(st.sampled_from(POD_SHAPES[pool]))
    limits = {resource: str(amount)} if resource != "cpu" else {}
    requests = {"cpu": str(amount)} if resource == "cpu" else {"cpu": "1"}
    selector = draw(st.sampled_from([{}, {}, {"zone": "a"}, {"pool": pool}]))
    tolerations = (Toleration("gpu", "Exists"),) if draw(st.booleans()) else ()
    priority = draw(st.sampled_from(["", "", "high", "low"]))
    return PodTemplate(
        containers=(Container("main", requests=requests, limits=limits),),
        node_selector=selector,
        tolerations=tolerations,
        priority_class_name=priority,
    )


@st.composite
def pending_gangs(draw: st.DrawFn, queue_names: list[str], prefix: str = "g") -> list[Workload]:
    # Teams submit many jobs from a few templates: drawing from a small pool makes
    # gangs of one shape recur, which is what the index's caches must get right.
    templates = draw(st.lists(pod_template(), min_size=1, max_size=5))
    out = []
    for i in range(draw(st.integers(1, 16))):
        members = draw(st.integers(1, 6))
        out.append(
            Workload(
                kind="Job",
                namespace="ns",
                name=f"{prefix}{i}",
                queue=draw(st.sampled_from([*queue_names, "missing"])),
                pod_sets=one_pod_set(
                    draw(st.sampled_from(templates)),
                    count=members + draw(st.sampled_from([0, 0, 0, 1])),
                    min_count=members,
                ),
                created=float(draw(st.integers(0, 5))),
            )
        )
    return out
