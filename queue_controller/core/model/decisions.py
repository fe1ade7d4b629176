"""What a cycle decides about each gang, with reasons whose names never change.

Reasons are part of the public surface: they appear in PodGroup conditions,
events, metrics labels and ``plan`` output, and users alert on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from queue_controller.core.model.objects import Workload
    from queue_controller.core.model.reservations import Reservation
from enum import StrEnum


class Verdict(StrEnum):
    ADMIT = "Admit"
    PREEMPT = "Preempt"  # admitted onto room its victims give back once they are gone
    PENDING = "Pending"
    INVALID = "Invalid"


class Reason(StrEnum):
    # Admit
    ADMITTED = "Admitted"
    # Preempt
    RECLAIM_WITHIN_COHORT = "ReclaimWithinCohort"
    BORROW_WITHIN_COHORT = "BorrowWithinCohort"
    WITHIN_TEAM_QUOTA = "WithinTeamQuota"
    FAIR_SHARING = "FairSharing"  # another quota's borrowing, above its fair share
    # A reserved gang's start came and gangs backfilled onto its nodes still run.
    RESERVATION_OVERRUN = "ReservationOverrun"
    # Pending
    QUOTA_EXCEEDED = "QuotaExceeded"
    NO_NODE_FIT = "NoNodeFit"
    WAITING_FOR_HEAD = "WaitingForHead"
    QUEUE_NOT_FOUND = "QueueNotFound"
    TEAM_QUOTA_NOT_FOUND = "TeamQuotaNotFound"
    # Its Queue, or its Queue's TeamQuota, exists but could not be read: left out.
    QUEUE_INVALID = "QueueInvalid"
    TEAM_QUOTA_INVALID = "TeamQuotaInvalid"
    TOPOLOGY_NOT_FOUND = "TopologyNotFound"  # its Queue names a Topology that does not exist
    BACKOFF = "Backoff"  # evicted earlier, requeued, and not yet due again
    DEACTIVATED = "Deactivated"  # past the queue's backoffLimit; never retried
    WAITING_FOR_MEMBERS = "WaitingForMembers"  # a pod group short of its total count
    PREEMPTING = "Preempting"  # its victims are still giving back the room it holds
    # A head that starved holds named nodes from an estimated start (reservation).
    RESERVED = "Reserved"
    # Admitted gangs' pods not yet made by their controllers are past the cycle's limit.
    POD_CREATION_BACKLOG = "PodCreationBacklog"
    # Invalid
    INVALID_SPEC = "InvalidSpec"


@dataclass(frozen=True, slots=True)
class Decision:
    workload: str  # "namespace/name"; with ``kind``, unique in a cluster
    queue: str
    verdict: Verdict
    reason: Reason
    message: str
    # Node -> member pods; only on Admit.
    placement: Mapping[str, int] = field(default_factory=dict)
    kind: str = field(kw_only=True)  # the decided workload's kind
    # Pod set -> node -> member pods, on Admit of a gang with more than one pod set.
    pod_set_placement: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # On Preempt: the gangs to evict, each (Workload.key, why).
    victims: tuple[tuple[str, Reason], ...] = ()
    # On Preempt: pod set -> node -> members, the room to hold until the victims are gone.
    nominated: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # On Admit of pod sets that asked for a topology: pod set -> the domain it got
    # (Placement.domain), and pod set -> its slices (node -> members of each).
    domains: Mapping[str, str] = field(default_factory=dict)
    slices: Mapping[str, tuple[Mapping[str, int], ...]] = field(default_factory=dict)
    # ... and pod set -> how it was spread, where its Topology's placement (Balanced)
    # split it over several domains of its level ("balanced: 6 + 6 over 2 nodes in 2 racks").
    spread: Mapping[str, str] = field(default_factory=dict)
    # On Pending with reason Reserved (and on a ReservationOverrun preemption): the
    # nodes held for it and their start.  None ends any reservation it held.
    reservation: Reservation | None = None
    # On Admit of a gang placed on nodes reserved for others: their Workload.keys.
    backfilled_over: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """The decided workload's ``Workload.key``."""
        return f"{self.kind}/{self.workload}"

    def as_dict(self) -> dict[str, object]:
        """The ``plan -o json`` shape: ``placement`` only appears on Admit."""
        out: dict[str, object] = {
            "kind": self.kind,
            "workload": self.workload,
            "queue": self.queue,
            "decision": self.verdict.value,
            "reason": self.reason.value,
            "message": self.message,
        }
        if self.verdict is Verdict.PREEMPT:
            out["placement"] = dict(self.placement)
            out["victims"] = [
                {"kind": key.split("/", 1)[0], "workload": key.split("/", 1)[1], "reason": r.value}
                for key, r in self.victims
            ]
        if self.verdict is Verdict.ADMIT:
            out["placement"] = dict(self.placement)
            if self.pod_set_placement:
                out["podSets"] = {name: dict(p) for name, p in self.pod_set_placement.items()}
            if self.domains:
                out["domains"] = dict(self.domains)
            if self.slices:
                out["slices"] = {name: [dict(s) for s in sl] for name, sl in self.slices.items()}
            if self.spread:
                out["spread"] = dict(self.spread)
            if self.backfilled_over:
                out["backfilledOver"] = list(self.backfilled_over)
        if self.reservation is not None:
            out["reservation"] = {
                "placement": {n: dict(p) for n, p in self.reservation.placement.items()},
                "start": self.reservation.start,
            }
        return out


def decision_for(
    workload: Workload,
    verdict: Verdict,
    reason: Reason,
    message: str,
    placement: Mapping[str, int] | None = None,
    pod_set_placement: Mapping[str, Mapping[str, int]] | None = None,
) -> Decision:
    """A decision about ``workload``, named and kinded as the workload is."""
    return Decision(
        workload.namespaced_name,
        workload.queue,
        verdict,
        reason,
        message,
        placement or {},
        kind=workload.kind,
        pod_set_placement=pod_set_placement or {},
    )


# The event and journal reason of a lost node's members moved to a replacement node.
NODE_REPLACED = "NodeReplaced"


@dataclass(frozen=True, slots=True)
class Replacement:
    """A lost node of an admitted gang's plan, and the node that takes its members.

    Kueue's TASFailedNodeReplacement: one node for one node, inside the domain the
    gang's topology request keeps the pod set in, so the rest of the gang runs on.
    """

    key: str  # the gang's Workload.key
    pod_set: str
    lost: str  # the node of the plan that is lost
    why: str  # Deleted | NotReady | GPUUnhealthy
    node: str  # the replacement node
    members: int  # the pod set's members planned on the lost node, now on ``node``
    domain: str  # the domain both lie in (label values joined by "/"); "" for anywhere
    # The replacement's own domain path, down to the node where the Topology's last level
    # is the hostname: the pod set's recorded domain is narrowed to it (controller).
    node_domain: str = ""

    def describe(self) -> str:
        where = f" in domain {self.domain}" if self.domain else ""
        plural = "member" if self.members == 1 else "members"
        return (
            f"node {self.lost} is lost ({self.why}): its {self.members} {plural} of pod set "
            f"{self.pod_set} go to node {self.node}{where}"
        )
