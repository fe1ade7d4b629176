"""PodGroup status helpers: RFC 3339 times, conditions that follow the API conventions, and
where a topology-aware gang was admitted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queue_controller.api.v1alpha1 import PodGroup
from queue_controller.kube.fields import iso

Obj = dict[str, Any]
__all__ = ["Update", "conditions_with", "iso", "topology_assignment", "topology_domain"]


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


def topology_domain(domains: Mapping[str, str]) -> str:
    """status.topologyDomain: the one pod set's domain, or "set=domain, ..." for several."""
    if len(domains) == 1:
        (domain,) = domains.values()
        return domain
    return ", ".join(f"{pod_set}={domain}" for pod_set, domain in sorted(domains.items()))


def topology_assignment(
    group: PodGroup | None,
    domains: Mapping[str, str],
    slices: Mapping[str, tuple[Mapping[str, int], ...]],
) -> Obj | None:
    """status.topologyAssignment as a merge patch: each pod set's domain and slices.

    A merge patch merges maps, so pod sets of an earlier assignment that this one
    lacks get an explicit null; None (remove it all) when nothing asked for a topology.
    """
    wanted: Obj = {
        pod_set: {
            "domain": domains.get(pod_set, ""),
            "slices": [dict(one) for one in slices.get(pod_set, ())],
        }
        for pod_set in sorted({*domains, *slices})
    }
    if not wanted:
        return None
    held = group.status.topologyAssignment if group is not None else {}
    return dict.fromkeys(held) | wanted


def room_patch(
    held: Mapping[str, Mapping[str, int]], wanted: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int | None] | None]:
    """A merge patch from ``held`` to ``wanted`` room (pod set -> node -> members), as
    nominatedPlacement and reservedPlacement hold it: a merge patch merges maps, so the
    pod sets and nodes of a room taken earlier that the new one lacks need explicit nulls."""
    out: dict[str, dict[str, int | None] | None] = dict.fromkeys(held)
    for pod_set, nodes in wanted.items():
        gone: dict[str, int | None] = dict.fromkeys(held.get(pod_set, {}))
        out[pod_set] = gone | dict(nodes)
    return out
