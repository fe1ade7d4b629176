"""The pure admission core, in packages by feature, each looking only downward.

* :mod:`.cycle`: the admission cycle (:func:`schedule`), gang shapes, the
  cycle's DRA devices and pacing;
* :mod:`.preemption`: which running gangs to evict for a waiting one;
* :mod:`.reservation`: runtime estimates, nodes reserved for a starving head from
  an estimated start, and which gangs may backfill onto them;
* :mod:`.quota`: the quota ledger and fair share;
* :mod:`.placement`: where members fit (shapes, node classes, the fit index,
  explanations, pod-by-pod placement and ``topology/``);
* :mod:`.rules`: requests, usable nodes and GPU health, ordering, requeue,
  topology requests and the gangs prepared for a cycle;
* :mod:`.devices`: DRA matching (CEL selectors, what claims ask and slices offer);
* :mod:`.model`: quantities, resource vectors, the objects, DRA objects and
  decisions.

``quota`` and ``placement`` are independent of each other.  Import-linter
enforces this order (an exhaustive contract over these packages and one over
each package's modules) and that nothing here performs I/O, reads a clock or
imports a Kubernetes, database or metrics library.  The controller, ``plan``
and the simulator all call :func:`schedule`.
"""

from queue_controller.core.cycle.admission import CycleResult, schedule
from queue_controller.core.model.decisions import Decision, Reason, Verdict
from queue_controller.core.model.objects import (
    BorrowPolicy,
    BoundPod,
    Cohort,
    Container,
    FairStrategy,
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
from queue_controller.core.model.reservations import (
    Overrun,
    Reservation,
    ReservationPolicy,
    RuntimeEstimate,
    RuntimeSource,
)
from queue_controller.core.placement.fit import EquivalenceIndex
from queue_controller.core.placement.podscan import PodByPodPlacer
from queue_controller.core.quota.fairshare import CohortFigures

__all__ = [
    "BorrowPolicy",
    "BoundPod",
    "Cohort",
    "CohortFigures",
    "Container",
    "CycleResult",
    "Decision",
    "EquivalenceIndex",
    "FairStrategy",
    "Node",
    "NodeSelectorTerm",
    "Ordering",
    "Overrun",
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
    "Reservation",
    "ReservationPolicy",
    "ResourceQuota",
    "RuntimeEstimate",
    "RuntimeSource",
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
