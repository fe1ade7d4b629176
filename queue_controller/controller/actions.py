"""What the planner asks the applier to do, one value per write.

Each action is computed from the objects as last seen and carries them, so
the applier can make its write conditional on their ``resourceVersion``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_controller.core.requeue import Requeue

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class CreatePodGroup:
    job: Obj
    body: Obj


@dataclass(frozen=True, slots=True)
class SuspendUnadmitted:
    """A queued Job runs without an admission: suspend it and remove its pods."""

    job: Obj
    pods: tuple[Obj, ...]


@dataclass(frozen=True, slots=True)
class Admit:
    job: Obj
    group_name: str
    queue: str
    placement: Mapping[str, int]
    message: str
    created: float  # the Job's creation, for the wait-time histogram


@dataclass(frozen=True, slots=True)
class ResumeAdmission:
    """The PodGroup says Admitted but the Job is still suspended (a restart came between)."""

    job: Obj


@dataclass(frozen=True, slots=True)
class BindMember:
    """Give a gated member pod its planned node and let kube-scheduler have it."""

    pod: Obj
    node: str | None  # None: a pod beyond the gang, scheduled wherever it fits


@dataclass(frozen=True, slots=True)
class MarkRunning:
    job: Obj
    group: Obj
    running: int


@dataclass(frozen=True, slots=True)
class MarkMembersLost:
    job: Obj
    group: Obj
    running: int


@dataclass(frozen=True, slots=True)
class Evict:
    job: Obj
    group: Obj
    pods: tuple[Obj, ...]
    queue: str
    reason: str  # PodsReadyTimeout | MembersLost | JobSuspended | GPUUnhealthy | Idle
    message: str
    requeue: Requeue
    partial_since: float | None  # when partial placement began, for its histogram


@dataclass(frozen=True, slots=True)
class SetCondition:
    """Flag an admitted gang without evicting it (GPUUnhealthy under Mark, Idle)."""

    job: Obj
    group: Obj
    kind: str  # the condition type
    status: bool
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class FinishEviction:
    """Keep suspending and deleting until an evicted gang holds nothing."""

    job: Obj
    group: Obj
    pods: tuple[Obj, ...]
    requeued: bool  # the Job is suspended and no pod remains: requeued now


@dataclass(frozen=True, slots=True)
class MarkPending:
    job: Obj
    group: Obj
    queue: str
    verdict: str  # Pending | Invalid
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class MarkFinished:
    job: Obj
    group: Obj
    queue: str
    succeeded: bool


@dataclass(frozen=True, slots=True)
class QueueStatus:
    queue: Obj
    counts: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class TeamQuotaStatus:
    quota: Obj
    used: Mapping[str, str]
    borrowed: Mapping[str, str]
    counts: Mapping[str, int] = field(default_factory=dict)


Action = (
    CreatePodGroup
    | SuspendUnadmitted
    | Admit
    | ResumeAdmission
    | BindMember
    | MarkRunning
    | MarkMembersLost
    | Evict
    | SetCondition
    | FinishEviction
    | MarkPending
    | MarkFinished
    | QueueStatus
    | TeamQuotaStatus
)
