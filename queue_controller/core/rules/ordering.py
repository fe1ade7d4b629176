"""The order in which gangs are considered: priority first, then age.

Ties are broken by namespace and name so the order, and therefore every
decision, is the same no matter how the input was listed.
"""

from __future__ import annotations

from collections.abc import Iterable

from queue_controller.core.model.objects import PodTemplate, PriorityClass, Workload
from queue_controller.errors import InvalidSpecError

# Present in every cluster even when a dump leaves them out.
BUILTIN_PRIORITY_CLASSES = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}


class PriorityTable:
    def __init__(self, classes: Iterable[PriorityClass]) -> None:
        self._values = dict(BUILTIN_PRIORITY_CLASSES)
        self._default = 0
        for priority_class in classes:
            self._values[priority_class.name] = priority_class.value
            if priority_class.global_default:
                self._default = priority_class.value

    def value_of(self, template: PodTemplate) -> int:
        """The template's priority; an unknown class makes the workload invalid, as in the API."""
        name = template.priority_class_name
        if not name:
            return self._default
        try:
            return self._values[name]
        except KeyError:
            raise InvalidSpecError(
                f"PriorityClass {name!r} does not exist", field="priorityClassName"
            ) from None


def order_key(workload: Workload, priority: int) -> tuple[int, float, str, str, str]:
    return (-priority, workload.created, workload.namespace, workload.name, workload.kind)
