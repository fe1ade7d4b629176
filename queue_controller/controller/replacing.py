"""A gang's plan with its lost nodes replaced: the PodGroup status that says so, and the
maps the binder sends members by.

The core chose each replacement (core/cycle/replacement.py): one node takes every
member that a lost node had of one pod set.  Here the plan the PodGroup holds
(``placement``, ``podSetPlacement``, and each slice of ``topologyAssignment``) is
rewritten lost node -> replacement, as one merge patch, so that the binder and the
releaser, which read only the status, send the lost members' new pods there.  The
members still running are named nowhere in it: nothing about them changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queue_controller.api.v1alpha1 import PodGroupStatus
from queue_controller.controller.status import iso, topology_domain
from queue_controller.core.model import Replacement
from queue_controller.core.placement.topology.slices import common_prefix


@dataclass(frozen=True, slots=True)
class Rewritten:
    placement: dict[str, int]
    by_set: dict[str, dict[str, int]]  # empty for a gang of one pod set, as the status keeps it
    sliced: dict[str, list[dict[str, int]]]  # pod set -> its slices, where it has slices
    patch: dict[str, Any]  # the status merge patch from the old plan to this one


def _moved(plan: Mapping[str, int], lost: str, node: str) -> dict[str, int]:
    out = dict(plan)
    members = out.pop(lost, 0)
    if members:
        out[node] = out.get(node, 0) + members
    return out


def narrowed(domain: str, replacement: Replacement) -> str:
    """A pod set's recorded domain (the narrowest holding its members) once a replacement
    took the lost node's members: the lost node itself, if every member was there (the
    domain ends with its name), becomes the replacement's own domain; otherwise the two
    share the domain both lie in, which may be broader than the old one."""
    if not domain or not replacement.node_domain:
        return domain
    parts = tuple(domain.split("/"))
    if parts[-1] == replacement.lost:
        return replacement.node_domain
    return "/".join(common_prefix([parts, tuple(replacement.node_domain.split("/"))]))


def rewrite(
    status: PodGroupStatus, first: str, replacements: Sequence[Replacement], now: float
) -> Rewritten:
    """``status``'s plan with each replacement made; ``first``: the gang's first pod set
    (the one a plan without podSetPlacement is of)."""
    placement = dict(status.placement)
    by_set = {name: dict(nodes) for name, nodes in status.podSetPlacement.items()}
    sliced = {
        name: [dict(one) for one in a.slices]
        for name, a in status.topologyAssignment.items()
        if a.slices
    }
    domains = {name: a.domain for name, a in status.topologyAssignment.items()}
    for r in replacements:
        plan = by_set.get(r.pod_set) if by_set else placement if r.pod_set == first else None
        if plan is None or r.lost not in plan:
            continue  # the plan changed since the cycle's copy: the next cycle looks again
        moving = plan[r.lost]
        if by_set:
            by_set[r.pod_set] = _moved(plan, r.lost, r.node)
            left = placement.get(r.lost, 0) - moving
            placement = {n: c for n, c in placement.items() if n != r.lost}
            if left > 0:
                placement[r.lost] = left
            placement[r.node] = placement.get(r.node, 0) + moving
        else:
            placement = _moved(placement, r.lost, r.node)
        if r.pod_set in sliced:
            sliced[r.pod_set] = [_moved(one, r.lost, r.node) for one in sliced[r.pod_set]]
        if r.pod_set in domains:
            domains[r.pod_set] = narrowed(domains[r.pod_set], r)
    patch: dict[str, Any] = {
        "placement": {**dict.fromkeys(status.placement), **placement},
        "replacedNodes": [
            *(n.model_dump(mode="json", exclude_none=True) for n in status.replacedNodes),
            *(
                {
                    "node": r.lost,
                    "replacement": r.node,
                    "podSet": r.pod_set,
                    "reason": r.why,
                    "replacedAt": iso(now),
                }
                for r in replacements
            ),
        ][-64:],  # the CRD keeps the latest 64
    }
    if by_set:
        patch["podSetPlacement"] = {
            name: {**dict.fromkeys(status.podSetPlacement.get(name, {})), **nodes}
            for name, nodes in by_set.items()
        }
    changed = {
        name: domain
        for name, domain in domains.items()
        if domain != status.topologyAssignment[name].domain
    }
    if sliced or changed:
        patch["topologyAssignment"] = {
            name: {
                **({"slices": sliced[name]} if name in sliced else {}),
                **({"domain": changed[name]} if name in changed else {}),
            }
            for name in sorted({*sliced, *changed})
        }
    if changed:
        patch["topologyDomain"] = topology_domain({n: d for n, d in domains.items() if d})
    return Rewritten(placement, by_set, sliced, patch)
