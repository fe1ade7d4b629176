"""The bundled scenario and a seeded synthetic workload shaped like published GPU traces.

The shape follows what the Philly, Helios and Alibaba PAI traces report: most
jobs ask for one GPU, a heavy tail asks for 8 to 64 as gangs of whole nodes,
durations are log-normal, and arrivals come in diurnal waves with bursts.  The
arrival rate is set so that offered work exceeds the cluster (``load`` > 1):
the interesting questions are about a saturated cluster.

Jobs are spread over the cluster's GPU *kinds* (a node group and one GPU
resource: whole H100s, A100 ``3g.40gb`` slices, time-sliced L4 replicas) so
that each kind is offered work in proportion to its capacity.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from queue_controller.core import Node, PriorityClass, Queue, TeamQuota
from queue_controller.core.model import CPU, GPU, MEMORY, ONE
from queue_controller.sim.scenario.gpus import PRODUCT_LABEL, capacity, gpu_resources, unit_value
from queue_controller.sim.scenario.spec import Faults, Scenario, SimJob

# Total GPUs of a whole-GPU gang: many singletons, a heavy tail up to 64.
GANG_GPUS = ((1, 0.55), (2, 0.08), (4, 0.08), (8, 0.12), (16, 0.08), (32, 0.06), (64, 0.03))
SHARED_UNITS = ((1, 0.6), (2, 0.25), (4, 0.15))
SMALL_GANG_PODS = ((1, 0.75), (2, 0.12), (4, 0.08), (8, 0.05))
MEDIAN_SECONDS = 1800.0
DURATION_SIGMA = 1.3
DAY = 86400.0

DEFAULT_FAULTS = Faults(
    node_failures_per_hour=0.05,
    node_repair_seconds=1800.0,
    bind_failure_probability=0.002,
    foreign_pods_per_hour=1.0,
    foreign_pod_seconds=3600.0,
)


@dataclass(frozen=True, slots=True)
class WorkloadShape:
    arrival_rate_per_hour: float | None = None  # None: derived from ``load``
    max_gang_gpus: int = 64
    load: float = 1.3  # offered GPU work over capacity, over the whole horizon
    high_priority_fraction: float = 0.05


@dataclass(frozen=True, slots=True)
class _Kind:
    """Nodes that look alike, and one GPU resource on them."""

    product: str
    resource: str
    nodes: int
    units_per_node: int
    unit_value: float  # GPU-equivalents per unit
    cpu_milli: int  # allocatable CPU of one node
    memory_milli: int
    node_gpus: float  # GPU-equivalents of one node, over all its GPU resources

    @property
    def capacity(self) -> float:
        return self.nodes * self.units_per_node * self.unit_value


def _kinds(nodes: Sequence[Node]) -> list[_Kind]:
    groups: dict[tuple[str, str, int, int, int, float, float], int] = defaultdict(int)
    for node in nodes:
        product = node.labels.get(PRODUCT_LABEL, "")
        for resource in gpu_resources(node.allocatable):
            units = node.allocatable[resource] // ONE
            key = (
                product,
                resource,
                units,
                node.allocatable.get(CPU, 0),
                node.allocatable.get(MEMORY, 0),
                unit_value(node, resource),
                capacity(node),
            )
            groups[key] += 1
    return [
        _Kind(product, resource, count, units, value, cpu, memory, node_gpus)
        for (product, resource, units, cpu, memory, value, node_gpus), count in sorted(
            groups.items()
        )
    ]


def _pick(rng: random.Random, table: Sequence[tuple[int, float]], limit: int) -> int:
    allowed = [(v, w) for v, w in table if v <= limit] or [(table[0][0], 1.0)]
    return rng.choices([v for v, _ in allowed], [w for _, w in allowed])[0]


def _gang(rng: random.Random, kind: _Kind, max_gang_gpus: int) -> tuple[int, int]:
    """(pods, units of the kind's resource per pod)."""
    per_node = kind.units_per_node
    if kind.unit_value >= 1.0:  # whole GPUs: gangs of whole nodes past one node
        limit = min(max_gang_gpus, kind.nodes * per_node)
        total = _pick(rng, GANG_GPUS, limit)
        if total <= per_node:
            if total in (2, 4) and rng.random() < 0.3:
                return total, 1  # data-parallel workers of one GPU each
            return 1, total
        return math.ceil(total / per_node), per_node
    if kind.resource == GPU:  # time-sliced replicas
        return _pick(rng, SMALL_GANG_PODS, kind.nodes), _pick(rng, SHARED_UNITS, per_node)
    return _pick(rng, SMALL_GANG_PODS, kind.nodes * per_node), 1  # MIG slices


def _duration(rng: random.Random, gpus: float) -> float:
    # Bigger gangs run longer, as in the traces; clipped to a minute .. two days.
    seconds = rng.lognormvariate(math.log(MEDIAN_SECONDS), DURATION_SIGMA)
    return min(max(seconds * (1 + 0.2 * math.log2(max(gpus, 1.0))), 60.0), 2 * DAY)


def _arrivals(rng: random.Random, count: int, horizon: float) -> list[float]:
    """``count`` arrival times on [0, horizon): diurnal waves with bursts."""
    bin_seconds = 60.0
    bins = max(int(horizon / bin_seconds), 1)
    bursts: set[int] = set()
    t = rng.expovariate(1 / (8 * 3600))
    while t < horizon:
        start = int(t / bin_seconds)
        bursts.update(range(start, start + 30))  # half an hour at five times the rate
        t += rng.expovariate(1 / (8 * 3600))
    weights = [
        (1 + 0.5 * math.sin(2 * math.pi * i * bin_seconds / DAY - math.pi / 2))
        * (5.0 if i in bursts else 1.0)
        for i in range(bins)
    ]
    picked = rng.choices(range(bins), weights, k=count)
    return sorted((i + rng.random()) * bin_seconds for i in picked)


def _team_weights(
    queues: Sequence[Queue], quotas: Mapping[str, TeamQuota], resource: str
) -> list[float]:
    weights = []
    for queue in queues:
        quota = quotas.get(queue.team_quota)
        limits = quota.resources.get(resource) if quota else None
        weights.append(float(limits.nominal) if limits else 0.0)
    return weights if sum(weights) > 0 else [1.0] * len(queues)


def generate_workload(
    *,
    seed: int,
    jobs: int,
    queues: Sequence[Queue],
    nodes: Sequence[Node],
    quotas: Sequence[TeamQuota] = (),
    priority_classes: Sequence[PriorityClass] = (),
    shape: WorkloadShape = WorkloadShape(),
) -> tuple[SimJob, ...]:
    """A deterministic workload for ``seed``: same inputs, same jobs."""
    kinds = _kinds(nodes)
    if not kinds or not queues or jobs <= 0:
        return ()
    rng = random.Random(seed)
    # Offer each kind work in proportion to its capacity: weight by capacity over the
    # mean work of one of its jobs (estimated on a side stream, so it is seeded too).
    probe = random.Random(seed + 1)
    weights = []
    for kind in kinds:
        work = 0.0
        for _ in range(400):
            pods, units = _gang(probe, kind, shape.max_gang_gpus)
            gpus = pods * units * kind.unit_value
            work += gpus * _duration(probe, gpus)
        weights.append(kind.capacity / (work / 400))
    quota_by_name = {q.name: q for q in quotas}
    top = max(priority_classes, key=lambda p: p.value, default=None)
    drafts = []
    total_work = 0.0
    for _ in range(jobs):
        kind = rng.choices(kinds, weights)[0]
        pods, units = _gang(rng, kind, shape.max_gang_gpus)
        gpus = pods * units * kind.unit_value
        duration = _duration(rng, gpus)
        queue = rng.choices(queues, _team_weights(queues, quota_by_name, kind.resource))[0]
        high = top is not None and rng.random() < shape.high_priority_fraction
        total_work += gpus * duration
        drafts.append((kind, pods, units, duration, queue, top.name if high and top else ""))
    capacity = sum(kind.capacity for kind in kinds)
    if shape.arrival_rate_per_hour:
        horizon = jobs / shape.arrival_rate_per_hour * 3600
    else:
        horizon = total_work / (shape.load * capacity)
    times = _arrivals(rng, jobs, horizon)
    out = []
    for index, ((kind, pods, units, duration, queue, priority), arrival) in enumerate(
        zip(drafts, times, strict=True)
    ):
        # CPU and memory in proportion to the pod's part of the node's GPUs, so that
        # they never run out before the GPUs do.
        share = units * kind.unit_value / kind.node_gpus
        request = {
            kind.resource: str(units),
            CPU: f"{max(kind.cpu_milli * 8 // 10 * share, 100):.0f}m",
            MEMORY: f"{max(int(kind.memory_milli // ONE * 8 // 10 * share), 2**28)}",
        }
        selector = {PRODUCT_LABEL: kind.product} if kind.product else {}
        out.append(
            SimJob(
                namespace=queue.namespace,
                name=f"job-{index:05d}",
                queue=queue.name,
                arrival=round(arrival, 3),
                pods=pods,
                request=request,
                duration=round(duration, 1),
                priority_class=priority,
                node_selector=selector,
            )
        )
    return tuple(out)


def _data(name: str) -> Path:
    return Path(str(resources.files("queue_controller.data").joinpath(name)))


def bundled_scenario(*, seed: int = 7, jobs: int = 5000) -> Scenario:
    """64 nodes (8xH100, 8xA100 in MIG, 4xL4 time-sliced), four teams in one cohort."""
    from queue_controller.sim.scenario.inputs import load_cluster, load_queues

    cluster, teams = _data("sim-cluster.yaml"), _data("sim-queues.yaml")
    nodes = load_cluster(cluster)
    queues, quotas, priority_classes, cohorts = load_queues([teams])
    workload = generate_workload(
        seed=seed,
        jobs=jobs,
        queues=queues,
        nodes=nodes,
        quotas=quotas,
        priority_classes=priority_classes,
    )
    return Scenario(
        name="bundled",
        nodes=nodes,
        queues=queues,
        quotas=quotas,
        jobs=workload,
        priority_classes=priority_classes,
        cohorts=cohorts,
        sources={
            "cluster": "bundled sim-cluster.yaml (64 nodes)",
            "queues": "bundled sim-queues.yaml (4 teams, cohort gpu-pool)",
            "workload": f"generated: seed={seed}, jobs={jobs}",
        },
    )
