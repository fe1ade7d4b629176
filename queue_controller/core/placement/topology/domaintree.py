"""The domains of a Topology over the node classes, and one gang shape's room in each.

A cycle builds the tree once per (Topology levels, node eligibility): the
equivalence index splits classes by every label a Topology names, so each class
lies in exactly one domain at every level and the tree's leaves are lists of
classes.  Nodes that lack one of the labels are outside the topology.

What a gang shape can get from each domain (:class:`Totals`) is the sum of what
it gets from each class, so it is kept current the way the index keeps its
class views: the index logs which classes moved, and the totals re-add only
those classes, along their few ancestors.  Each search then costs in domains,
never in nodes times members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from queue_controller.core.rules.topology import UNCONSTRAINED

if TYPE_CHECKING:
    from queue_controller.core.placement.nodeclasses import ClassView, MemberRequest, NodeClass

ViewOf = Callable[[int], "ClassView"]  # class index -> the shape's view of it, current


@dataclass(slots=True, eq=False)
class Domain:
    id: int  # index into the Totals' arrays
    path: tuple[str, ...]  # label values from the broadest level down; () for the root
    depth: int  # UNCONSTRAINED for the root
    parent: Domain | None
    children: dict[str, Domain] = field(default_factory=dict)
    classes: list[int] = field(default_factory=list)  # every class inside it

    def chain(self) -> list[Domain]:
        """Its ancestors and itself, broadest first (the root left out)."""
        out: list[Domain] = []
        domain: Domain | None = self
        while domain is not None and domain.depth != UNCONSTRAINED:
            out.append(domain)
            domain = domain.parent
        return out[::-1]


class Skeleton:
    """The domains that hold some class a shape may use, by depth."""

    def __init__(
        self,
        levels: Sequence[str],
        classes: Iterable[NodeClass],
        *,
        required: Sequence[str] = (),
    ) -> None:
        """``required``: labels a node must also carry to be inside (the hostname, where
        the Topology's last level is the node: the classes are split by its presence)."""
        self.root = Domain(0, (), UNCONSTRAINED, None)
        self.domains = [self.root]
        self.by_depth: dict[int, list[Domain]] = {depth: [] for depth in range(len(levels))}
        self.chains: dict[int, tuple[Domain, ...]] = {}  # class -> domains holding it
        self.nodes = [0]  # per domain, by id: fixed for the cycle
        self.chain_ids: dict[int, tuple[int, ...]] = {}  # class -> its chain's domain ids
        self.node_classes: dict[int, NodeClass] = {}  # what a refusal's message reads
        # (class, dimension) -> (its move count when read, free over its nodes, most on one).
        self._free: dict[tuple[int, int], tuple[int, int, int]] = {}
        # (dimension, depth, per node) -> (move-log length, (free in all, most in one)).
        self.free_seen: dict[tuple[int, int, bool], tuple[int, tuple[int, int]]] = {}
        # Path -> domain: a group's pod sets have a tree each (their nodes may differ), and
        # meet in the domain of one path.
        self.by_path: dict[tuple[str, ...], Domain] = {(): self.root}
        for node_class in classes:
            labels = node_class.sample.labels
            path = [labels.get(key) for key in levels]
            if any(value is None for value in path) or any(k not in labels for k in required):
                continue  # outside the topology: a topology gang never goes there
            domain = self.root
            chain = [domain]
            for depth, value in enumerate(path):
                assert value is not None
                child = domain.children.get(value)
                if child is None:
                    child = Domain(len(self.domains), (*domain.path, value), depth, domain)
                    domain.children[value] = child
                    self.domains.append(child)
                    self.nodes.append(0)
                    self.by_depth[depth].append(child)
                    self.by_path[child.path] = child
                domain = child
                chain.append(domain)
            count = node_class.node_count()
            for member in chain:
                member.classes.append(node_class.index)
                self.nodes[member.id] += count
            self.chains[node_class.index] = tuple(chain)
            self.chain_ids[node_class.index] = tuple(member.id for member in chain)
            self.node_classes[node_class.index] = node_class

    def class_free(self, index: int, resource: int) -> tuple[int, int]:
        """A dimension free over a class's nodes, and the most on any one of them: what a
        refusal's message reads, kept until the class moves (refusals repeat, classes are
        many and mostly still)."""
        node_class = self.node_classes[index]
        key = (index, resource)
        found = self._free.get(key)
        if found is not None and found[0] == len(node_class.moves):
            return found[1], found[2]
        total = most = 0
        for free, names in node_class.buckets.items():
            spare = max(0, free[resource])
            total += spare * len(names)
            most = max(most, spare)
        self._free[key] = (len(node_class.moves), total, most)
        return total, most

    def leaves(self) -> list[Domain]:
        depth = len(self.by_depth) - 1
        return self.by_depth[depth] if depth >= 0 else [self.root]


class Totals:
    """One shape's room in every domain: members, slices, empty nodes, nodes.

    Slices are counted where they are cut: per node (``node_slice``), or per domain
    of a slice level (:meth:`domain_slices`: its depth and size), whose ``members // k``
    is added up through its ancestors as its members change.  The latter are attached
    to the members table rather than kept in a table of their own: gangs of the same
    members asking for slices of any size, or none, then share one table, and a class
    that moved is re-added once for all of them.

    Layered slices (``layers``: (depth, size) per layer, outermost first) are counted
    layer by layer, exactly: a domain of a layer's level holds (the next layer's slices
    inside it) // (its size / the next size) of its own, since any such slices of its
    make one of them; the innermost counts as a single layer does.  ``layer_units``
    holds, for each domain, the slices of the outermost layer at or below its depth.
    """

    def __init__(
        self,
        skeleton: Skeleton,
        view_of: ViewOf,
        request: MemberRequest,
        *,
        node_slice: int = 0,
        layers: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.skeleton = skeleton
        self.view_of = view_of
        self.request = request
        self.node_slice = node_slice  # k when slices are per node, else 0
        # (depth, k) -> whole slices per domain, at and above that depth.
        self._slices: dict[tuple[int, int], list[int]] = {}
        self.layers = layers
        size = len(skeleton.domains)
        self.layer_units = [0] * size if layers else []
        self._layer_base = [0] * size if layers else []
        # depth -> what the next layer's slices are divided by at that depth.
        self._divide = {d: k // layers[i + 1][1] for i, (d, k) in enumerate(layers[:-1])}
        self.members = [0] * size
        self.node_units = [0] * size
        self.empty = [0] * size
        self.contributions: dict[int, tuple[int, int, int]] = {}  # (members, units, empty)
        self.seen = 0
        for index in skeleton.chains:
            self._add(index)

    def domain_slices(self, depth: int, k: int) -> list[int]:
        """Whole slices of ``k`` members per domain, each inside one domain of ``depth``,
        counted at and above that depth (0 below it); kept current from now on."""
        slices = self._slices.get((depth, k))
        if slices is None:
            slices = [0] * len(self.skeleton.domains)
            for domain in self.skeleton.by_depth.get(depth, ()):
                whole = self.members[domain.id] // k
                ancestor: Domain | None = domain
                while ancestor is not None:
                    slices[ancestor.id] += whole
                    ancestor = ancestor.parent
            self._slices[(depth, k)] = slices
        return slices

    def sync(self, moved: Sequence[int]) -> None:
        """Re-add the classes that moved since the last look."""
        behind = len(moved) - self.seen
        changed: Iterable[int] = (
            self.skeleton.chains if behind > len(self.skeleton.chains) else set(moved[self.seen :])
        )
        for index in changed:
            if index in self.skeleton.chains:
                self._add(index)
        self.seen = len(moved)

    def _add(self, index: int) -> None:
        # Counted off the class's buckets, not its view: a view also ranks its buckets for
        # choosing nodes, which only the chosen domain's classes need (views(), later).
        # This runs for every class that moved, at every search: it is written for speed.
        node_class = self.skeleton.node_classes[index]
        buckets = node_class.buckets
        known, fits_on, k = self.request.known, self.request.fits_known, self.node_slice
        members = units = 0
        for free, names in buckets.items():
            fits = known.get(free)
            if fits is None:
                fits = fits_on(free)
            if fits > 0:
                members += fits * len(names)
                if k:
                    units += (fits // k) * len(names)
        empty = len(buckets.get(node_class.allocatable, ()))
        old = self.contributions.get(index, (0, 0, 0))
        if old == (members, units, empty):
            return
        self.contributions[index] = (members, units, empty)
        d_members, d_units, d_empty = members - old[0], units - old[1], empty - old[2]
        ids = self.skeleton.chain_ids[index]
        if d_members:
            for (depth, size), slices in self._slices.items():
                cut = ids[depth + 1]  # the chain starts at the root, depth -1
                before = self.members[cut] // size
                d_slices = (self.members[cut] + d_members) // size - before
                if d_slices:
                    for i in ids[: depth + 2]:
                        slices[i] += d_slices
            table = self.members
            for i in ids:
                table[i] += d_members
        if d_units:
            table = self.node_units
            for i in ids:
                table[i] += d_units
        if d_empty:
            table = self.empty
            for i in ids:
                table[i] += d_empty
        if self.layers and (d_members or d_units):
            self._patch_layers(self.skeleton.chains[index])

    def _patch_layers(self, chain: Sequence[Domain]) -> None:
        """Layered slices along one class's chain, from its leaf up (a few domains)."""
        inner_depth, inner_k = self.layers[-1]
        on_node = inner_depth == len(self.skeleton.by_depth)  # the innermost is the node
        leaf = chain[-1]
        units, base, divide = self.layer_units, self._layer_base, self._divide
        delta = 0
        for domain in reversed(chain):
            depth, i = domain.depth, domain.id
            if depth > inner_depth:
                continue  # inside an innermost slice's domain: counted there
            if depth == inner_depth:
                new = self.members[i] // inner_k
            else:
                if on_node and domain is leaf:
                    base[i] = self.node_units[i]  # its nodes' innermost slices
                else:
                    base[i] += delta
                new = base[i] // divide.get(depth, 1)
            delta = new - units[i]
            units[i] = new

    def whole(self, domain: Domain) -> bool:
        """Every node of it empty: taking from it breaks a whole domain."""
        return self.empty[domain.id] == self.skeleton.nodes[domain.id]

    def views(self, domain: Domain) -> list[ClassView]:
        return [self.view_of(index) for index in domain.classes]

    def most_on_a_node(self, domain: Domain) -> int:
        """Members on the domain's best node (read from its classes, on demand)."""
        return max(
            (fits for view in self.views(domain) for fits, _ in view.fitting.values()), default=0
        )
