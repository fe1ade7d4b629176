"""Words for why a gang does not fit, shared by every placer.

The message must let a user act: how many members fit against how many are
needed, the binding constraint, what excluded the other nodes, and, for the
fragmentation trap, that the free accelerators exist but are scattered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from queue_controller.core.model.quantity import format_milli
from queue_controller.core.rules.nodes import SELF_IMPOSED


@dataclass(frozen=True, slots=True)
class Scatter:
    """How the scarcest requested resource is spread over the eligible nodes."""

    resource: str
    total_free: int
    most_on_one_node: int
    per_member: int
    label: str = ""  # what to call the resource, when not its name (DRA devices)


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def explain_shortfall(
    *,
    fits: int,
    needed: int,
    usable_nodes: int,
    blocked: Mapping[str, int],
    scatter: Scatter,
) -> str:
    """Build the ``NoNodeFit`` message.

    ``blocked`` gives, for every node, the one thing that stops it taking
    (more) members, counted by reason: "NotReady", "UntoleratedTaint ...", or
    "Insufficient nvidia.com/gpu" (for a node that takes some members, the
    resource that runs out first).
    """
    head = f"{fits} of {needed} members fit at once"
    if usable_nodes:
        head += f" (on {_nodes(usable_nodes)})"
    if not blocked:
        return f"{head}; the cluster has no nodes"
    # The binding constraint is what stops the nodes the gang asked for; its own
    # selector or affinity binds only when no node matches them at all.
    ranked = sorted(
        blocked.items(),
        key=lambda item: (item[0].split(" ", 1)[0] in SELF_IMPOSED, -item[1], item[0]),
    )
    binding, binding_nodes = ranked[0]
    parts = [f"{head}; binding constraint: {binding} ({_nodes(binding_nodes)})"]
    if len(ranked) > 1:
        parts.append("also " + ", ".join(f"{reason} ({_nodes(n)})" for reason, n in ranked[1:]))
    # The fragmentation trap: enough free in total, yet no single node holds one member.
    scattered = scatter.most_on_one_node < scatter.per_member <= scatter.total_free
    if scattered:
        resource = scatter.resource
        parts.append(
            f"{format_milli(scatter.total_free, resource)} {scatter.label or resource} free on "
            "eligible nodes "
            f"but at most {format_milli(scatter.most_on_one_node, resource)} on any one node, "
            f"and each member needs {format_milli(scatter.per_member, resource)}"
        )
    return "; ".join(parts)


def count_of(n: int, noun: str) -> str:
    """``1 member``, ``2 members``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
