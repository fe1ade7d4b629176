"""The core's vocabulary: quantities, resource vectors, the objects, DRA objects, decisions.

The bottom of the core: these modules import nothing of the core outside this
package.  Inside it they look downward only: ``decisions`` names the objects,
``objects`` (the snapshot, workloads, nodes, quotas) names the DRA objects of
``dra`` and the reservation vocabulary of ``reservations`` (a Queue's policy, a
gang's runtime estimate, its reservation); the DRA objects check a device's
version with ``kubecel``'s ``Semver``, and all of them count in ``quantity`` and
``resources``.

``kubecel`` (the values and functions of Kubernetes' CEL library: quantities
and semantic versions) sits here rather than in :mod:`..devices` because the
DRA objects use its ``Semver`` when they are built; the interpreter that
evaluates selectors with it is :mod:`..devices.dracel`.
"""

from queue_controller.core.model.decisions import (
    Decision,
    Reason,
    Verdict,
)
from queue_controller.core.model.dra import (
    AllocatedDevice,
    ClaimTemplate,
    Device,
    DeviceClass,
    DeviceRequest,
    ResourceClaim,
    ResourceSlice,
)
from queue_controller.core.model.objects import (
    AdmissionFairSharing,
    BorrowPolicy,
    BoundPod,
    Cohort,
    Container,
    FairStrategy,
    GpuHealth,
    LeftOut,
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
    UnhealthyGpu,
    WithinPolicy,
    Workload,
    WorkloadPhase,
    one_pod_set,
)
from queue_controller.core.model.quantity import (
    format_milli,
    parse_milli,
    parse_quantity,
)
from queue_controller.core.model.reservations import (
    Overrun,
    Reservation,
    ReservationPolicy,
    RuntimeEstimate,
    RuntimeSource,
)
from queue_controller.core.model.resources import (
    CPU,
    GPU,
    MEMORY,
    MIG_PREFIX,
    ONE,
    is_extended,
    scale,
    scarcity_rank,
)

__all__ = [
    "CPU",
    "GPU",
    "MEMORY",
    "MIG_PREFIX",
    "ONE",
    "AdmissionFairSharing",
    "AllocatedDevice",
    "BorrowPolicy",
    "BoundPod",
    "ClaimTemplate",
    "Cohort",
    "Container",
    "Decision",
    "Device",
    "DeviceClass",
    "DeviceRequest",
    "FairStrategy",
    "GpuHealth",
    "LeftOut",
    "Node",
    "NodeSelectorTerm",
    "Ordering",
    "Overrun",
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
    "ResourceClaim",
    "ResourceQuota",
    "ResourceSlice",
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
    "UnhealthyGpu",
    "Verdict",
    "WithinPolicy",
    "Workload",
    "WorkloadPhase",
    "format_milli",
    "is_extended",
    "one_pod_set",
    "parse_milli",
    "parse_quantity",
    "scale",
    "scarcity_rank",
]
