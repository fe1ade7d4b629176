"""What nodes offer of DRA: their slices' devices, those claims hold, GPUs out of service.

Which devices a node offers: those of the ResourceSlices published for it
(``spec.nodeName``), less GPUs its health report took out of service.  Slices
that are not bound to one node (network devices) are not placed on.
"""

from __future__ import annotations

from collections.abc import Mapping

from queue_controller.core.model.dra import Device
from queue_controller.core.model.objects import Node, Snapshot


def offering(node: Node, extra: Mapping[str, int]) -> Node:
    return Node(
        name=node.name,
        allocatable={**node.allocatable, **extra},
        labels=node.labels,
        taints=node.taints,
        unschedulable=node.unschedulable,
        conditions=node.conditions,
        capacity={**node.capacity, **extra} if node.capacity else {},
        gpu_health=node.gpu_health,
    )


def offered(snapshot: Snapshot) -> dict[str, list[tuple[tuple[str, str], Device]]]:
    """Node -> its devices ((driver, pool), device), less GPUs reported unhealthy."""
    nodes = {node.name: node for node in snapshot.nodes}
    out: dict[str, list[tuple[tuple[str, str], Device]]] = {}
    for resource_slice in snapshot.resource_slices:
        node = nodes.get(resource_slice.node)
        if node is None:
            continue  # not bound to one node, or a node that is gone
        sick = _sick(node)
        for device in resource_slice.devices:
            if sick is not None and _is_sick(device, sick):
                continue
            out.setdefault(node.name, []).append(
                ((resource_slice.driver, resource_slice.pool), device)
            )
    return out


def _sick(node: Node) -> tuple[bool, frozenset[str], frozenset[int]] | None:
    health = node.gpu_health
    if health is None:
        return None
    return (
        health.whole_node,
        frozenset(g.uuid for g in health.unhealthy if g.uuid),
        frozenset(g.index for g in health.unhealthy),
    )


def _is_sick(device: Device, sick: tuple[bool, frozenset[str], frozenset[int]]) -> bool:
    whole, uuids, indexes = sick
    attributes = device.attributes.get(device.driver, {})
    uuid = attributes.get("uuid")
    if whole or (isinstance(uuid, str) and uuid in uuids):
        return True
    # A whole GPU by its index, when the report gave no UUID (a MIG device's index
    # is its parent's, and goes with it).
    parent = attributes.get("parentUUID")
    if isinstance(parent, str) and parent in uuids:
        return True
    index = attributes.get("parentIndex", attributes.get("index"))
    return isinstance(index, int) and not isinstance(index, bool) and index in indexes


def held(snapshot: Snapshot) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) held by an allocated claim -> the node it is on."""
    where: dict[tuple[str, str], str] = {
        (s.driver, s.pool): s.node for s in snapshot.resource_slices if s.node
    }
    held: dict[tuple[str, str, str], str] = {}
    for claim in snapshot.resource_claims:
        for device in claim.allocated:
            node = where.get((device.driver, device.pool))
            if node:
                held[(device.driver, device.pool, device.device)] = node
    return held
