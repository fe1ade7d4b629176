"""``queue-controller check``: the invariants of gang admission, checked on a live
cluster or a dump, from what the Pods, Nodes and workloads say."""

from queue_controller.check.invariants import Timing, violations
from queue_controller.check.looks import Look, cluster_objects, look
from queue_controller.check.violations import DESCRIPTIONS, Invariant, Violation
from queue_controller.check.watching import Watch

__all__ = [
    "DESCRIPTIONS",
    "Invariant",
    "Look",
    "Timing",
    "Violation",
    "Watch",
    "cluster_objects",
    "look",
    "violations",
]
