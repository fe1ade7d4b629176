"""Node classes and what one gang shape can get from each: the index's building blocks.

A *class* is nodes alike in everything a pending gang can ask about; inside it,
nodes with the same free capacity share a *bucket*.  A *view* is what one gang
shape (its fit key) gets from one class, patched as nodes move between buckets
(see :mod:`.fit` for why), and what a class is keyed by: the facts read off each
node, and the labels some gang selects on or keeps inside domains of.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from operator import floordiv

from queue_controller.core.model.objects import Node, NodeFacts
from queue_controller.core.placement.shapes import GangShape
from queue_controller.core.rules.gpuhealth import all_gpus_unhealthy
from queue_controller.core.rules.nodes import usable_allocatable
from queue_controller.core.rules.topology import HOSTNAME

FreeVector = tuple[int, ...]


@dataclass(slots=True)
class MemberRequest:
    """A gang shape translated to the index's dimensions."""

    pairs: tuple[tuple[int, int], ...]  # (dimension, amount), scarcest first
    dims: Callable[[FreeVector], tuple[int, ...]]
    amounts: tuple[int, ...]
    foreign: tuple[int, ...]  # accelerator dimensions the gang does not use
    # DRA: one member's device dimensions (name, milli), taken from the base ones on
    # commit rather than subtracted (see devicedims), and their positions.
    devices: tuple[tuple[str, int], ...] = ()
    device_dims: frozenset[int] = frozenset()
    # Free vector -> members: free vectors repeat over classes (racks of alike nodes).
    known: dict[FreeVector, int] = field(default_factory=dict)

    def fits(self, free: FreeVector) -> int:
        """Members that fit in ``free``: the tightest resource decides."""
        # An overcommitted node (free below zero) takes nothing, not "negative members".
        most: int = min(map(floordiv, self.dims(free), self.amounts))
        return max(most, 0)

    def fits_known(self, free: FreeVector) -> int:
        """:meth:`fits`, remembered per free vector (the domain totals ask again and again)."""
        found = self.known.get(free)
        if found is None:
            found = self.known[free] = self.fits(free)
        return found


@dataclass(frozen=True, slots=True)
class ClassShortfall:
    """Per class, the material of a NoNodeFit message."""

    usable_nodes: int
    blocked: Mapping[str, int]  # "Insufficient <resource>" -> nodes
    scarce_free: int  # the gang's scarcest resource, free over all nodes of the class
    scarce_most: int  # ... and the most of it on any one node


Rank = tuple[bool, tuple[int, ...], bool, int]


@dataclass(slots=True)
class ClassView:
    """What one gang shape can get from one class, kept current as nodes move."""

    request: MemberRequest
    node_class: NodeClass
    capacity: int
    # Bucket -> (members each of its nodes takes, > 0; its best-fit rank).
    fitting: dict[FreeVector, tuple[int, Rank]]
    hopeless: bool  # not even an empty node of the class takes a member
    seen: int  # how much of the class's move log is applied
    shortfall: ClassShortfall | None = None  # built when a gang is refused

    def rank(self, free: FreeVector) -> Rank:
        """Best-fit order: the same for any member count, because subtracting the
        same members from every bucket keeps their order."""
        node_class = self.node_class
        return (
            # Would strand accelerators the gang cannot use.
            any(free[i] > 0 for i in self.request.foreign if node_class.allocatable[i] > 0),
            self.request.dims(free),  # least left of the gang's resources, scarcest first
            free == node_class.allocatable,  # empty nodes last
            node_class.index,
        )

    def moved(self, old: FreeVector, new: FreeVector, old_gone: bool) -> None:
        before = self.fitting[old][0] if old in self.fitting else 0
        after = self.request.fits(new)
        self.capacity += after - before
        if old_gone and before:
            del self.fitting[old]
        if after:
            self.fitting[new] = (after, self.rank(new))


@dataclass(slots=True)
class NodeClass:
    index: int
    sample: Node
    allocatable: FreeVector
    buckets: dict[FreeVector, list[str]] = field(default_factory=dict)
    views: dict[Hashable, ClassView] = field(default_factory=dict)  # by shape fit key
    # Every move so far: (old free, new free, whether the old bucket emptied).
    moves: list[tuple[FreeVector, FreeVector, bool]] = field(default_factory=list)

    def add(self, name: str, free: FreeVector) -> None:
        insort(self.buckets.setdefault(free, []), name)

    def move(self, name: str, old: FreeVector, new: FreeVector) -> None:
        names = self.buckets[old]
        del names[bisect_left(names, name)]
        old_gone = not names
        if old_gone:
            del self.buckets[old]
        self.add(name, new)
        self.moves.append((old, new, old_gone))

    def node_count(self) -> int:
        return sum(map(len, self.buckets.values()))


def node_facts(node: Node) -> NodeFacts:
    """What the index reads of a node, computed once per Node object."""
    facts = node._facts
    if facts is None:
        facts = (
            node.conditions.get("Ready"),
            node.unschedulable,
            tuple(sorted(set(node.taints), key=repr)) if node.taints else (),
            usable_allocatable(node),
            all_gpus_unhealthy(node),
        )
        object.__setattr__(node, "_facts", facts)
    return facts


def referenced_node_fields(
    shapes: Iterable[GangShape], *, by_topology: bool
) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """Label keys any gang selects on or keeps inside domains of; label keys whose mere
    presence matters; and whether any gang selects on the node name."""
    keys: set[str] = set()
    present: set[str] = set()
    by_name = False
    for shape in shapes:
        if by_topology and shape.topology is not None:
            # Every class then lies inside one domain at every level.
            keys.update(shape.topology.levels)
            if shape.topology.has_hostname:
                # The node itself is the Topology's last level: a node without the label is
                # outside it. Only whether it has one splits classes (its value is the node's
                # own name, which would make every node a class of its own).
                present.add(HOSTNAME)
        keys.update(shape.template.node_selector)
        for term in shape.template.required_affinity or ():
            keys.update(r.key for r in term.match_expressions)
            by_name = by_name or bool(term.match_fields)
    return tuple(sorted(keys)), tuple(sorted(present - keys)), by_name
