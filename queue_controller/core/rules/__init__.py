"""What the objects mean before anything is placed.

A pod's effective requests (``requests``), which nodes are usable and what
they have free (``nodes``, with ``gpuhealth``), the order of the queue
(``ordering``) and requeue backoff (``requeue``), what a gang's topology
request asks (``topology``: its levels, not the domains that satisfy it,
which are :mod:`..placement.topology`), and the gangs prepared for a cycle
(``prepared``, which uses the others and :mod:`..devices.dims`).
"""

from queue_controller.core.rules.gpuhealth import (
    GPU_COUNT_LABEL,
    is_gpu_resource,
    unhealthy_indices,
)
from queue_controller.core.rules.nodes import (
    HOSTNAME_LABEL,
    exclusion,
    usable_allocatable,
)
from queue_controller.core.rules.ordering import (
    BUILTIN_PRIORITY_CLASSES,
    PriorityTable,
)
from queue_controller.core.rules.prepared import (
    TERMINATED_PHASES,
    prepare,
)
from queue_controller.core.rules.requests import (
    pod_request,
)
from queue_controller.core.rules.requeue import (
    Requeue,
    pods_ready_timeout,
    requeue,
)
from queue_controller.core.rules.topology import (
    HOSTNAME,
)

__all__ = [
    "BUILTIN_PRIORITY_CLASSES",
    "GPU_COUNT_LABEL",
    "HOSTNAME",
    "HOSTNAME_LABEL",
    "TERMINATED_PHASES",
    "PriorityTable",
    "Requeue",
    "exclusion",
    "is_gpu_resource",
    "pod_request",
    "pods_ready_timeout",
    "prepare",
    "requeue",
    "unhealthy_indices",
    "usable_allocatable",
]
