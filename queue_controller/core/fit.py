"""Gang placement over equivalence classes of nodes.

Why classes: a GPU cluster is a few pools of identical machines.  Nodes that
agree on everything a pending gang can ask about (readiness, cordon, taints,
the label keys some gang selects on, allocatable) are one *class*, and the
filters run once per class instead of once per node.  Inside a class, nodes
with the same free capacity (over the resources some gang requests) share a
*bucket*, so capacity is counted once per bucket.  Gangs are identical pods,
so a bucket's capacity for a gang is one integer division per resource.

Feasibility is exact: members are identical, so a gang of ``n`` fits iff the
sum over nodes of ``min_r floor(free_r / request_r)`` is at least ``n``.

Placement heuristic (documented in the README), chosen to keep whole nodes
free for bigger gangs without spreading gangs thin:

1. If one node can hold every member that remains, use the *best fit*: the
   node left with the least of the gang's resources (scarcest first), never
   one that strands accelerators the gang does not use, and a node that is
   already in use before an empty one.
2. Otherwise fill the nodes that can hold the most members, completely, and
   repeat.  Taking the largest capacities first gives the fewest nodes, and
   every node but the last is filled to the gang's limit.

Ties always break on class order and node name, so the result is deterministic.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from queue_controller.core.explain import Scatter, explain_shortfall
from queue_controller.core.model import Node
from queue_controller.core.nodes import exclusion, usable_allocatable
from queue_controller.core.resources import Resources, is_extended, scarcity_rank
from queue_controller.core.shapes import GangShape, Placement, Shortfall

FreeVector = tuple[int, ...]


@dataclass(slots=True)
class _NodeClass:
    index: int
    sample: Node
    allocatable: FreeVector
    buckets: dict[FreeVector, list[str]] = field(default_factory=dict)
    version: int = 0

    def add(self, name: str, free: FreeVector) -> None:
        insort(self.buckets.setdefault(free, []), name)

    def remove(self, name: str, free: FreeVector) -> None:
        names = self.buckets[free]
        del names[bisect_left(names, name)]
        if not names:
            del self.buckets[free]


@dataclass(frozen=True, slots=True)
class _Eligibility:
    classes: tuple[_NodeClass, ...]
    excluded: Mapping[str, int]  # exclusion -> node count


@dataclass(slots=True)
class _Candidate:
    """One bucket as seen by one gang."""

    node_class: _NodeClass
    free: FreeVector
    names: list[str]
    capacity: int
    taken: int = 0

    def next_name(self) -> str:
        return self.names[self.taken]


class EquivalenceIndex:
    """The fast placer: nodes grouped into classes and buckets."""

    def __init__(
        self,
        nodes: Sequence[Node],
        used: Mapping[str, Resources],
        shapes: Iterable[GangShape],
    ) -> None:
        shapes = list(shapes)
        self._dims: tuple[str, ...] = tuple(
            sorted({name for shape in shapes for name in shape.request}, key=scarcity_rank)
        )
        self._dim_index = {name: i for i, name in enumerate(self._dims)}
        self._accelerator_dims = tuple(i for i, name in enumerate(self._dims) if is_extended(name))
        label_keys, by_name = _referenced_node_fields(shapes)
        self._classes: list[_NodeClass] = []
        by_key: dict[Hashable, _NodeClass] = {}
        self._where: dict[str, tuple[_NodeClass, FreeVector]] = {}
        empty: Mapping[str, int] = {}
        for node in sorted(nodes, key=lambda n: n.name):
            allocatable = usable_allocatable(node)
            alloc = tuple(allocatable.get(d, 0) for d in self._dims)
            key = (
                node.conditions.get("Ready"),
                node.unschedulable,
                tuple(sorted(set(node.taints), key=repr)),
                tuple(node.labels.get(k) for k in label_keys),
                node.name if by_name else None,
                alloc,
            )
            node_class = by_key.get(key)
            if node_class is None:
                node_class = _NodeClass(len(self._classes), node, alloc)
                by_key[key] = node_class
                self._classes.append(node_class)
            node_used = used.get(node.name, empty)
            free = tuple(a - node_used.get(d, 0) for a, d in zip(alloc, self._dims, strict=True))
            node_class.add(node.name, free)
            self._where[node.name] = (node_class, free)
        self._eligibility: dict[Hashable, _Eligibility] = {}
        self._capacity: dict[Hashable, tuple[tuple[int, ...], int]] = {}

    # -- eligibility and capacity ------------------------------------------

    def _eligible(self, shape: GangShape) -> _Eligibility:
        cached = self._eligibility.get(shape.constraint_key)
        if cached is not None:
            return cached
        classes: list[_NodeClass] = []
        excluded: Counter[str] = Counter()
        for node_class in self._classes:
            reason = exclusion(node_class.sample, shape.template)
            if reason is None:
                classes.append(node_class)
            else:
                excluded[reason.describe()] += sum(map(len, node_class.buckets.values()))
        result = _Eligibility(tuple(classes), excluded)
        self._eligibility[shape.constraint_key] = result
        return result

    def _request(self, shape: GangShape) -> tuple[tuple[int, int], ...]:
        return tuple(
            (self._dim_index[name], amount)
            for name, amount in sorted(shape.request.items(), key=lambda kv: scarcity_rank(kv[0]))
        )

    def capacity(self, shape: GangShape) -> int:
        """How many members of ``shape`` the cluster could take at once right now."""
        eligible = self._eligible(shape)
        versions = tuple(c.version for c in eligible.classes)
        cached = self._capacity.get(shape.key)
        if cached is not None and cached[0] == versions:
            return cached[1]
        request = self._request(shape)
        total = 0
        for node_class in eligible.classes:
            for free, names in node_class.buckets.items():
                total += _fits(free, request) * len(names)
        self._capacity[shape.key] = (versions, total)
        return total

    # -- the Placer protocol -------------------------------------------------

    def try_place(self, shape: GangShape, count: int) -> Placement | Shortfall:
        fits = self.capacity(shape)
        if fits < count:
            return Shortfall(fits, count, self._explain(shape, count, fits))
        return Placement(self._choose(shape, count))

    def commit(self, shape: GangShape, placement: Placement) -> None:
        request = self._request(shape)
        for name, members in placement.nodes.items():
            node_class, free = self._where[name]
            after = list(free)
            for i, amount in request:
                after[i] -= amount * members
            new_free = tuple(after)
            node_class.remove(name, free)
            node_class.add(name, new_free)
            node_class.version += 1
            self._where[name] = (node_class, new_free)

    # -- choosing nodes ------------------------------------------------------

    def _choose(self, shape: GangShape, count: int) -> dict[str, int]:
        request = self._request(shape)
        requested = {i for i, _ in request}
        foreign = tuple(i for i in self._accelerator_dims if i not in requested)
        candidates = [
            _Candidate(node_class, free, names, capacity)
            for node_class in self._eligible(shape).classes
            for free, names in node_class.buckets.items()
            if (capacity := _fits(free, request)) > 0
        ]

        def leftover(c: _Candidate, members: int) -> tuple[object, ...]:
            return (
                any(c.free[i] > 0 for i in foreign),  # would strand other accelerators
                tuple(c.free[i] - amount * members for i, amount in request),
                c.free == c.node_class.allocatable,  # empty nodes last
                c.node_class.index,
                c.next_name(),
            )

        placement: dict[str, int] = {}
        remaining = count
        while remaining > 0:
            open_candidates = [c for c in candidates if c.taken < len(c.names)]
            whole = [c for c in open_candidates if c.capacity >= remaining]
            if whole:
                best = min(whole, key=lambda c: leftover(c, remaining))
                placement[best.next_name()] = remaining
                best.taken += 1
                break
            biggest = min(open_candidates, key=lambda c: (-c.capacity, *leftover(c, c.capacity)))
            nodes = min(len(biggest.names) - biggest.taken, remaining // biggest.capacity)
            for _ in range(nodes):
                placement[biggest.next_name()] = biggest.capacity
                biggest.taken += 1
            remaining -= nodes * biggest.capacity
        return placement

    # -- explaining ----------------------------------------------------------

    def _explain(self, shape: GangShape, count: int, fits: int) -> str:
        eligible = self._eligible(shape)
        request = self._request(shape)
        blocked: Counter[str] = Counter(eligible.excluded)
        usable = 0
        scarce_index, scarce_amount = request[0]
        total_free = most_free = 0
        for node_class in eligible.classes:
            for free, names in node_class.buckets.items():
                nodes = len(names)
                if _fits(free, request) > 0:
                    usable += nodes
                limiting = min(request, key=lambda r: free[r[0]] // r[1])
                blocked[f"Insufficient {self._dims[limiting[0]]}"] += nodes
                spare = max(0, free[scarce_index])
                total_free += spare * nodes
                most_free = max(most_free, spare)
        scarce = self._dims[scarce_index]
        scatter = Scatter(scarce, total_free, most_free, scarce_amount)
        return explain_shortfall(
            fits=fits,
            needed=count,
            usable_nodes=usable,
            blocked=blocked,
            scatter=scatter if most_free < scarce_amount else None,
        )


def _fits(free: FreeVector, request: tuple[tuple[int, int], ...]) -> int:
    """Members that fit in ``free``: the tightest resource decides."""
    most: int | None = None
    for i, amount in request:
        n = free[i] // amount
        if most is None or n < most:
            most = n
    # An overcommitted node (free below zero) takes nothing rather than "negative members".
    return max(most or 0, 0)


def _referenced_node_fields(shapes: Iterable[GangShape]) -> tuple[tuple[str, ...], bool]:
    """Label keys any gang selects on, and whether any selects on the node name."""
    keys: set[str] = set()
    by_name = False
    for shape in shapes:
        keys.update(shape.template.node_selector)
        for term in shape.template.required_affinity or ():
            keys.update(r.key for r in term.match_expressions)
            by_name = by_name or bool(term.match_fields)
    return tuple(sorted(keys)), by_name
