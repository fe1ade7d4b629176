"""Frozen value types the core reasons about.

These are deliberately close to the Kubernetes objects they come from, but
carry only what admission needs.  Adapters (the dump reader, the controller)
build them; the core never sees a raw API object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from queue_controller.core.model.quantity import QuantityInput
from queue_controller.core.model.reservations import (
    RESERVATION_OFF,
    UNKNOWN_RUNTIME,
    Reservation,
    ReservationPolicy,
    RuntimeEstimate,
)
from queue_controller.core.model.resources import Resources

if TYPE_CHECKING:  # dra imports this module: its types are named only in annotations
    from queue_controller.core.model.dra import (
        ClaimTemplate,
        DeviceClass,
        ResourceClaim,
        ResourceSlice,
    )


def _items(mapping: Mapping[str, object]) -> frozenset[tuple[str, object]]:
    return frozenset(mapping.items())


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    effect: str
    value: str = ""


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty tolerates every effect


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Expressions within a term are ANDed; the terms of an affinity are ORed."""

    match_expressions: tuple[SelectorRequirement, ...] = ()
    match_fields: tuple[SelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Container:
    """A container's declared resources, still as written (quantities unparsed).

    Keeping them raw lets the core report a bad quantity as an invalid
    workload, naming the container and resource, instead of failing the cycle.
    """

    name: str
    requests: Mapping[str, QuantityInput] = field(default_factory=dict)
    limits: Mapping[str, QuantityInput] = field(default_factory=dict)
    restart_policy: str = ""  # "Always" on an init container makes it a sidecar

    def __hash__(self) -> int:
        # By content, mappings included, so a template can key a memo (its request).
        return hash((self.name, _items(self.requests), _items(self.limits), self.restart_policy))


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``: a DRA claim it uses, by either name.

    ``claim_name`` is an existing ResourceClaim (it may be shared by many pods);
    ``template_name`` a ResourceClaimTemplate, from which each pod gets its own.
    """

    name: str
    claim_name: str = ""
    template_name: str = ""


@dataclass(frozen=True, slots=True)
class PodTemplate:
    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...] = ()
    overhead: Mapping[str, QuantityInput] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # None: no required node affinity.  Terms are ORed.
    required_affinity: tuple[NodeSelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    priority_class_name: str = ""
    resource_claims: tuple[PodClaim, ...] = ()  # DRA claims its pods use
    # The hash, computed once: every cycle looks up every pending gang's request by it.
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", self._content_hash())
        assert self._hash is not None
        return self._hash

    def _content_hash(self) -> int:
        return hash(
            (
                self.containers,
                self.init_containers,
                _items(self.overhead),
                _items(self.node_selector),
                self.required_affinity,
                self.tolerations,
                self.priority_class_name,
                self.resource_claims,
            )
        )


@dataclass(frozen=True, slots=True)
class UnhealthyGpu:
    """One physical GPU that a health reporter (the node agent, DCGM) took out of service."""

    index: int
    uuid: str = ""
    reason: str = "XidCriticalError"  # XidCriticalError | GPULost | Thermal | Power | Reported
    xids: tuple[int, ...] = ()
    since: float = 0.0  # seconds since the epoch: when it turned unhealthy
    last_seen: float = 0.0  # the fault's latest sighting; the clear period counts from here
    message: str = ""
    # MIG instances carved from it, profile -> count ("1g.10gb": 7), when the
    # reporter read them; otherwise the node's layout is assumed uniform.
    mig_devices: Mapping[str, int] = field(default_factory=dict)
    # "namespace/name" of pods known to use it (DCGM's pod mapping); empty: unknown.
    pods: tuple[str, ...] = ()

    def __hash__(self) -> int:
        return hash((self.index, self.uuid, self.reason, self.xids, self.since, self.pods))


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """What the node's ``GPUHealthy`` condition and health annotation say."""

    unhealthy: tuple[UnhealthyGpu, ...] = ()
    gpu_count: int | None = None  # physical GPUs on the node, when the reporter said
    # The condition says unhealthy but no readable list says which GPUs:
    # every GPU is treated as unhealthy rather than guessing.
    whole_node: bool = False


# Ready condition, cordoned, taints (sorted), allocatable for scheduling, every GPU unhealthy.
NodeFacts = tuple[str | None, bool, tuple[Taint, ...], Resources, bool]


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    # Condition type -> status ("True", "False", "Unknown").
    conditions: Mapping[str, str] = field(default_factory=dict)
    # status.capacity; empty means the same as allocatable.  The device plugin
    # lowers allocatable (not capacity) for GPUs it found unhealthy itself.
    capacity: Resources = field(default_factory=dict)
    gpu_health: GpuHealth | None = None
    # What the placer derives from the node alone, computed once per Node object
    # (see fit.EquivalenceIndex): it reads it for every node at every cycle.
    _facts: NodeFacts | None = field(default=None, init=False, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod that holds node capacity unless it has terminated."""

    namespace: str
    name: str
    node_name: str
    request: Resources
    phase: str = "Running"
    # The key (Workload.key) of the workload this pod belongs to, if any, and
    # its pod set; "" for the pod set: the workload's first.
    workload: str = ""
    pod_set: str = ""
    # Being deleted (metadata.deletionTimestamp): it still holds its node until it is
    # gone, but as a member of its gang it is lost (a NotReady node's evicted pod).
    deleting: bool = False


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None = None  # None: may borrow without limit
    lending_limit: int | None = None  # None: may lend all of its nominal


class ReclaimPolicy(StrEnum):
    """Kueue's ``reclaimWithinCohort``: whom a gang that fits its nominal preempts in the cohort."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"  # borrowing gangs of other quotas with a lower priority
    ANY = "Any"  # borrowing gangs of other quotas, whatever their priority


class WithinPolicy(StrEnum):
    """Kueue's ``withinClusterQueue``: whom a gang preempts in its own TeamQuota."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    # Lower priority, or equal priority and created after the pending gang.
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class BorrowPolicy(StrEnum):
    """Kueue's ``borrowWithinCohort.policy``: may a borrowing gang preempt in the cohort."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"  # gangs of other quotas with a lower priority


@dataclass(frozen=True, slots=True)
class Preemption:
    """A TeamQuota's preemption policy (``spec.preemption``); all Never: nothing is preempted."""

    reclaim_within_cohort: ReclaimPolicy = ReclaimPolicy.NEVER
    within_team_quota: WithinPolicy = WithinPolicy.NEVER
    borrow_within_cohort: BorrowPolicy = BorrowPolicy.NEVER
    # Borrowing, preempt only gangs with a priority at or below this; None: any lower one.
    borrow_max_priority: int | None = None

    @property
    def enabled(self) -> bool:
        return (
            self.reclaim_within_cohort is not ReclaimPolicy.NEVER
            or self.within_team_quota is not WithinPolicy.NEVER
            or self.borrow_within_cohort is not BorrowPolicy.NEVER
        )


@dataclass(frozen=True, slots=True)
class AdmissionFairSharing:
    """A TeamQuota's ``spec.admissionFairSharing``: its Queues take turns by decayed usage.

    Kueue's configuration ``admissionFairSharing`` (usageHalfLifeTime,
    usageSamplingInterval, resourceWeights), here per TeamQuota; see
    core/quota/admissionfair.py.
    """

    usage_half_life_seconds: float
    usage_sampling_interval_seconds: float = 300.0
    # Resource -> weight in thousandths; a resource not named weighs 1 (1000).
    resource_weights: Mapping[str, int] = field(default_factory=dict)


class NodeFailure(StrEnum):
    """What an admitted topology gang does when a node of its plan is lost
    (``spec.onNodeFailure`` of a Queue or TeamQuota; Kueue's TASFailedNodeReplacement)."""

    REPLACE = "Replace"  # move the lost node's members to a node of the same domain
    EVICT = "Evict"  # lose the members; the MembersLost timeout evicts the gang whole


@dataclass(frozen=True, slots=True)
class TeamQuota:
    name: str
    resources: Mapping[str, ResourceQuota]
    cohort: str = ""
    preemption: Preemption = Preemption()
    # What its Queues' gangs do when a node of theirs is lost, unless a Queue says.
    on_node_failure: NodeFailure = NodeFailure.REPLACE
    # spec.fairSharing.weight, in thousandths (1000 = weight 1): a quota's share of
    # what it borrows is divided by it.  Zero: it borrows only what nobody else wants.
    fair_weight: int = 1000
    # None: its Queues are not ordered by usage (Kueue's admissionMode NoAdmissionFairSharing).
    admission_fair_sharing: AdmissionFairSharing | None = None


class FairStrategy(StrEnum):
    """Kueue's fair-sharing preemption strategies: when a victim's quota may give way.

    Shares are the weighted shares of the preemptor's quota *with* the gang, and of
    the victim's quota before and after the victim leaves.
    """

    # The preemptor's share with the gang is at most the victim's quota's share
    # without the victim: the two never swap places.
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    # The preemptor's share with the gang is below the victim's quota's share with
    # the victim: more preemptions, and still no preempting back.
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


@dataclass(frozen=True, slots=True)
class Cohort:
    """A Cohort object: a node of a cohort tree (Kueue's hierarchical cohorts).

    Its TeamQuotas (``spec.cohort``) and child cohorts (``parent``) lend it what
    their lending limits allow; it adds its own ``resources`` and lends within its
    subtree, and towards its parent as its own limits say.  Where the tree's root
    enables fair sharing, borrowing is ordered, and may be preempted, by weighted
    shares (DRF) at every level.
    """

    name: str
    fair_sharing: bool = False
    parent: str = ""  # spec.parentName: "" for a root
    resources: Mapping[str, ResourceQuota] = field(default_factory=dict)
    # spec.fairSharing.weight, in thousandths, as a TeamQuota's.
    fair_weight: int = 1000
    # Kueue's fairSharing.preemptionStrategies, tried in order; Kueue's default.
    preemption_strategies: tuple[FairStrategy, ...] = (
        FairStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        FairStrategy.LESS_THAN_INITIAL_SHARE,
    )


class Ordering(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


@dataclass(frozen=True, slots=True)
class RequeuePolicy:
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 3600
    backoff_limit: int | None = None  # None: requeue forever


@dataclass(frozen=True, slots=True)
class Queue:
    namespace: str
    name: str
    team_quota: str
    ordering: Ordering = Ordering.BEST_EFFORT_FIFO
    pods_ready_timeout_seconds: int | None = None
    requeue: RequeuePolicy = RequeuePolicy()
    evict_on_gpu_unhealthy: bool = True  # False: mark the gang and let it run
    evict_idle: bool = False
    topology_name: str = ""  # spec.topologyName: the Topology its gangs may ask for
    # spec.fairSharing.weight in thousandths (Kueue's LocalQueue weight): under its
    # TeamQuota's admission fair sharing, its decayed usage is divided by it.
    fair_weight: int = 1000
    # status.fairSharing.admissionFairSharingStatus: the decayed usage (resource ->
    # milli-units) as of ``consumed_at`` (seconds since the epoch); None: never sampled.
    # Not compared: a Queue keys memos by its spec, and a mapping cannot be hashed.
    consumed: Mapping[str, float] = field(default_factory=dict, compare=False)
    consumed_at: float | None = None
    reservation: ReservationPolicy = RESERVATION_OFF
    # spec.onNodeFailure; None: its TeamQuota's (core/cycle/replacement.py).
    on_node_failure: NodeFailure | None = None


class TopologyMode(StrEnum):
    """How a pod set's members are kept together (Kueue's TAS annotations)."""

    REQUIRED = "Required"  # every member in one domain of the level, or not admitted
    PREFERRED = "Preferred"  # the narrowest domain that holds it, else the fewest domains
    UNCONSTRAINED = "Unconstrained"  # anywhere in the topology; only slices bind it


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """What a pod set asks of its Queue's Topology, as written on the workload.

    Levels are node label keys; they are checked against the Topology in the cycle,
    which alone knows the Queue's Topology.  ``field`` names where the request was
    written, so that a message about it points there.
    """

    mode: TopologyMode = TopologyMode.UNCONSTRAINED
    level: str = ""  # a Topology level's node label; "" when unconstrained
    slice_size: int = 0  # 0: no slices
    slice_level: str = ""  # every slice_size consecutive members (by index) in one domain
    field: str = ""
    # Layered slices (Kueue's podset-slice-required-topology-constraints): the layers
    # inside the slices above, outermost first, as (level, size); each size divides the
    # one above.  Where they were written, so that a refusal names the annotation.
    inner_slices: tuple[tuple[str, int], ...] = ()
    slices_field: str = ""
    # Kueue's podset-group-name: pod sets of one workload naming the same group are placed
    # together, in one domain of their (shared) level; "" when in no group.  Where it was
    # written, so that a refusal of the group names the annotation.
    group: str = ""
    group_field: str = ""


class TopologyPlacement(StrEnum):
    """How a Topology spreads a preferred gang that is split (its ``spec.placement``)."""

    BEST_FIT = "BestFit"  # pack: in-use and tightest domains first, fewest parts
    BALANCED = "Balanced"  # Kueue's TASBalancedPlacement: the parts as even as they can be


@dataclass(frozen=True, slots=True)
class Topology:
    """A Topology object: node label keys from the broadest domain to the narrowest."""

    name: str
    levels: tuple[str, ...]
    placement: TopologyPlacement = TopologyPlacement.BEST_FIT


class WorkloadPhase(StrEnum):
    PENDING = "Pending"  # suspended, waiting for admission
    ADMITTED = "Admitted"  # admitted and not finished: holds quota
    FINISHED = "Finished"  # holds nothing, never admitted again


@dataclass(frozen=True, slots=True)
class PodSet:
    """Pods of one template within a gang (Kueue's PodSet).

    A Job has one; a group of plain Pods has one per distinct pod shape (a
    launcher and its workers, say).  ``count`` pods run once the gang is
    admitted and are what its quota is charged for; ``min_count`` of them must
    be placed together for the gang to be admitted.
    """

    name: str
    template: PodTemplate
    count: int
    min_count: int
    # Where the template is written in its object ("spec.template.spec" in a Job,
    # "spec" in a Pod), so a message about a bad field names it where the user wrote it.
    path: str = ""
    topology: TopologyRequest | None = None  # None: placed without regard to topology


def one_pod_set(
    template: PodTemplate,
    *,
    count: int,
    min_count: int | None = None,
    name: str = "main",
    path: str = "",
) -> tuple[PodSet, ...]:
    """The pod sets of a workload whose pods all come from one template."""
    return (PodSet(name, template, count, count if min_count is None else min_count, path),)


@dataclass(frozen=True, slots=True)
class Workload:
    """One gang: a Job, a group of plain Pods (any workload kind), admitted all at once.

    Every pod set places ``min_count`` members together; ``count`` pods of each
    run once it is admitted and are what its quota is charged for.
    """

    namespace: str
    name: str
    queue: str
    pod_sets: tuple[PodSet, ...]
    kind: str  # the workload kind that made it (an adapter's name: Job, Pod, ...)
    phase: WorkloadPhase = WorkloadPhase.PENDING
    created: float = 0.0  # seconds since the epoch
    requeue_at: float | None = None
    requeue_count: int = 0
    deactivated: bool = False
    # Where an admitted gang was planned to go (node -> pods), from its PodGroup.
    placement: Mapping[str, int] = field(default_factory=dict)
    # The same plan pod set by pod set, when the gang has more than one.
    pod_set_placement: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # Set by an adapter when the object is unusable for a reason the core
    # cannot see (for example a PodGroup that disagrees with its Job).
    spec_error: str = ""
    # Members the kind expects that do not exist yet (a pod group short of its
    # total count): the gang waits for them before anything else is tried.
    absent_members: int = 0
    # Members whose pods the workload's own controller makes only once it is admitted,
    # and has not made yet (all of a held Job's; of an admitted Job, those still to
    # come).  Admission is paced on their sum (``schedule``'s ``creation_backlog``).
    uncreated_members: int = 0
    # Pod set -> node -> members: the room a pending gang holds while the gangs it
    # preempted give their capacity back (PodGroup status.nominatedPlacement).
    nominated: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # When it was admitted (PodGroup status.admittedAt), seconds since the epoch:
    # admission fair sharing charges its Queue an entry penalty until the next sample.
    admitted_at: float | None = None
    # How long it runs once started, and where that estimate came from.
    runtime: RuntimeEstimate = UNKNOWN_RUNTIME
    # Since when it has waited for room (NoNodeFit or Reserved), seconds since the epoch.
    no_fit_since: float | None = None
    # The nodes held for it from an estimated start (PodGroup status.reservedPlacement).
    reservation: Reservation | None = None
    # An admitted gang's topology record (PodGroup status.topologyAssignment): pod set ->
    # its domain (label values joined by "/"), and pod set -> its slices (node ->
    # members of each).  What a lost node's domain was, once the node is gone.
    topology_domains: Mapping[str, str] = field(default_factory=dict)
    slices: Mapping[str, tuple[Mapping[str, int], ...]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Unique in a cluster, whatever the adapters name their workloads."""
        return f"{self.kind}/{self.namespace}/{self.name}"

    @property
    def namespaced_name(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang_size(self) -> int:
        """Members placed together for the gang to be admitted."""
        return sum(p.min_count for p in self.pod_sets)

    @property
    def pod_count(self) -> int:
        """Pods that run once admitted: what the quota is charged for."""
        return sum(p.count for p in self.pod_sets)


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool = False


@dataclass(frozen=True, slots=True)
class LeftOut:
    """An object the adapter could not read and left out of the cycle (issue 22).

    The core is told so that a gang whose Queue or TeamQuota was left out waits
    naming it and why, not as if it did not exist.
    """

    kind: str  # Queue, TeamQuota, Node, ...
    namespace: str
    name: str
    why: str  # the error, naming the field


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one admission cycle looks at.  ``now`` is the only clock the core has."""

    nodes: tuple[Node, ...] = ()
    pods: tuple[BoundPod, ...] = ()
    workloads: tuple[Workload, ...] = ()
    queues: tuple[Queue, ...] = ()
    quotas: tuple[TeamQuota, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    now: float = 0.0
    cohorts: tuple[Cohort, ...] = ()
    topologies: tuple[Topology, ...] = ()
    # Dynamic Resource Allocation (resource.k8s.io/v1), see core/model/dra.py.
    device_classes: tuple[DeviceClass, ...] = ()
    resource_slices: tuple[ResourceSlice, ...] = ()
    resource_claims: tuple[ResourceClaim, ...] = ()
    claim_templates: tuple[ClaimTemplate, ...] = ()
    # Objects the adapter left out because they could not be read.
    left_out: tuple[LeftOut, ...] = ()
    # The most reservations held at once in the cluster (Queues set their own
    # per-TeamQuota limit); 0: none.
    reservation_limit: int = 8
