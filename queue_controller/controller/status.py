"""PodGroup status helpers: RFC 3339 times and conditions that follow the API conventions."""

from __future__ import annotations

from typing import Any

from queue_controller.api.v1alpha1 import PodGroup
from queue_controller.kube.fields import iso

Obj = dict[str, Any]
__all__ = ["Update", "conditions_with", "iso"]


Update = tuple[str, bool, str, str]  # condition type, status, reason, message


def conditions_with(group: PodGroup | None, now: float, *updates: Update) -> list[Obj]:
    """The PodGroup's conditions with ``updates`` applied.

    A condition's ``lastTransitionTime`` moves only when its status changes, as
    the API conventions ask, so it still says when the state began.
    """
    held = group.status.conditions if group is not None else []
    conditions = [c.model_dump(mode="json", exclude_none=True) for c in held]
    for kind, status, reason, message in updates:
        value = "True" if status else "False"
        previous = next((c for c in conditions if c.get("type") == kind), None)
        since = iso(now)
        if previous is not None and previous.get("status") == value:
            since = previous.get("lastTransitionTime", since)
        conditions = [c for c in conditions if c.get("type") != kind]
        conditions.append(
            {
                "type": kind,
                "status": value,
                "reason": reason,
                "message": message[:1024],
                "lastTransitionTime": since,
            }
        )
    return conditions
