"""What the planner asks the applier to do, one value per write.

Actions carry typed views and :class:`Ref` values, never raw objects: the
applier makes each write conditional on the ``resourceVersion`` the decision
was computed from (or on the version its own earlier write in the same
cycle produced), so a change made by someone else in between fails the write
with a Conflict instead of being overwritten.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_controller.api.v1alpha1 import PodGroup
from queue_controller.core.rules import Requeue
from queue_controller.kube.views import MemberPod, Ref, Write

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """The gang an action is about: for events, the journal and metrics."""

    kind: str  # the workload kind (Job, Pod)
    namespace: str
    name: str
    uid: str
    queue: str  # namespace/name of its Queue
    about: tuple[Ref, ...]  # where its events are posted
    # Its queue-controller.io/runtime-class label, kept in the journal: like gangs share
    # their runtime history.
    runtime_class: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupAction:
    """An action on a gang that has a PodGroup."""

    subject: Subject
    group: PodGroup
    group_ref: Ref


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePodGroup:
    subject: Subject
    body: Obj


@dataclass(frozen=True, slots=True, kw_only=True)
class HoldUnadmitted:
    """A queued gang runs without an admission: hold it again (its kind says how)."""

    subject: Subject
    writes: tuple[Write, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Admit:
    subject: Subject
    group: PodGroup | None  # None: the PodGroup is created in this cycle
    group_ref: Ref
    placement: Mapping[str, int]
    pod_set_placement: Mapping[str, Mapping[str, int]]
    message: str
    created: float  # the gang's creation, for the wait-time histogram
    release: tuple[Write, ...]  # the kind's writes that let its members be created
    # Of the pod sets that asked for a topology: the domain each got, and its slices
    # (node -> members of each, in member-index order), as the core decided them.
    domains: Mapping[str, str] = field(default_factory=dict)
    slices: Mapping[str, tuple[Mapping[str, int], ...]] = field(default_factory=dict)
    # Placed on nodes reserved for these gangs (namespace/name), ending before their start.
    backfilled_over: tuple[str, ...] = ()
    # Status fields it changes besides the admission's (controller/reservations.py).
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Nominate:
    """A gang preempts others: it holds the room they give back (nominatedPlacement)."""

    subject: Subject
    group: PodGroup | None  # None: the PodGroup is created in this cycle
    group_ref: Ref
    reason: str  # ReclaimWithinCohort | BorrowWithinCohort | WithinTeamQuota
    message: str
    nominated: Mapping[str, Mapping[str, int]]
    victims: tuple[str, ...]  # namespace/name of the gangs it preempts
    # Status fields it changes besides the preemption's (a reservation it held ends).
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeAdmission:
    """The PodGroup says Admitted but the gang is still held (a restart came between)."""

    subject: Subject
    release: tuple[Write, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class BindMember:
    """Give a gated member pod its planned node and let kube-scheduler have it."""

    pod: MemberPod
    node: str | None  # None: a pod beyond the gang, scheduled wherever it fits


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkRunning(GroupAction):
    running: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkMembersLost(GroupAction):
    running: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplaceNodes(GroupAction):
    """Lost nodes of an admitted gang's plan replaced (controller/replacing.py)."""

    patch: Mapping[str, Any]  # the PodGroup status merge patch
    messages: tuple[str, ...]  # one per replacement, for its NodeReplaced event


@dataclass(frozen=True, slots=True, kw_only=True)
class Evict(GroupAction):
    pods: tuple[MemberPod, ...]
    hold: tuple[Write, ...]  # the kind's writes that take the gang back
    reason: str  # PodsReadyTimeout | MembersLost | JobSuspended | GPUUnhealthy | Idle | Preempted
    message: str
    requeue: Requeue
    partial_since: float | None  # when partial placement began, for its histogram
    preemption: str = ""  # for Preempted: why (ReclaimWithinCohort, ...), a metric label


@dataclass(frozen=True, slots=True, kw_only=True)
class SetCondition(GroupAction):
    """Flag an admitted gang without evicting it (GPUUnhealthy under Mark, Idle)."""

    condition: str  # the condition type
    status: bool
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishEviction(GroupAction):
    """Keep holding and deleting until an evicted gang holds nothing."""

    pods: tuple[MemberPod, ...]
    hold: tuple[Write, ...]
    requeued: bool  # the gang is held and no pod remains: requeued now


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkPending:
    subject: Subject
    group: PodGroup | None
    group_ref: Ref
    verdict: str  # Pending | Invalid
    reason: str
    message: str
    # Reservation fields it changes (controller/reservations.py): merge patch values.
    fields: Mapping[str, object] = field(default_factory=dict)
    # A reservation made this cycle: said with a Reserved event.
    new_reservation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkFinished(GroupAction):
    succeeded: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteOrphan:
    """A PodGroup the controller made whose gang is gone for good."""

    group_ref: Ref
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Vanished:
    """An admitted gang whose objects were deleted (its Job, its pods): its quota is
    free from this cycle on, and only the journal can still say so."""

    subject: Subject


@dataclass(frozen=True, slots=True, kw_only=True)
class WarnLeftOut:
    """An object left out of the cycle because it could not be read: a Warning event on
    it, where its owner looks (``kubectl describe``), once for each new reason."""

    about: Ref
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStatus:
    queue: Ref
    current: Mapping[str, object]
    counts: Mapping[str, int]
    # status.fairSharing.admissionFairSharingStatus to write (a new sample); None:
    # unchanged, unless ``drop_fair_sharing`` (its TeamQuota no longer has it).
    fair_sharing: Mapping[str, object] | None = None
    drop_fair_sharing: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamQuotaStatus:
    quota: Ref
    current: Mapping[str, object]
    used: Mapping[str, str]
    borrowed: Mapping[str, str]
    counts: Mapping[str, int] = field(default_factory=dict)
    # status.fairSharing.weightedShare; None where its cohort has no fair sharing.
    weighted_share: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CohortStatus:
    """A Cohort's subtree figures: its quota, its use, its weighted share."""

    cohort: Ref
    current: Mapping[str, object]
    subtree_quota: Mapping[str, str]
    used: Mapping[str, str]
    # status.fairSharing.weightedShare; None where its tree's root has no fair sharing.
    weighted_share: int | None = None


Action = (
    CreatePodGroup
    | HoldUnadmitted
    | Admit
    | Nominate
    | ResumeAdmission
    | BindMember
    | MarkRunning
    | MarkMembersLost
    | ReplaceNodes
    | Evict
    | SetCondition
    | FinishEviction
    | MarkPending
    | MarkFinished
    | DeleteOrphan
    | Vanished
    | WarnLeftOut
    | QueueStatus
    | TeamQuotaStatus
    | CohortStatus
)
