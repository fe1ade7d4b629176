"""What a simulation runs: a cluster, its Queues and TeamQuotas, and a workload.

The cluster and the quotas are the core's own value types, built from the same
files a user applies to a real cluster, so the simulator and the controller
decide over identical objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from queue_controller.core import (
    Cohort,
    Container,
    Node,
    PodTemplate,
    PriorityClass,
    Queue,
    TeamQuota,
)
from queue_controller.core.model import Topology, TopologyRequest, is_extended
from queue_controller.sim.scenario.dra import DraCluster


@dataclass(frozen=True, slots=True)
class SimJob:
    """One gang of the workload: ``pods`` identical pods that must all run at once."""

    namespace: str
    name: str
    queue: str
    arrival: float  # seconds from the start of the simulation
    pods: int
    request: Mapping[str, str]  # per pod, as Kubernetes quantities ("8", "96", "800Gi")
    duration: float  # seconds of work once every member runs
    priority_class: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # What its one pod set asks of its Queue's Topology (PodSet.topology); None: nothing.
    topology: TopologyRequest | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def template(self) -> PodTemplate:
        """The pod template a Job with these requests would carry.

        Extended resources (GPUs, MIG slices) get limits equal to requests, as
        the API server insists.
        """
        limits = {r: q for r, q in self.request.items() if is_extended(r)}
        container = Container(name="worker", requests=dict(self.request), limits=limits)
        return PodTemplate(
            containers=(container,),
            node_selector=dict(self.node_selector),
            priority_class_name=self.priority_class,
        )


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    quotas: tuple[TeamQuota, ...]
    jobs: tuple[SimJob, ...]
    priority_classes: tuple[PriorityClass, ...] = ()
    # Cohort objects: where one enables fair sharing, the core orders its borrowers
    # and chooses its victims by share (core/quota/fairshare.py).
    cohorts: tuple[Cohort, ...] = ()
    # The Topology objects Queues name (Queue.topology_name); the core places by them.
    topologies: tuple[Topology, ...] = ()
    # `--dra`: whole GPUs asked and offered through DRA (sim.dra); None: nvidia.com/gpu.
    dra: DraCluster | None = None
    # Where each part came from, for the report ("bundled", a file name, "--generate seed=7").
    sources: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Faults:
    """Fault injection; all off by default."""

    node_failures_per_hour: float = 0.0  # across the whole cluster
    node_repair_seconds: float = 1800.0
    bind_failure_probability: float = 0.0  # per admitted member pod and attempt
    bind_retry_seconds: float = 60.0
    foreign_pods_per_hour: float = 0.0  # pods outside any queue that take GPUs
    foreign_pod_seconds: float = 3600.0  # mean lifetime of such a pod
