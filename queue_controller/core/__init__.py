"""The pure admission core: model, fit, quota, ordering and the cycle.

Nothing here performs I/O, reads a clock or imports a Kubernetes, database or
metrics library; import-linter enforces that.  The controller, ``plan`` and
the simulator all call :func:`schedule`.
"""

from queue_controller.core.cycle import CycleResult, schedule
from queue_controller.core.decisions import Decision, Reason, Verdict
from queue_controller.core.fit import EquivalenceIndex
from queue_controller.core.model import (
    BorrowPolicy,
    BoundPod,
    Cohort,
    Container,
    Node,
    NodeSelectorTerm,
    Ordering,
    PodClaim,
    PodSet,
    PodTemplate,
    Preemption,
    PriorityClass,
    Queue,
    ReclaimPolicy,
    RequeuePolicy,
    ResourceQuota,
    SelectorRequirement,
    Snapshot,
    Taint,
    TeamQuota,
    Toleration,
    Topology,
    TopologyMode,
    TopologyRequest,
    WithinPolicy,
    Workload,
    WorkloadPhase,
    one_pod_set,
)
from queue_controller.core.podscan import PodByPodPlacer

__all__ = [
    "BorrowPolicy",
    "BoundPod",
    "Cohort",
    "Container",
    "CycleResult",
    "Decision",
    "EquivalenceIndex",
    "Node",
    "NodeSelectorTerm",
    "Ordering",
    "PodByPodPlacer",
    "PodClaim",
    "PodSet",
    "PodTemplate",
    "Preemption",
    "PriorityClass",
    "Queue",
    "Reason",
    "ReclaimPolicy",
    "RequeuePolicy",
    "ResourceQuota",
    "SelectorRequirement",
    "Snapshot",
    "Taint",
    "TeamQuota",
    "Toleration",
    "Topology",
    "TopologyMode",
    "TopologyRequest",
    "Verdict",
    "WithinPolicy",
    "Workload",
    "WorkloadPhase",
    "one_pod_set",
    "schedule",
]
