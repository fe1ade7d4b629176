"""The mutable state of one gang during one policy's run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from queue_controller.core import (
    BoundPod,
    PodTemplate,
    Queue,
    TeamQuota,
    Workload,
    WorkloadPhase,
    one_pod_set,
)
from queue_controller.core.model import GPU, ONE, Reservation, RuntimeEstimate
from queue_controller.core.model.reservations import UNKNOWN_RUNTIME
from queue_controller.core.rules import pod_request
from queue_controller.errors import InvalidSpecError
from queue_controller.sim.scenario.dra import DraCluster
from queue_controller.sim.scenario.spec import SimJob

# The simulator replays batch/v1 Jobs: a bad template is named where a Job keeps it.
JOB_TEMPLATE = "spec.template.spec"


class Phase(Enum):
    WAITING = "Waiting"  # not arrived yet
    PENDING = "Pending"  # queued, not admitted (or, per-pod, pods not all bound)
    ADMITTED = "Admitted"  # admitted: its members are binding, or bound
    DONE = "Done"
    DEACTIVATED = "Deactivated"  # evicted past the queue's backoffLimit
    INVALID = "Invalid"


@dataclass(eq=False, slots=True)
class JobState:
    spec: SimJob
    template: PodTemplate
    request: Mapping[str, int]  # per pod, milli-units; empty when invalid
    team: str
    shape: tuple[object, ...]  # equal for jobs whose pods are interchangeable
    error: str = ""
    phase: Phase = Phase.WAITING
    attempt: int = 0  # bumped on every eviction: events of older attempts are ignored
    requeue_count: int = 0
    requeue_at: float | None = None
    admitted_at: float = 0.0
    placement: dict[str, int] = field(default_factory=dict)  # planned (gang-fit)
    bound: Counter[str] = field(default_factory=Counter)  # node -> bound pods
    bound_count: int = 0  # the sum of ``bound``
    gpus_on: dict[str, float] = field(default_factory=dict)  # node -> GPU-eq of one pod
    running: int = 0
    held_gpus: float = 0.0
    fully_placed: bool = False
    settled: bool = False  # admitted and merged with its like for the core (engine)
    placed_once: bool = False
    last_progress: float = 0.0
    deadlocked: bool = False
    reason: str = ""  # the last pending reason journalled
    # Shown to the core as itself, its bound pods named, never merged with its like:
    # its team's gangs may be preempted, and the core must see what each one holds.
    alone: bool = False
    # Pending: the room it holds while the gangs it preempted terminate (pod set ->
    # node -> members), as the PodGroup's status.nominatedPlacement.
    nominated: dict[str, dict[str, int]] = field(default_factory=dict)
    # Node -> the sum of (GPU-equivalents x bind time) of its bound pods there: the
    # GPU time the attempt ran, should a preemption throw it away.
    bind_weight: dict[str, float] = field(default_factory=dict)
    # Reservation with backfill (sim.engine.reserving): the runtime estimate the core
    # reads, since when it has waited NoNodeFit or Reserved, and the reservation it
    # holds (PodGroup status.reservedPlacement and reservedStart).
    runtime: RuntimeEstimate = UNKNOWN_RUNTIME
    no_fit_since: float | None = None
    reservation: Reservation | None = None
    placed_at: float | None = None  # when its members were first all bound
    workload: Workload | None = None
    pods_of_core: tuple[BoundPod, ...] | None = None
    key: str = ""  # "namespace/name", kept: it is looked up at every turn

    def __post_init__(self) -> None:
        self.key = self.spec.key

    @property
    def pods(self) -> int:
        return self.spec.pods

    def core_workload(self) -> Workload:
        """The gang as the core sees it; rebuilt only when what the core reads changes."""
        if self.workload is None:
            self.workload = self._build()
        return self.workload

    def changed(self) -> None:
        self.workload = None
        self.pods_of_core = None

    def core_pods(self) -> tuple[BoundPod, ...]:
        """An ``alone`` gang's bound pods, one summed pod per node, named as its own.

        Only these gangs are shown pod by pod: the rest of what nodes hold comes to
        the core as one anonymous pod per node (NodeBook.usage).
        """
        if self.pods_of_core is None:
            key = f"Job/{self.spec.namespace}/{self.spec.name}"
            # Whole GPUs asked through a claim are held by the claim, not the pod.
            claimed = bool(self.template.resource_claims)
            self.pods_of_core = tuple(
                BoundPod(
                    namespace=self.spec.namespace,
                    name=self.core_pod(node),
                    node_name=node,
                    request={
                        r: a * count for r, a in self.request.items() if not (claimed and r == GPU)
                    },
                    workload=key,
                )
                for node, count in sorted(self.bound.items())
                if count
            )
        return self.pods_of_core

    def core_pod(self, node: str) -> str:
        """The name of the one pod its bound members on ``node`` are shown as."""
        return f"{self.spec.name}@{node}"

    def _build(self) -> Workload:
        admitted = self.phase is Phase.ADMITTED
        # Members not bound yet still hold their planned place; bound ones are counted
        # on their node already (the engine hands the core node usage, not pods).
        waiting = {
            node: count - self.bound.get(node, 0)
            for node, count in self.placement.items()
            if count > self.bound.get(node, 0)
        }
        if self.alone:
            # Its bound members come as one summed pod per node (core_pods), which the
            # core counts as one arrived member: the plan names that one plus those
            # still to bind, so that the core finds exactly the unbound ones waiting.
            waiting = {
                node: count - self.bound.get(node, 0) + (1 if self.bound.get(node) else 0)
                for node, count in self.placement.items()
            }
        return Workload(
            namespace=self.spec.namespace,
            name=self.spec.name,
            queue=self.spec.queue,
            pod_sets=tuple(
                replace(pod_set, topology=self.spec.topology)
                for pod_set in one_pod_set(self.template, count=self.spec.pods, path=JOB_TEMPLATE)
            ),
            kind="Job",
            phase=WorkloadPhase.ADMITTED if admitted else WorkloadPhase.PENDING,
            created=self.spec.arrival,
            requeue_at=self.requeue_at,
            requeue_count=self.requeue_count,
            placement=waiting if admitted else {},
            nominated={} if admitted else self.nominated,
            # Admission fair sharing charges an entry penalty until its Queue's next sample.
            admitted_at=self.admitted_at if admitted else None,
            runtime=self.runtime,
            no_fit_since=None if admitted else self.no_fit_since,
            reservation=None if admitted else self.reservation,
        )


def prepare_jobs(
    jobs: Sequence[SimJob],
    queues: Sequence[Queue],
    quotas: Sequence[TeamQuota],
    dra: DraCluster | None = None,
) -> list[JobState]:
    """One state per job; templates and requests are parsed once, shared by equal jobs.

    With ``dra``, a job whose whole GPUs go through DRA keeps its request (the
    simulator's book counts ``nvidia.com/gpu``) but shows the core a template
    that asks them through a claim.
    """
    team_of = {(q.namespace, q.name): q.team_quota for q in queues}
    known = {q.name for q in quotas}
    templates: dict[tuple[object, ...], tuple[PodTemplate, Mapping[str, int], str]] = {}
    out = []
    for job in jobs:
        key = (
            tuple(sorted(job.request.items())),
            tuple(sorted(job.node_selector.items())),
            job.priority_class,
        )
        if key not in templates:
            template = job.template()
            try:
                parsed = pod_request(template)
                if dra is not None and dra.asks_devices(job.request, job.node_selector):
                    template = dra.template(template, parsed.get(GPU, 0) // ONE)
                templates[key] = (template, parsed, "")
            except InvalidSpecError as invalid:
                why = f"{JOB_TEMPLATE}.{invalid.field}: {invalid.detail}"
                templates[key] = (template, {}, why)
        template, request, problem = templates[key]
        team = team_of.get((job.namespace, job.queue), "")
        out.append(
            JobState(
                spec=job,
                template=template,
                request=request,
                team=team if team in known else "",
                # Topology is left out: most uses of the shape (settled gangs merged for
                # the quota, a cycle's necessary conditions, node eligibility) are about
                # quota or single nodes, which a topology request does not change; the
                # one that is not adds it (Admission._within_quota).
                shape=key,
                error=problem,
            )
        )
    return out
