"""The index's node classes, built once per cycle: every node classified, or the classes
that ignore topology merged from those split by it.

A class key is what its nodes agree on: readiness, cordon, taints, GPU health, the label
values (and, for a topology index, presences) some gang reads, the name where a gang
selects by it, and allocatable.  Classes come in the order of their first node by name,
which is their sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import sub
from typing import Any

from queue_controller.core.devices.dims import BoundDims
from queue_controller.core.model.objects import Node, NodeFacts
from queue_controller.core.model.resources import Resources
from queue_controller.core.placement.nodeclasses import FreeVector, NodeClass

ClassKey = tuple[Any, ...]


@dataclass(slots=True)
class Classes:
    """Classes in order, by key, and where each node is (its class, its free vector)."""

    label_keys: tuple[str, ...]  # the label keys the keys hold values of, in order
    ordered: list[NodeClass] = field(default_factory=list)
    by_key: dict[ClassKey, NodeClass] = field(default_factory=dict)
    where: dict[str, tuple[NodeClass, FreeVector]] = field(default_factory=dict)


def classify(
    nodes: Sequence[Node],
    all_facts: Sequence[NodeFacts],
    used: Mapping[str, Resources],
    *,
    dims: tuple[str, ...],
    devices: BoundDims | None,
    label_keys: tuple[str, ...],
    present_keys: tuple[str, ...],
    by_name: bool,
) -> Classes:
    """Every node (sorted by name) into its class and bucket."""
    out = Classes(label_keys)
    by_key, ordered, where = out.by_key, out.ordered, out.where
    # This loop runs over every node at every cycle: it is written for speed.
    empty: Mapping[str, int] = {}
    zeros = (0,) * len(dims)
    for node, facts in zip(nodes, all_facts, strict=True):
        ready, unschedulable, taints, allocatable, gpus_down = facts
        alloc = tuple(map(allocatable.get, dims, zeros))
        key = (
            ready,
            unschedulable,
            taints,
            gpus_down,
            tuple(map(node.labels.get, label_keys)),
            tuple(key in node.labels for key in present_keys),
            node.name if by_name else None,
            alloc,
        )
        node_class = by_key.get(key)
        if node_class is None:
            node_class = NodeClass(len(ordered), node, alloc)
            by_key[key] = node_class
            ordered.append(node_class)
        node_used = used.get(node.name, empty)
        free = tuple(map(sub, alloc, map(node_used.get, dims, zeros))) if node_used else alloc
        if devices is not None and node_used:
            free = devices.refreshed(free, alloc)
        node_class.add(node.name, free)
        where[node.name] = (node_class, free)
    return out


def merge(fine: Classes, label_keys: tuple[str, ...]) -> Classes:
    """The classes that ignore topology, as unions of ``fine``'s (split by every Topology
    level too): the nodes are classified once, there.  A fine key is a key with more label
    values (and presences), so dropping them merges classes; the fine classes come in the
    order of their first node, so the merged ones' order and samples are classify()'s."""
    out = Classes(label_keys)
    keep = [fine.label_keys.index(key) for key in label_keys]
    by_key, ordered, where = out.by_key, out.ordered, out.where
    merged = set()
    for fine_key, fine_class in fine.by_key.items():
        labels = fine_key[4]
        key = (*fine_key[:4], tuple(labels[i] for i in keep), (), *fine_key[6:])
        node_class = by_key.get(key)
        if node_class is None:
            node_class = NodeClass(len(ordered), fine_class.sample, fine_class.allocatable)
            by_key[key] = node_class
            ordered.append(node_class)
        else:
            merged.add(node_class.index)
        buckets = node_class.buckets
        for free, names in fine_class.buckets.items():
            bucket = buckets.get(free)
            if bucket is None:
                buckets[free] = list(names)
            else:
                bucket.extend(names)
            for name in names:
                where[name] = (node_class, free)
    for index in merged:  # a bucket's names stay sorted (NodeClass.move bisects them)
        for names in ordered[index].buckets.values():
            names.sort()
    return out
