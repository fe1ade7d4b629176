"""Placing a gang inside topology domains (racks, blocks, NVLink cliques).

The equivalence index already splits nodes into classes that agree on every
label some gang's Topology names, so each class lies in exactly one domain at
every level.  A domain's free capacity for a gang is then the sum of its
classes' capacities, and the search costs in proportion to the classes (a few
per domain), never to nodes times members.

Counting is in *units*: members, or, for a pod set cut into slices of ``k``,
whole slices (a slice-level domain holds ``members // k`` of them; a node, when
slices are per node, ``fits // k``).

Choosing among the domains that fit (the rule, written down in the README):
keep whole domains whole, at every level, for the gangs that need them.
Candidates are compared from their broadest ancestor down; at each level a
domain already in use comes before an empty one, and among those the one with
the least room for this gang (best fit by domain), then by name.  Comparing
from the top keeps a whole block whole before it keeps a whole rack whole:
breaking a block costs every gang that needs a block, breaking a rack only
those that need a rack.

Required: one domain of the level, or not admitted.  Preferred: the narrowest
domain that holds it, from the requested level up to the broadest; failing
that, the fewest top-level domains (largest first, then a best fit for the
rest), and inside each the same again.  Slices: every ``k`` members in index
order lie in one domain of the slice level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from queue_controller.core.decisions import Decision
from queue_controller.core.model import TopologyMode
from queue_controller.core.quantity import format_milli
from queue_controller.core.shapes import Placement, SetShape
from queue_controller.core.topology import UNCONSTRAINED, TopologyAsk

if TYPE_CHECKING:
    from queue_controller.core.fit import _ClassView

Choose = Callable[[list["_ClassView"], int], dict[str, int]]
Rank = tuple[object, ...]


@dataclass(slots=True)
class _Domain:
    path: tuple[str, ...]
    depth: int  # UNCONSTRAINED for the root
    parent: _Domain | None
    views: list[_ClassView] = field(default_factory=list)
    children: dict[str, _Domain] = field(default_factory=dict)
    units: int = 0  # what it holds for this gang, in units
    whole: bool = True  # every node of it empty
    most_on_a_node: int = 0  # members (not units) on its best node

    def chain(self) -> list[_Domain]:
        out: list[_Domain] = []
        domain: _Domain | None = self
        while domain is not None and domain.depth != UNCONSTRAINED:
            out.append(domain)
            domain = domain.parent
        return out[::-1]

    def rank(self) -> Rank:
        # In use before empty, then the least room: at every level from the top.
        return (*((d.whole, d.units) for d in self.chain()), self.path)


@dataclass(frozen=True, slots=True)
class DomainPlacement:
    nodes: dict[str, int]
    domain: str
    slices: tuple[dict[str, int], ...]


@dataclass(frozen=True, slots=True)
class DomainShortfall:
    fits: int  # members placeable at once under the request
    explanation: str  # "" when topology is not what binds: the usual message applies


class DomainSearch:
    """One gang's search over one Topology's domains, as they are right now."""

    def __init__(
        self,
        ask: TopologyAsk,
        views: Iterable[_ClassView],
        choose: Choose,
        resource: str,
    ) -> None:
        self.ask = ask
        self.choose = choose
        self.resource = resource  # the gang's scarcest resource, for messages
        self.k = ask.slice_size or 1
        self.root = _Domain((), UNCONSTRAINED, None)
        self.by_depth: dict[int, list[_Domain]] = {}
        for view in views:
            labels = view.node_class.sample.labels
            path = tuple(labels.get(key) for key in ask.levels)
            if any(value is None for value in path):
                continue  # outside the topology: a topology gang never goes there
            domain = self.root
            domain.views.append(view)
            for depth, value in enumerate(path):
                assert value is not None
                child = domain.children.get(value)
                if child is None:
                    child = _Domain((*domain.path, value), depth, domain)
                    domain.children[value] = child
                    self.by_depth.setdefault(depth, []).append(child)
                domain = child
                domain.views.append(view)
        self._count(self.root)

    # -- capacity ---------------------------------------------------------------

    def _count(self, domain: _Domain) -> None:
        for child in domain.children.values():
            self._count(child)
        ask, k = self.ask, self.k
        members = sum(v.capacity for v in domain.views)
        domain.most_on_a_node = max(
            (fits for v in domain.views for fits, _ in v.fitting.values()), default=0
        )
        domain.whole = all(_class_is_empty(v) for v in domain.views)
        if not ask.slice_size:
            domain.units = members
        elif ask.slice_depth == ask.node_depth:
            domain.units = sum(_node_units(v, k) for v in domain.views)
        elif domain.depth == ask.slice_depth:
            domain.units = members // k
        else:  # broader than the slice level: the slices its parts hold
            domain.units = sum(c.units for c in domain.children.values())

    def _leaf(self, domain: _Domain) -> bool:
        return not domain.children

    # -- placing ----------------------------------------------------------------

    def place(self, count: int) -> DomainPlacement | DomainShortfall:
        ask, k = self.ask, self.k
        units = count // k
        if ask.mode is TopologyMode.UNCONSTRAINED or ask.depth == UNCONSTRAINED:
            if self.root.units < units:
                return self._short_overall(count)
            return self._placed(self._fill(self.root, units))
        depths = [ask.depth]
        if ask.mode is TopologyMode.PREFERRED:
            depths += list(range(ask.depth - 1, UNCONSTRAINED, -1))
        for depth in depths:
            candidates = self._fitting(depth, units, count)
            if candidates:
                best = min(candidates, key=_Domain.rank)
                if depth == ask.node_depth:
                    return self._placed([(best, self.choose(best.views, count))], on_node=True)
                return self._placed(self._fill(best, units))
        if ask.mode is TopologyMode.PREFERRED and self.root.units >= units:
            return self._placed(self._fill(self.root, units))
        if self.root.units < units:
            return self._short_overall(count)
        return self._short_in_one(count)

    def _fitting(self, depth: int, units: int, count: int) -> list[_Domain]:
        if depth == self.ask.node_depth:
            # One node: the narrowest domains that have a node holding every member.
            leaves = self._leaves()
            return [d for d in leaves if d.most_on_a_node >= count]
        return [d for d in self.by_depth.get(depth, ()) if d.units >= units]

    def _leaves(self) -> list[_Domain]:
        if not self.ask.levels:
            return [self.root]
        return self.by_depth.get(len(self.ask.levels) - 1, [])

    def _fill(self, domain: _Domain, units: int) -> list[tuple[_Domain, dict[str, int]]]:
        """``units`` placed inside ``domain`` over the fewest parts of it."""
        ask, k = self.ask, self.k
        if ask.slice_size and ask.slice_depth == domain.depth:
            return [(domain, self.choose(domain.views, units * k))]
        if self._leaf(domain):
            if ask.slice_size and ask.slice_depth == ask.node_depth:
                return [(domain, _choose_units(domain.views, units, k))]
            return [(domain, self.choose(domain.views, units * k))]
        children = list(domain.children.values())
        whole = [c for c in children if c.units >= units]
        if whole:
            return self._fill(min(whole, key=_Domain.rank), units)
        out: list[tuple[_Domain, dict[str, int]]] = []
        remaining = units
        open_parts = sorted(children, key=lambda c: (-c.units, c.rank()))
        while remaining > 0:
            enough = [c for c in open_parts if c.units >= remaining]
            if enough:
                out += self._fill(min(enough, key=_Domain.rank), remaining)
                break
            part = open_parts.pop(0)
            if part.units <= 0:
                break  # cannot happen when the domain's units were counted right
            out += self._fill(part, part.units)
            remaining -= part.units
        return out

    def _placed(
        self, parts: list[tuple[_Domain, dict[str, int]]], *, on_node: bool = False
    ) -> DomainPlacement:
        nodes: dict[str, int] = {}
        slices: list[dict[str, int]] = []
        for _, chosen in parts:
            for node, members in chosen.items():
                nodes[node] = nodes.get(node, 0) + members
            if self.ask.slice_size:
                slices += _cut(chosen, self.k)
        paths = [domain.path for domain, _ in parts]
        common = _common_prefix(paths)
        domain = "/".join(common)
        if on_node or (
            self.ask.has_hostname and len(nodes) == 1 and len(common) == len(self.ask.levels)
        ):
            domain = "/".join((*common, *nodes))
        return DomainPlacement(dict(sorted(nodes.items())), domain, tuple(slices))

    # -- explaining ---------------------------------------------------------------

    def _short_overall(self, count: int) -> DomainShortfall:
        fits = self.root.units * self.k
        if not self.ask.slice_size:
            return DomainShortfall(fits, "")  # too little room anywhere: the usual message
        return DomainShortfall(
            fits,
            f"the gang needs {count // self.k} slices of {self.k} members, each inside one "
            f"{self.ask.level_name(self.ask.slice_depth)}; at most {self.root.units} fit now",
        )

    def _short_in_one(self, count: int) -> DomainShortfall:
        ask = self.ask
        level = ask.level_name(ask.depth)
        label = ask.level_label(ask.depth)
        if ask.depth == ask.node_depth:
            best = max((d.most_on_a_node for d in self._leaves()), default=0)
        else:
            best = max((d.units for d in self.by_depth.get(ask.depth, ())), default=0) * self.k
        if ask.slice_size:
            return DomainShortfall(
                best,
                f"{self.root.units} slices of {self.k} members fit in the Topology "
                f"{ask.topology}, at most {best // self.k} in any one {level} ({label}); "
                f"the gang needs {count // self.k} in one {level}",
            )
        amount = _scarce_amount(self.root.views)
        free_total = self._free(self.root)
        on_node = ask.depth == ask.node_depth
        domains = self._leaves() if on_node else self.by_depth.get(ask.depth, [])
        most = max((self._free(d, per_node=on_node) for d in domains), default=0)
        res = self.resource
        return DomainShortfall(
            best,
            f"{format_milli(free_total, res)} {res} free in total in Topology {ask.topology}, "
            f"at most {format_milli(most, res)} in any one {level} ({label}); the gang needs "
            f"{format_milli(count * amount, res)} in one {level}",
        )

    def _free(self, domain: _Domain, *, per_node: bool = False) -> int:
        """The scarce resource free in ``domain`` (or on its freest node)."""
        total = most = 0
        for view in domain.views:
            index = view.request.pairs[0][0]
            for free, names in view.node_class.buckets.items():
                spare = max(0, free[index])
                total += spare * len(names)
                most = max(most, spare)
        return most if per_node else total


def _scarce_amount(views: Sequence[_ClassView]) -> int:
    return views[0].request.pairs[0][1] if views else 0


def _class_is_empty(view: _ClassView) -> bool:
    node_class = view.node_class
    return len(node_class.buckets.get(node_class.allocatable, ())) == node_class.node_count()


def _node_units(view: _ClassView, k: int) -> int:
    buckets = view.node_class.buckets
    return sum((fits // k) * len(buckets[free]) for free, (fits, _) in view.fitting.items())


def _choose_units(views: Sequence[_ClassView], units: int, k: int) -> dict[str, int]:
    """``units`` slices of ``k`` members, each on one node: one node if it holds them
    all (best fit), else the nodes holding the most slices first."""
    options = [
        (fits // k, rank, view.node_class.buckets[free])
        for view in views
        for free, (fits, rank) in view.fitting.items()
        if fits // k > 0
    ]
    single = [o for o in options if o[0] >= units]
    if single:
        _, _, names = min(single, key=lambda o: (o[1], o[2][0]))
        return {names[0]: units * k}
    placement: dict[str, int] = {}
    remaining = units
    for per_node, _, names in sorted(options, key=lambda o: (-o[0], o[1], o[2][0])):
        for name in names:
            if remaining <= 0:
                return placement
            take = min(per_node, remaining)
            placement[name] = take * k
            remaining -= take
    return placement


def _cut(chosen: dict[str, int], k: int) -> list[dict[str, int]]:
    """Members on nodes (by name) cut into consecutive slices of ``k``."""
    slices: list[dict[str, int]] = []
    current: dict[str, int] = {}
    filled = 0
    for node, members in sorted(chosen.items()):
        left = members
        while left:
            take = min(left, k - filled)
            current[node] = current.get(node, 0) + take
            filled += take
            left -= take
            if filled == k:
                slices.append(current)
                current, filled = {}, 0
    return slices


def _common_prefix(paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    if not paths:
        return ()
    first = paths[0]
    length = len(first)
    for path in paths[1:]:
        length = min(length, len(path))
        for i in range(length):
            if path[i] != first[i]:
                length = i
                break
    return first[:length]


def with_topology(
    decision: Decision, sets: Sequence[SetShape], placed: Sequence[Placement]
) -> Decision:
    """The domains (and slices) that pod sets asking for a topology got."""
    domains: dict[str, str] = {}
    slices: dict[str, tuple[Mapping[str, int], ...]] = {}
    for item, placement in zip(sets, placed, strict=True):
        if item.shape.topology is None:
            continue
        domains[item.pod_set.name] = placement.domain
        if placement.slices:
            slices[item.pod_set.name] = placement.slices
    if not domains:
        return decision
    where = ", ".join(
        f"{name}: {domain or 'spread over top-level domains'}" for name, domain in domains.items()
    )
    message = decision.message + (
        f"; in domain {where.split(': ', 1)[1]}" if len(domains) == 1 else f"; in domains {where}"
    )
    return replace(decision, message=message, domains=domains, slices=slices)


def placement_on(
    ask: TopologyAsk, nodes: Mapping[str, int], labels: Callable[[str], Mapping[str, str]]
) -> Placement:
    """A placement chosen earlier (a preemptor's nominated room) described again: the
    domain that holds it, and its slices, cut slice domain by slice domain."""
    paths = {n: tuple(labels(n).get(key, "") for key in ask.levels) for n in nodes}
    common = _common_prefix(list(paths.values()))
    domain = "/".join(common)
    if ask.has_hostname and len(nodes) == 1 and len(common) == len(ask.levels):
        domain = "/".join((*common, *nodes))
    slices: list[dict[str, int]] = []
    if ask.slice_size:
        depth = ask.slice_depth
        by_domain: dict[tuple[str, ...], dict[str, int]] = {}
        for node, members in sorted(nodes.items()):
            key = paths[node] + (node,) if depth >= len(ask.levels) else paths[node][: depth + 1]
            by_domain.setdefault(key, {})[node] = members
        for _, part in sorted(by_domain.items()):
            slices += _cut(part, ask.slice_size)
    return Placement(dict(nodes), domain, tuple(slices))
