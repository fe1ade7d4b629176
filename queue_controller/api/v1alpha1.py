"""``queue-controller.io/v1alpha1``: TeamQuota, Cohort, Topology, Queue and PodGroup as pydantic
models.

These mirror the CRD schemas in ``crds/`` (a test keeps the two in step), so
an object read from a dump is held to the same rules the API server applies,
and a violation names the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from queue_controller.core.model import (
    BorrowPolicy,
    FairStrategy,
    Overrun,
    ReclaimPolicy,
    RuntimeSource,
    WithinPolicy,
    is_extended,
    parse_quantity,
)
from queue_controller.core.rules import HOSTNAME_LABEL
from queue_controller.errors import QuantityError

GROUP = "queue-controller.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


def _quantity(value: Any) -> str | int:
    # int-or-string, as the CRD says: a YAML float (1.5) or a padded string is refused
    # by the API server, so it is refused here too.
    if isinstance(value, float):
        raise ValueError(f"{value!r}: write a quantity as an integer or a string, such as '1500m'")
    if isinstance(value, str) and value != value.strip():
        raise ValueError(f"{value!r}: a quantity cannot have surrounding spaces")
    try:
        amount = parse_quantity(value)
    except QuantityError as error:
        raise ValueError(error.detail) from None
    if amount < 0:
        raise ValueError(f"{value!r} is negative; quotas are never below zero")
    return value if isinstance(value, int) else str(value)


Quantity = Annotated[str | int, BeforeValidator(_quantity)]
# Strict: the API server rejects "600" where an integer belongs.
NonNegative = Annotated[int, Field(ge=0, strict=True)]
# A cohort name is a DNS-1123 label, as in the CRD.
CohortName = Annotated[str, Field(max_length=63, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")]
# An object name that is a DNS-1123 subdomain (a Topology's), or "" for none.
SubdomainName = Annotated[
    str,
    Field(
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$",
    ),
]
# A qualified label key, as Kueue's Topology level's nodeLabel: an optional DNS-subdomain
# prefix and "/", then a name of at most 63 (the length is the API server's bound too).
LabelKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=316,
        pattern=(
            r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
        ),
    ),
]


class _Strict(BaseModel):
    # Unknown fields are typos, and kubectl's strict field validation rejects them too.
    model_config = ConfigDict(extra="forbid", frozen=True)


class ObjectMeta(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1)
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""
    creationTimestamp: datetime | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    ownerReferences: list[dict[str, Any]] = Field(default_factory=list)


class ResourceLimits(_Strict):
    nominal: Quantity
    borrowingLimit: Quantity | None = None
    lendingLimit: Quantity | None = None

    @model_validator(mode="after")
    def _lending_within_nominal(self) -> ResourceLimits:
        if self.lendingLimit is not None and parse_quantity(self.lendingLimit) > parse_quantity(
            self.nominal
        ):
            raise ValueError("lendingLimit cannot exceed nominal: a quota lends only its own")
        return self


# The API speaks the core's policies (Kueue's names and values): one definition of each.
ReclaimWithinCohort = ReclaimPolicy
WithinTeamQuota = WithinPolicy
BorrowWithinCohortPolicy = BorrowPolicy


Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1, strict=True)]


class BorrowWithinCohort(_Strict):
    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    maxPriorityThreshold: Int32 | None = None

    @model_validator(mode="after")
    def _threshold_needs_lower_priority(self) -> BorrowWithinCohort:
        if (
            self.maxPriorityThreshold is not None
            and self.policy is not BorrowWithinCohortPolicy.LOWER_PRIORITY
        ):
            raise ValueError("maxPriorityThreshold needs policy LowerPriority")
        return self


class PreemptionSpec(_Strict):
    reclaimWithinCohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    withinTeamQuota: WithinTeamQuota = WithinTeamQuota.NEVER
    borrowWithinCohort: BorrowWithinCohort = BorrowWithinCohort()

    @model_validator(mode="after")
    def _borrow_needs_reclaim(self) -> PreemptionSpec:
        if (
            self.borrowWithinCohort.policy is not BorrowWithinCohortPolicy.NEVER
            and self.reclaimWithinCohort is ReclaimWithinCohort.NEVER
        ):
            raise ValueError(
                "borrowWithinCohort.policy needs reclaimWithinCohort other than Never, as in Kueue"
            )
        return self


class FairSharingWeight(_Strict):
    # Kueue's ClusterQueue (and LocalQueue) spec.fairSharing.weight: what the quota
    # borrows (the Queue has used) is divided by it.
    weight: Quantity = 1


# Seconds that must be more than zero: a half-life or an interval of 0 means nothing.
PositiveSeconds = Annotated[int, Field(gt=0, le=10 * 365 * 86400, strict=True)]


class AdmissionFairSharing(_Strict):
    """Kueue's configuration ``admissionFairSharing``, for this TeamQuota's Queues.

    Present: its Queues take turns by decayed usage (Kueue's ClusterQueue
    ``admissionScope.admissionMode: UsageBasedAdmissionFairSharing``).  Kueue's
    durations (usageHalfLifeTime, usageSamplingInterval) are whole seconds here.
    """

    usageHalfLifeSeconds: PositiveSeconds
    # Kueue's default usageSamplingInterval, 5m.
    usageSamplingIntervalSeconds: PositiveSeconds = 300
    # Resource -> weight in the one number Queues are compared by; 1 if not named.
    resourceWeights: dict[str, Quantity] = Field(default_factory=dict, max_length=15)

    @model_validator(mode="after")
    def _named_resources(self) -> AdmissionFairSharing:
        if any(not name for name in self.resourceWeights):
            raise ValueError("resourceWeights: a resource name cannot be empty")
        return self


class NodeFailurePolicy(StrEnum):
    """spec.onNodeFailure: what an admitted topology gang does when a node of its plan
    is lost (Kueue's TASFailedNodeReplacement); docs/topology.md."""

    REPLACE = "Replace"  # its members there move to one node of the same domain
    EVICT = "Evict"  # the MembersLost timeout evicts the gang whole


class TeamQuotaSpec(_Strict):
    cohort: CohortName = ""
    # At most 15: the CRD's CEL rules must stay within the API server's cost budget.
    resources: dict[str, ResourceLimits] = Field(default_factory=dict, max_length=15)
    preemption: PreemptionSpec = PreemptionSpec()
    fairSharing: FairSharingWeight = FairSharingWeight()
    admissionFairSharing: AdmissionFairSharing | None = None
    # For its Queues that set none (a Queue's own value wins).  Replace, as Kueue's
    # TASFailedNodeReplacement is on by default (beta since v0.14).
    onNodeFailure: NodeFailurePolicy = NodeFailurePolicy.REPLACE

    @model_validator(mode="after")
    def _rules(self) -> TeamQuotaSpec:
        _check_resources(self.resources, self.cohort, "a cohort")
        return self


def _check_resources(resources: Mapping[str, ResourceLimits], parent: str, what: str) -> None:
    """A TeamQuota's or a Cohort's resources: names, whole devices, borrowing needs ``parent``."""
    for name, limits in resources.items():
        if not name:
            raise ValueError("resources: a resource name cannot be empty")
        for field in ("nominal", "borrowingLimit", "lendingLimit"):
            value = getattr(limits, field)
            if value is None:
                continue
            if is_extended(name) and parse_quantity(value).denominator != 1:
                raise ValueError(
                    f"resources.{name}.{field}: {value!r} is not a whole number; "
                    f"{name} is an extended resource and is counted in whole devices"
                )
        if limits.borrowingLimit is not None and not parent:
            raise ValueError(
                f"resources.{name}.borrowingLimit: borrowing needs {what} to borrow from"
            )


class TeamQuota(_Strict):
    apiVersion: Literal["queue-controller.io/v1alpha1"]
    kind: Literal["TeamQuota"]
    metadata: ObjectMeta
    spec: TeamQuotaSpec
    status: dict[str, Any] = Field(default_factory=dict)


class CohortFairSharing(_Strict):
    # Strict: the API server rejects "true" where a boolean belongs.
    enabled: Annotated[bool, Field(strict=True)] = False
    # Kueue's Cohort spec.fairSharing.weight: the cohort's share among its siblings.
    weight: Quantity = 1
    # Kueue's fairSharing.preemptionStrategies, tried in order; Kueue's default.
    preemptionStrategies: Annotated[list[FairStrategy], Field(min_length=1, max_length=2)] = [
        FairStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
        FairStrategy.LESS_THAN_INITIAL_SHARE,
    ]

    @model_validator(mode="after")
    def _strategies_once_each(self) -> CohortFairSharing:
        if len(set(self.preemptionStrategies)) != len(self.preemptionStrategies):
            raise ValueError("preemptionStrategies: each strategy at most once")
        return self


class CohortSpec(_Strict):
    # Kueue's Cohort spec.parentName: the cohort this one lends to and borrows from.
    parentName: CohortName = ""
    # The cohort's own quota, lent within its subtree (Kueue's resourceGroups, one
    # flavor): shaped like a TeamQuota's, limits towards the parent.
    resources: dict[str, ResourceLimits] = Field(default_factory=dict, max_length=15)
    fairSharing: CohortFairSharing = CohortFairSharing()

    @model_validator(mode="after")
    def _rules(self) -> CohortSpec:
        _check_resources(self.resources, self.parentName, "a parentName")
        return self


class Cohort(_Strict):
    """A node of a cohort tree: the TeamQuotas whose spec.cohort names it, and the
    cohorts whose spec.parentName does, lend it what they may; it adds its own
    resources, and lends towards its parent.  Its root switches fair sharing on."""

    apiVersion: Literal["queue-controller.io/v1alpha1"]
    kind: Literal["Cohort"]
    metadata: ObjectMeta
    spec: CohortSpec = CohortSpec()
    status: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _not_its_own_parent(self) -> Cohort:
        if self.spec.parentName and self.spec.parentName == self.metadata.name:
            raise ValueError("spec.parentName: a cohort cannot be its own parent")
        return self


class TopologyLevel(_Strict):
    nodeLabel: LabelKey


class TopologyPlacementPolicy(StrEnum):
    """How a preferred gang that must be split is split (Kueue: the TASBalancedPlacement gate)."""

    BEST_FIT = "BestFit"
    BALANCED = "Balanced"


class TopologySpec(_Strict):
    # At most 16 levels (Kueue allows 8; GPU fabrics are rarely deeper than a handful).
    levels: list[TopologyLevel] = Field(min_length=1, max_length=16)
    placement: TopologyPlacementPolicy = TopologyPlacementPolicy.BEST_FIT

    @model_validator(mode="after")
    def _levels(self) -> TopologySpec:
        labels = [level.nodeLabel for level in self.levels]
        seen: set[str] = set()
        for index, label in enumerate(labels):
            if label in seen:
                raise ValueError(f"levels[{index}].nodeLabel: {label!r} is already a level")
            seen.add(label)
        # A node is the narrowest domain there is: hostname below it would split nothing.
        if HOSTNAME_LABEL in labels[:-1]:
            raise ValueError(
                f"levels[{labels.index(HOSTNAME_LABEL)}].nodeLabel: {HOSTNAME_LABEL} "
                "may only be the last (narrowest) level"
            )
        return self


class Topology(_Strict):
    """Node label keys naming a cluster's domains, from the broadest to the narrowest.

    Kueue's Topology (kueue.x-k8s.io/v1beta1): a Queue's spec.topologyName names one,
    and a gang may ask for all its members within one domain of a level.
    """

    apiVersion: Literal["queue-controller.io/v1alpha1"]
    kind: Literal["Topology"]
    metadata: ObjectMeta
    spec: TopologySpec


class QueueOrdering(StrEnum):
    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class RequeueSpec(_Strict):
    backoffBaseSeconds: NonNegative = 60
    backoffMaxSeconds: NonNegative = 3600
    backoffLimit: NonNegative | None = None

    @model_validator(mode="after")
    def _base_within_max(self) -> RequeueSpec:
        if self.backoffBaseSeconds > self.backoffMaxSeconds:
            raise ValueError("backoffBaseSeconds cannot exceed backoffMaxSeconds")
        return self


class GpuUnhealthyPolicy(StrEnum):
    EVICT = "Evict"  # evict the whole gang at once and requeue it
    MARK = "Mark"  # set the GPUUnhealthy condition and let it run


class GpuHealthSpec(_Strict):
    onUnhealthy: GpuUnhealthyPolicy = GpuUnhealthyPolicy.EVICT
    evictIdle: bool = False


class ReservationSpec(_Strict):
    """A Queue's ``spec.reservation``: its starving head gets named nodes and a start
    (Slurm's backfill; Kueue has no such feature, so the names are ours)."""

    # A head waiting NoNodeFit this long gets a reservation; absent: off.
    afterSeconds: NonNegative | None = None
    # Reservations held at once per TeamQuota.
    maxPerTeamQuota: NonNegative = 1
    # What happens when the start comes and a backfilled gang still runs.
    overrun: Overrun = Overrun.WAIT
    # A backfill must end this long before the reservation's start.
    backfillMarginSeconds: NonNegative = 60


class QueueSpec(_Strict):
    teamQuota: str = Field(min_length=1)
    ordering: QueueOrdering = QueueOrdering.BEST_EFFORT_FIFO
    podsReadyTimeoutSeconds: NonNegative | None = None
    requeue: RequeueSpec = RequeueSpec()
    gpuHealth: GpuHealthSpec = GpuHealthSpec()
    # The Topology whose levels this queue's gangs may ask to be kept within ("": none).
    topologyName: SubdomainName = ""
    # Kueue's LocalQueue spec.fairSharing.weight: under its TeamQuota's admission fair
    # sharing, the Queue's usage is divided by it.
    fairSharing: FairSharingWeight = FairSharingWeight()
    # Reservation with backfill for its head (docs/reservation.md); absent: off.
    reservation: ReservationSpec | None = None
    # Absent: its TeamQuota's spec.onNodeFailure.
    onNodeFailure: NodeFailurePolicy | None = None


class AdmissionFairSharingStatus(BaseModel):
    """Kueue's LocalQueue status.fairSharing.admissionFairSharingStatus: the Queue's
    decayed usage as of lastUpdate, written by the controller each sampling interval."""

    model_config = ConfigDict(extra="allow", frozen=True)

    consumedResources: dict[str, Quantity] = Field(default_factory=dict)
    lastUpdate: datetime


class Queue(_Strict):
    apiVersion: Literal["queue-controller.io/v1alpha1"]
    kind: Literal["Queue"]
    metadata: ObjectMeta
    spec: QueueSpec
    status: dict[str, Any] = Field(default_factory=dict)


class PodGroupPhase(StrEnum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    EVICTED = "Evicted"
    FINISHED = "Finished"
    FAILED = "Failed"


class Condition(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    lastTransitionTime: datetime | None = None


class PodGroupSpec(_Strict):
    queue: str = Field(min_length=1)
    minMember: NonNegative
    timeoutSeconds: NonNegative | None = None


class TopologyAssignment(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    # Label values from the broadest level down, joined by "/" ("" when it spans them).
    domain: str = ""
    # One map per slice, in member-index order: node -> members of that slice there.
    slices: list[dict[str, NonNegative]] = Field(default_factory=list)


class ReplacedNode(BaseModel):
    """One lost node of an admitted gang's plan and the node that took its members."""

    model_config = ConfigDict(extra="allow", frozen=True)

    node: str  # the lost node
    replacement: str
    podSet: str = ""
    reason: str = ""  # Deleted | NotReady | GPUUnhealthy
    replacedAt: datetime | None = None


class RuntimeEstimateStatus(BaseModel):
    """How long the gang is expected to run once started, and where that came from."""

    model_config = ConfigDict(extra="allow", frozen=True)

    seconds: Annotated[float, Field(ge=0)] | None = None  # absent: unknown
    source: RuntimeSource = RuntimeSource.UNKNOWN
    detail: str = Field(default="", max_length=1024)


class EtaStatus(BaseModel):
    """When a pending gang is expected to start (the controller's forecast), or why unknown."""

    model_config = ConfigDict(extra="allow", frozen=True)

    start: datetime | None = None  # absent: unknown (see reason)
    reason: str = Field(default="", max_length=64)
    message: str = Field(default="", max_length=2048)
    after: list[Annotated[str, Field(max_length=512)]] = Field(default_factory=list, max_length=16)
    estimatedAt: datetime | None = None


class PodGroupStatus(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    phase: PodGroupPhase = PodGroupPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    placement: dict[str, NonNegative] = Field(default_factory=dict)
    # The same plan pod set by pod set, for a gang of more than one pod set.
    podSetPlacement: dict[str, dict[str, NonNegative]] = Field(default_factory=dict)
    # Room held while a preemption is under way: pod set -> node -> members.
    nominatedPlacement: dict[str, dict[str, NonNegative]] = Field(default_factory=dict)
    # When the gang first took that room (its preemption's start): reclaim time counts from it.
    nominatedAt: datetime | None = None
    # Named nodes held for a starving head from reservedStart (reason Reserved):
    # pod set -> node -> members, as nominatedPlacement.
    reservedPlacement: dict[str, dict[str, NonNegative]] = Field(default_factory=dict)
    reservedStart: datetime | None = None
    # When the reservation was made: gangs admitted onto its nodes since are backfills.
    reservationMadeAt: datetime | None = None
    # Since when the gang has waited for room (NoNodeFit or Reserved).
    noFitSince: datetime | None = None
    runtimeEstimate: RuntimeEstimateStatus | None = None
    # The forecast's estimated start of a pending gang (controller/eta.py).
    eta: EtaStatus | None = None
    running: NonNegative = 0
    requeueCount: NonNegative = 0
    requeueAt: datetime | None = None
    admittedAt: datetime | None = None
    runningAt: datetime | None = None
    reason: str = ""
    message: str = ""
    # Where a gang that asked for a topology was admitted: the one pod set's domain, or
    # "set=domain, ..." for several; and each such pod set's domain and slices.
    topologyDomain: str = ""
    topologyAssignment: dict[str, TopologyAssignment] = Field(default_factory=dict)
    # Lost nodes of the plan replaced since admission (onNodeFailure: Replace).
    replacedNodes: list[ReplacedNode] = Field(default_factory=list, max_length=64)

    def condition(self, kind: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


class PodGroup(_Strict):
    apiVersion: Literal["queue-controller.io/v1alpha1"]
    kind: Literal["PodGroup"]
    metadata: ObjectMeta
    spec: PodGroupSpec
    status: PodGroupStatus = PodGroupStatus()
