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

Placement heuristic (documented in docs/model.md), chosen to keep whole nodes
free for bigger gangs without spreading gangs thin:

1. If one node can hold every member that remains, use the *best fit*: the
   node left with the least of the gang's resources (scarcest first), never
   one that strands accelerators the gang does not use, and a node that is
   already in use before an empty one.
2. Otherwise fill the nodes that can hold the most members, completely, and
   repeat.  Taking the largest capacities first gives the fewest nodes, and
   every node but the last is filled to the gang's limit.

Ties always break on class order and node name, so the result is deterministic.

Why views: what a gang shape can get from a class (its capacity, and the
buckets that can take a member) is computed once per ``(shape, class)`` and
then *patched* as admissions move nodes between buckets.  Each class keeps a
log of moves; a view replays the moves it has not seen when it is next asked
(two integer divisions per move), or rebuilds if it has fallen far behind.
A long tail of pending gangs then costs a few dictionary lookups each instead
of a scan of the cluster, and an admission costs work in proportion to the
nodes it touches and the shapes asked about afterwards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, floordiv, itemgetter

from queue_controller.core.devices.dims import BoundDims
from queue_controller.core.model.objects import Node
from queue_controller.core.model.resources import Resources, is_extended, scarcity_rank
from queue_controller.core.placement.choosing import choose_nodes
from queue_controller.core.placement.classes import Classes, classify, merge
from queue_controller.core.placement.explain import Scatter, explain_shortfall
from queue_controller.core.placement.nodeclasses import (
    ClassShortfall,
    ClassView,
    MemberRequest,
    NodeClass,
    node_facts,
    referenced_node_fields,
)
from queue_controller.core.placement.shapes import GangShape, GroupShortfall, Placement, Shortfall
from queue_controller.core.placement.topology.domains import DomainPlacement, DomainSearch
from queue_controller.core.placement.topology.domaintree import Skeleton, Totals
from queue_controller.core.placement.topology.groups import Apart, Member, place_group
from queue_controller.core.placement.topology.slices import placement_on
from queue_controller.core.rules.nodes import exclusion
from queue_controller.core.rules.topology import HOSTNAME


@dataclass(frozen=True, slots=True)
class _Eligibility:
    classes: tuple[NodeClass, ...]
    excluded: Mapping[str, int]  # exclusion -> node count


class EquivalenceIndex:
    """The fast placer: nodes grouped into classes and buckets."""

    def __init__(
        self,
        nodes: Sequence[Node],
        used: Mapping[str, Resources],
        shapes: Iterable[GangShape],
        *,
        by_topology: bool = False,
    ) -> None:
        # One shape object serves every gang alike: thousands of entries, a few shapes.
        shapes = list({id(shape): shape for shape in shapes}.values())
        # Gangs that ask for a topology are placed on a second index whose classes are
        # also split by every Topology level, so that each class lies in one domain.
        # The rest keep classes that ignore topology: split by racks, a cluster has
        # hundreds of classes where it had a few, and every such gang would scan them
        # all.  Both indexes take every commit, so they always agree.
        self._fine: EquivalenceIndex | None = None
        self._by_topology = by_topology
        if not by_topology and any(shape.topology is not None for shape in shapes):
            self._fine = EquivalenceIndex(nodes, used, shapes, by_topology=True)
        if self._fine is not None:
            # The same shapes, the same nodes: its dimensions; its classes are merged below.
            self._dims: tuple[str, ...] = self._fine._dims
        else:
            nodes = sorted(nodes, key=attrgetter("name"))
            all_facts = [node_facts(node) for node in nodes]
            # The gangs' resources, and every accelerator a node offers: whether a node
            # strands accelerators a gang does not use must not depend on which other
            # gangs happen to be pending in the cycle.
            names = {name for shape in shapes for name in shape.request}
            offered = {name for facts in all_facts for name in facts[3]}  # a few, every node
            names.update(name for name in offered if is_extended(name))
            self._dims = tuple(sorted(names, key=scarcity_rank))
        self._dim_index = {name: i for i, name in enumerate(self._dims)}
        self._accelerator_dims = tuple(i for i, name in enumerate(self._dims) if is_extended(name))
        # DRA: devices are dimensions too; their derived ones follow the base ones.
        devices = next((s.devices for s in shapes if s.devices is not None), None)
        self._devices = BoundDims.bind(devices, self._dim_index) if devices else None
        # (placement, node) -> the devices a commit took, for its release to give back.
        self._taken: dict[tuple[int, str], list[int]] = {}
        label_keys, present_keys, by_name = referenced_node_fields(shapes, by_topology=by_topology)
        if self._fine is not None:
            assert not present_keys, "only an index split by topology keys on label presence"
            self._built: Classes = merge(self._fine._built, label_keys)
        else:
            self._built = classify(
                nodes,
                all_facts,
                used,
                dims=self._dims,
                devices=self._devices,
                label_keys=label_keys,
                present_keys=present_keys,
                by_name=by_name,
            )
        self._classes = self._built.ordered
        self._where = self._built.where
        self._eligibility: dict[Hashable, _Eligibility] = {}
        self._requests: dict[Hashable, MemberRequest] = {}
        # (shape, members) -> (class move-log lengths when written, message)
        self._messages: dict[tuple[Hashable, int], tuple[tuple[int, ...], str]] = {}
        # Topology: every class that moved, in order (the domain totals catch up from
        # it), the domain trees by (levels, eligibility), and each shape's search.
        self._moved: list[int] = []
        self._skeletons: dict[Hashable, Skeleton] = {}
        self._searches: dict[Hashable, DomainSearch] = {}
        self._totals: dict[Hashable, Totals] = {}

    # -- per shape, per class ------------------------------------------------

    def _eligible(self, shape: GangShape) -> _Eligibility:
        cached = self._eligibility.get(shape.constraint_key)
        if cached is not None:
            return cached
        classes: list[NodeClass] = []
        excluded: Counter[str] = Counter()
        for node_class in self._classes:
            reason = exclusion(node_class.sample, shape.template)
            if reason is None:
                classes.append(node_class)
            else:
                excluded[reason.describe()] += node_class.node_count()
        result = _Eligibility(tuple(classes), excluded)
        self._eligibility[shape.constraint_key] = result
        return result

    def _request(self, shape: GangShape) -> MemberRequest:
        cached = self._requests.get(shape.fit_key)
        if cached is not None:
            return cached
        pairs = tuple(
            (self._dim_index[name], amount)
            for name, amount in sorted(shape.request.items(), key=lambda kv: scarcity_rank(kv[0]))
        )
        used = {i for i, _ in pairs}
        device_dims: frozenset[int] = frozenset()
        if shape.devices is not None and self._devices is not None:
            device_dims = self._devices.positions()
            used |= device_dims
        (first, _), *rest = pairs  # every request holds at least its pod slot
        # itemgetter of one index returns a bare value; the arithmetic wants a tuple.
        dims = itemgetter(*(i for i, _ in pairs)) if rest else (lambda free: (free[first],))
        request = MemberRequest(
            pairs=pairs,
            dims=dims,
            amounts=tuple(a for _, a in pairs),
            foreign=tuple(i for i in self._accelerator_dims if i not in used),
            devices=tuple((self._dims[i], a) for i, a in pairs if i in device_dims),
            device_dims=device_dims,
        )
        self._requests[shape.fit_key] = request
        return request

    def _view(self, shape: GangShape, node_class: NodeClass) -> ClassView:
        moves = node_class.moves
        view = node_class.views.get(shape.fit_key)
        if view is not None:
            behind = len(moves) - view.seen
            if not behind:
                return view
            if view.hopeless:  # capacity stays 0, but the free totals it explains moved
                view.seen = len(moves)
                view.shortfall = None
                return view
            if behind < len(node_class.buckets):
                for move in moves[view.seen :]:
                    view.moved(*move)
                view.seen = len(moves)
                view.shortfall = None
                return view
        request = self._request(shape)
        # Not even an empty node of the class holds one member (an H100 gang
        # against the MIG pool): nothing to scan, now or later.
        hopeless = any(node_class.allocatable[i] < a for i, a in request.pairs)
        view = ClassView(request, node_class, 0, {}, hopeless, len(moves))
        if not hopeless:
            get, amounts = request.dims, request.amounts
            for free, names in node_class.buckets.items():
                fits = min(map(floordiv, get(free), amounts))
                if fits > 0:
                    view.capacity += fits * len(names)
                    view.fitting[free] = (fits, view.rank(free))
        node_class.views[shape.fit_key] = view
        return view

    def capacity(self, shape: GangShape) -> int:
        """How many members of ``shape`` the cluster could take at once right now."""
        return sum(self._view(shape, c).capacity for c in self._eligible(shape).classes)

    # -- the Placer protocol -------------------------------------------------

    def try_place(self, shape: GangShape, count: int) -> Placement | Shortfall:
        if shape.topology is not None:
            return self._place_in_domains(shape, count)
        fits = self.capacity(shape)
        if fits < count:
            return Shortfall(fits, count, self._explain(shape, count, fits))
        return Placement(self._choose(shape, count))

    def _place_in_domains(self, shape: GangShape, count: int) -> Placement | Shortfall:
        fine = self._fine or self
        # Only an index built knowing the shape splits its classes by the shape's levels.
        assert fine._by_topology, "a topology shape must be among the index's shapes"
        found = fine._search(shape).place(count, fine._moved)
        if isinstance(found, DomainPlacement):
            return Placement(found.nodes, found.domain, found.slices, found.note)
        # Too little room anywhere: said as for any gang (over classes that ignore topology).
        explanation = found.explanation or self._explain(shape, count, found.fits)
        return Shortfall(found.fits, count, explanation)

    def try_place_group(
        self, items: Sequence[tuple[GangShape, int]]
    ) -> list[Placement] | GroupShortfall:
        """Pod sets of one group in one domain (topology/groups.py); changes nothing."""
        fine = self._fine or self
        assert fine._by_topology, "a topology shape must be among the index's shapes"
        shapes = [shape for shape, _ in items]
        # One Placement per tentative take, so that a give-back returns what it took
        # (devices are keyed by the placement); forgotten on give-back, as ids are reused.
        taken: dict[int, Placement] = {}

        def take(i: int, placed: DomainPlacement, sign: int) -> None:
            if sign > 0:
                placement = taken[id(placed)] = Placement(placed.nodes)
            else:
                placement = taken.pop(id(placed))
            fine._take(shapes[i], placement, sign)

        def fits_on(i: int, node: str) -> int:
            found = fine._where.get(node)
            eligible = fine._eligible(shapes[i]).classes
            if found is None or not any(c is found[0] for c in eligible):
                return 0
            return fine._request(shapes[i]).fits(found[1])

        members = [Member(fine._search(shape), count) for shape, count in items]
        found = place_group(members, fine._moved, take, fits_on)
        if not isinstance(found, Apart):
            return [Placement(p.nodes, p.domain, p.slices, p.note) for p in found]
        if found.member is None:
            needed = sum(count for _, count in items)
            return GroupShortfall(None, Shortfall(found.fits, needed, found.explanation))
        shape, count = items[found.member]
        explanation = found.explanation or self._explain(shape, count, found.fits)
        return GroupShortfall(found.member, Shortfall(found.fits, count, explanation))

    def _search(self, shape: GangShape) -> DomainSearch:
        ask = shape.topology
        assert ask is not None
        search = self._searches.get(shape.key)
        if search is None:
            tree_key = (ask.levels, ask.has_hostname, shape.constraint_key)
            skeleton = self._skeletons.get(tree_key)
            if skeleton is None:
                inside = (HOSTNAME,) if ask.has_hostname else ()
                skeleton = Skeleton(ask.levels, self._eligible(shape).classes, required=inside)
                self._skeletons[tree_key] = skeleton
            # Gangs of the same members share their room per domain, whatever they ask.
            node_slice, _, layers = DomainSearch.counting(ask)
            totals_key = (shape.fit_key, ask.levels, node_slice, layers)
            totals = self._totals.get(totals_key)
            if totals is None:
                classes = self._classes

                def view_of(index: int) -> ClassView:
                    return self._view(shape, classes[index])

                totals = Totals(
                    skeleton,
                    view_of,
                    self._request(shape),
                    node_slice=node_slice,
                    layers=layers,
                )
                totals.seen = len(self._moved)
                self._totals[totals_key] = totals
            scarce = self._dims[self._request(shape).pairs[0][0]]
            search = DomainSearch(ask, totals, choose_nodes, scarce)
            self._searches[shape.key] = search
        return search

    def commit(self, shape: GangShape, placement: Placement) -> None:
        self._take(shape, placement, 1)

    def release(self, shape: GangShape, placement: Placement) -> None:
        self._take(shape, placement, -1)

    def adjust(self, node: str, freed: Mapping[str, int]) -> None:
        if self._fine is not None:
            self._fine.adjust(node, freed)
        found = self._where.get(node)
        if found is None:
            return  # a node the cycle does not know: nothing there to give
        node_class, free = found
        after = list(free)
        for resource, amount in freed.items():
            i = self._dim_index.get(resource)
            if i is not None:
                after[i] += amount
        if self._devices is not None:
            self._devices.refresh(after, node_class.allocatable)
        new_free = tuple(after)
        if new_free != free:
            node_class.move(node, free, new_free)
            self._where[node] = (node_class, new_free)
            self._moved.append(node_class.index)

    def withhold(self, node: str) -> Mapping[str, int]:
        found = self._where.get(node)
        if found is None:
            return {}
        taken = {
            name: amount for name, amount in zip(self._dims, found[1], strict=True) if amount > 0
        }
        self.adjust(node, {name: -amount for name, amount in taken.items()})
        return taken

    def place_on(self, shape: GangShape, nodes: Mapping[str, int]) -> Placement | None:
        if shape.topology is not None and self._fine is not None:
            return self._fine.place_on(shape, nodes)
        request = self._request(shape)
        eligible = self._eligible(shape).classes
        for name, members in nodes.items():
            found = self._where.get(name)
            if found is None or not any(c is found[0] for c in eligible):
                return None
            if request.fits(found[1]) < members:
                return None
        if shape.topology is not None:
            return placement_on(shape.topology, nodes, self._labels)
        return Placement(dict(nodes))

    def _labels(self, node: str) -> Mapping[str, str]:
        # A class holds nodes of one domain at every level a shape asks about.
        return self._where[node][0].sample.labels

    def _take(self, shape: GangShape, placement: Placement, sign: int) -> None:
        request = self._request(shape)
        fine = self._fine
        if fine is not None and request.devices:
            fine._take(shape, placement, sign)  # devices are taken per index (give-back)
            fine = None
        for name, count in placement.nodes.items():
            members = sign * count
            node_class, free = self._where[name]
            after = list(free)
            for i, amount in request.pairs:
                if i not in request.device_dims:
                    after[i] -= amount * members
            if request.devices:
                self._take_devices(request, after, placement, name, count, sign)
                assert self._devices is not None
                self._devices.refresh(after, node_class.allocatable)
            new_free = tuple(after)
            node_class.move(name, free, new_free)
            self._where[name] = (node_class, new_free)
            self._moved.append(node_class.index)
            if fine is not None:  # the same node, the same free vectors, its finer class
                fine_class, fine_free = fine._where[name]
                fine_class.move(name, fine_free, new_free)
                fine._where[name] = (fine_class, new_free)
                fine._moved.append(fine_class.index)

    def _take_devices(
        self,
        request: MemberRequest,
        after: list[int],
        placement: Placement,
        node: str,
        count: int,
        sign: int,
    ) -> None:
        """Devices are taken, not subtracted: a release gives back what its commit took."""
        assert self._devices is not None
        key = (id(placement), node)
        if sign > 0:
            totals = {name: amount * count for name, amount in request.devices}
            self._taken[key] = self._devices.take(after, totals)
        else:
            self._devices.give(after, self._taken.pop(key, []))

    # -- choosing nodes ------------------------------------------------------

    def _choose(self, shape: GangShape, count: int) -> dict[str, int]:
        return choose_nodes([self._view(shape, c) for c in self._eligible(shape).classes], count)

    # -- explaining ----------------------------------------------------------

    def _explain(self, shape: GangShape, count: int, fits: int) -> str:
        # Gangs alike wait for the same reason until one of their classes changes.
        eligible = self._eligible(shape)
        state = tuple(len(c.moves) for c in eligible.classes)
        cached = self._messages.get((shape.key, count))
        if cached is not None and cached[0] == state:
            return cached[1]
        message = self._describe_shortfall(shape, eligible, count, fits)
        self._messages[(shape.key, count)] = (state, message)
        return message

    def _describe_shortfall(
        self, shape: GangShape, eligible: _Eligibility, count: int, fits: int
    ) -> str:
        request = self._request(shape)
        blocked: Counter[str] = Counter(eligible.excluded)
        usable = total_free = most_free = 0
        for node_class in eligible.classes:
            part = self._class_shortfall(shape, node_class)
            usable += part.usable_nodes
            blocked.update(part.blocked)
            total_free += part.scarce_free
            most_free = max(most_free, part.scarce_most)
        scarce_index, scarce_amount = request.pairs[0]
        scarce = self._dims[scarce_index]
        if shape.labels:  # DRA dimensions are called by the claim and request they serve
            blocked = Counter({_relabel(shape, reason): nodes for reason, nodes in blocked.items()})
        return explain_shortfall(
            fits=fits,
            needed=count,
            usable_nodes=usable,
            blocked=blocked,
            scatter=Scatter(scarce, total_free, most_free, scarce_amount, shape.label(scarce)),
        )

    def _class_shortfall(self, shape: GangShape, node_class: NodeClass) -> ClassShortfall:
        view = self._view(shape, node_class)
        if view.shortfall is not None:
            return view.shortfall
        request = view.request
        scarce = request.pairs[0][0]
        # What each of the gang's resources says when it is the one that runs out.
        insufficient = [f"Insufficient {self._dims[i]}" for i, _ in request.pairs]
        get, amounts, fitting = request.dims, request.amounts, view.fitting
        blocked: dict[str, int] = {}
        usable = total_free = most_free = 0
        # Every bucket of every class a refused gang may use: the loop is kept to calls
        # into C, as MemberRequest.fits is.
        for free, names in node_class.buckets.items():
            nodes = len(names)
            if free in fitting:
                usable += nodes
            # The resource that runs out first (the fewest members; an overcommitted
            # one, below zero, takes none); on a tie, the scarcest, listed first.
            members = list(map(floordiv, get(free), amounts))
            fewest = min(members)
            if fewest < 0:
                fewest = 0
                members = [max(m, 0) for m in members]
            reason = insufficient[members.index(fewest)]
            blocked[reason] = blocked.get(reason, 0) + nodes
            spare = max(0, free[scarce])
            total_free += spare * nodes
            most_free = max(most_free, spare)
        view.shortfall = ClassShortfall(usable, blocked, total_free, most_free)
        return view.shortfall


def _relabel(shape: GangShape, reason: str) -> str:
    head, _, resource = reason.partition(" ")
    return f"{head} {shape.label(resource)}" if head == "Insufficient" else reason
