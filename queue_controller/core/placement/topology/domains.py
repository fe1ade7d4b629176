"""Placing a gang inside topology domains (racks, blocks, NVLink cliques).

The equivalence index already splits nodes into classes that agree on every
label some gang's Topology names, so each class lies in exactly one domain at
every level.  A domain's free capacity for a gang is then the sum of its
classes' capacities, and the search costs in proportion to the classes (a few
per domain), never to nodes times members.

Counting is in *units*: members, or, for a pod set cut into slices of ``k``,
whole slices (a slice-level domain holds ``members // k`` of them; a node, when
slices are per node, ``fits // k``).

Choosing among the domains that fit (the rule, written down in docs/topology.md):
keep whole domains whole, at every level, for the gangs that need them.
Candidates are compared from their broadest ancestor down; at each level a
domain already in use comes before an empty one, and among those the one with
the least room for this gang (best fit by domain), then by name.  Comparing
from the top keeps a whole block whole before it keeps a whole rack whole:
breaking a block costs every gang that needs a block, breaking a rack only
those that need a rack.  A Topology with ``spec.placement: Balanced`` spreads a
preferred gang evenly instead, where it must be split (``balanced.py``).

Required: one domain of the level, or not admitted.  Preferred: the narrowest
domain that holds it, from the requested level up to the broadest; failing
that, the fewest top-level domains (largest first, then a best fit for the
rest), and inside each the same again.  Slices: every ``k`` members in index
order lie in one domain of the slice level.  Layered slices are searched for in
outer slices, as one layer is; inside each outer slice's domain ``layers.py``
places the layers below it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from queue_controller.core.model.objects import TopologyMode
from queue_controller.core.model.quantity import format_milli
from queue_controller.core.placement.topology import balanced, layers
from queue_controller.core.placement.topology.domaintree import Domain, Totals
from queue_controller.core.placement.topology.layers import choose_units
from queue_controller.core.placement.topology.slices import cut, domain_name
from queue_controller.core.rules.topology import UNCONSTRAINED, TopologyAsk

if TYPE_CHECKING:
    from queue_controller.core.placement.nodeclasses import ClassView

Choose = Callable[[list["ClassView"], int], dict[str, int]]
Rank = tuple[object, ...]
Parts = list[tuple[Domain, dict[str, int]]]


@dataclass(frozen=True, slots=True)
class DomainPlacement:
    nodes: dict[str, int]
    domain: str
    slices: tuple[dict[str, int], ...]
    note: str = ""  # how a split gang was spread, when a Topology's placement chose it


@dataclass(frozen=True, slots=True)
class DomainShortfall:
    fits: int  # members placeable at once under the request
    explanation: str  # "" when topology is not what binds: the usual message applies


class DomainSearch:
    """One gang shape's search over one Topology's domains, kept for the cycle."""

    def __init__(self, ask: TopologyAsk, totals: Totals, choose: Choose, resource: str) -> None:
        self.ask = ask
        self.totals = totals  # shared by every search of the same members and Topology
        self.skeleton = totals.skeleton
        self.k = ask.slice_size or 1
        self.choose = choose
        self.resource = resource  # the gang's scarcest resource, for messages
        _, domain_slice, _ = DomainSearch.counting(ask)
        # Slices cut per domain of the slice level: counted in the shared totals.
        self._slices = totals.domain_slices(*domain_slice) if domain_slice else []
        # A memo for one search (cleared at each): the levels of rank().
        self._ranks: dict[int, Rank] = {}
        # The last refusal said of one topology, as (members, moves seen, shortfall):
        # gangs alike are refused alike until a class moves.
        self._refused: tuple[int, int, DomainShortfall] | None = None
        self._version = -1  # the index's move-log length at the last sync

    # -- room -------------------------------------------------------------------

    @staticmethod
    def counting(
        ask: TopologyAsk,
    ) -> tuple[int, tuple[int, int] | None, tuple[tuple[int, int], ...]]:
        """Where ``ask``'s slices are cut: (k per node, else 0; (depth, k) per domain;
        every layer, when the slices are layered)."""
        if not ask.slice_size:
            return 0, None, ()
        if ask.inner_slices:
            inner_depth, inner_k = ask.inner_slices[-1]
            return (inner_k if inner_depth == ask.node_depth else 0), None, ask.layers
        if ask.slice_depth == ask.node_depth:
            return ask.slice_size, None, ()
        return 0, (ask.slice_depth, ask.slice_size), ()

    def units(self, domain: Domain) -> int:
        """What ``domain`` holds for this gang: members, or whole slices (layered: of the
        outermost layer at or below its level)."""
        totals, ask = self.totals, self.ask
        if not ask.slice_size:
            return totals.members[domain.id]
        if totals.layers:
            if domain.depth <= ask.cut_depth:
                return totals.layer_units[domain.id]
            return totals.members[domain.id] // ask.cut_size
        if totals.node_slice:
            return totals.node_units[domain.id]
        if domain.depth <= ask.slice_depth:
            return self._slices[domain.id]
        return totals.members[domain.id] // self.k

    def rank(self, domain: Domain) -> Rank:
        # In use before empty, then the least room: at every level from the top.
        return (*self._levels_rank(domain), domain.path)

    def _best(self, candidates: list[Domain]) -> Domain:
        """The candidate of least rank.  Many candidates (racks that fit a small gang)
        are narrowed by their parents first: the parents' ranks are few and shared."""
        if len(candidates) < 16:
            return min(candidates, key=self.rank)
        ranks: dict[int, Rank] = {}
        for candidate in candidates:
            parent = candidate.parent
            if parent is not None and parent.id not in ranks:
                ranks[parent.id] = self._levels_rank(parent)
        best = min(ranks.values())
        pool = [c for c in candidates if c.parent is not None and ranks[c.parent.id] == best]
        whole, units = self.totals.whole, self.units
        return min(pool, key=lambda c: (whole(c), units(c), c.path))

    def _levels_rank(self, domain: Domain) -> Rank:
        if domain.depth == UNCONSTRAINED:
            return ()
        found = self._ranks.get(domain.id)
        if found is None:
            parent = domain.parent
            above = (
                () if parent is None or parent.depth == UNCONSTRAINED else self._levels_rank(parent)
            )
            found = (*above, (self.totals.whole(domain), self.units(domain)))
            self._ranks[domain.id] = found
        return found

    # -- placing ----------------------------------------------------------------

    def place(self, count: int, moved: Sequence[int]) -> DomainPlacement | DomainShortfall:
        refused = self._refused
        if refused is not None and refused[0] == count and refused[1] == len(moved):
            return refused[2]
        self.totals.sync(moved)
        self._ranks.clear()
        self._version = len(moved)
        # A Balanced Topology's preferred gang, when one domain above its level holds it.
        parts = balanced.place(self, count // self.k) if self.ask.balanced else None
        found = self._balanced(parts) if parts else self._search(count)
        if isinstance(found, DomainShortfall):
            self._refused = (count, len(moved), found)
        return found

    def sync(self, moved: Sequence[int]) -> None:
        """Catch up with the classes that moved (a group's search reads room and ranks)."""
        self.totals.sync(moved)
        self._ranks.clear()
        self._version = len(moved)

    def place_within(
        self, path: tuple[str, ...], count: int, moved: Sequence[int]
    ) -> DomainPlacement | None:
        """``count`` members inside the domain at ``path`` (a group's domain, chosen for the
        whole group), as the usual fill places them there; None if they do not fit."""
        self.sync(moved)
        domain = self.skeleton.by_path.get(path)
        if domain is None or self.units(domain) < count // self.k:
            return None
        return self._placed(self._fill(domain, count // self.k))

    def _search(self, count: int) -> DomainPlacement | DomainShortfall:
        ask, root = self.ask, self.skeleton.root
        units = count // self.k
        if ask.mode is TopologyMode.UNCONSTRAINED or ask.depth == UNCONSTRAINED:
            if self.units(root) < units:
                return self._short_overall(count)
            return self._placed(self._fill(root, units))
        depths = [ask.depth]
        if ask.mode is TopologyMode.PREFERRED:
            depths += list(range(ask.depth - 1, UNCONSTRAINED, -1))
        for depth in depths:
            candidates = self._fitting(depth, units, count)
            if candidates:
                best = self._best(candidates)
                if depth == ask.node_depth:
                    chosen = self.choose(self.totals.views(best), count)
                    return self._placed([(best, chosen)])
                return self._placed(self._fill(best, units))
        if self.units(root) < units:
            return self._short_overall(count)
        if ask.mode is TopologyMode.PREFERRED:
            return self._placed(self._fill(root, units))
        return self._short_in_one(count)

    def _fitting(self, depth: int, units: int, count: int) -> list[Domain]:
        if depth == self.ask.node_depth:
            # One node: the narrowest domains that have a node holding every member.
            members, most = self.totals.members, self.totals.most_on_a_node
            leaves = self.skeleton.leaves()
            return [d for d in leaves if members[d.id] >= count and most(d) >= count]
        domains = self.skeleton.by_depth.get(depth, ())
        if not self.ask.slice_size:  # the common case, read straight off the totals
            members = self.totals.members
            return [d for d in domains if members[d.id] >= units]
        return [d for d in domains if self.units(d) >= units]

    def _fill(self, domain: Domain, units: int) -> Parts:
        """``units`` placed inside ``domain`` over the fewest parts of it."""
        ask, k = self.ask, self.k
        if ask.inner_slices and ask.slice_depth == domain.depth:
            return layers.fill(self, domain, units)
        if (ask.slice_size and ask.slice_depth == domain.depth) or not domain.children:
            views = self.totals.views(domain)
            if ask.slice_size and ask.slice_depth == ask.node_depth:
                return [(domain, choose_units(views, units, k))]
            return [(domain, self.choose(views, units * k))]
        children = list(domain.children.values())
        whole = [c for c in children if self.units(c) >= units]
        if whole:
            return self._fill(self._best(whole), units)
        out: Parts = []
        remaining = units
        open_parts = sorted(children, key=lambda c: (-self.units(c), self.rank(c)))
        while remaining > 0 and open_parts:
            enough = [c for c in open_parts if self.units(c) >= remaining]
            if enough:
                out += self._fill(min(enough, key=self.rank), remaining)
                break
            part = open_parts.pop(0)
            if self.units(part) > 0:
                out += self._fill(part, self.units(part))
                remaining -= self.units(part)
        return out

    def _balanced(self, parts: Parts) -> DomainPlacement:
        """Balanced parts, said as such where they span several domains of the level: the
        members each part one level below got (balanced.py evens those out)."""
        found = self._placed(parts)
        depth = self.ask.depth
        spanned = {domain.path[: depth + 1] for domain, _ in parts}
        if len(spanned) < 2:
            return found
        below_is_node = depth + 1 >= len(self.skeleton.by_depth)
        counts: dict[object, int] = {}
        for domain, nodes in parts:
            for node, members in nodes.items():
                key = node if below_is_node else domain.path[: depth + 2]
                counts[key] = counts.get(key, 0) + members
        below = "node" if below_is_node else self.ask.level_name(depth + 1)
        shares = " + ".join(str(n) for n in sorted(counts.values(), reverse=True))
        level = self.ask.level_name(depth)
        note = f"balanced: {shares} over {len(counts)} {below}s in {len(spanned)} {level}s"
        return replace(found, note=note)

    def _placed(self, parts: Parts) -> DomainPlacement:
        nodes: dict[str, int] = {}
        slices: list[dict[str, int]] = []
        for _, chosen in parts:
            for node, members in chosen.items():
                nodes[node] = nodes.get(node, 0) + members
            if self.ask.slice_size:
                # Layered: the innermost slices, in the order filled, so that each run of
                # an outer layer's size lies in one domain of that layer (layers.py).
                slices += cut(chosen, self.ask.cut_size)
        domain = domain_name(self.ask, [d.path for d, _ in parts], list(nodes))
        return DomainPlacement(dict(sorted(nodes.items())), domain, tuple(slices))

    # -- explaining ---------------------------------------------------------------

    def _short_overall(self, count: int) -> DomainShortfall:
        fits = self.units(self.skeleton.root) * self.k
        if not self.ask.slice_size:
            return DomainShortfall(fits, "")  # too little room anywhere: the usual message
        return DomainShortfall(
            fits,
            f"the gang needs {count // self.k} slices of {self.k} members, each inside one "
            f"{self.ask.level_name(self.ask.slice_depth)}; at most {fits // self.k} fit now",
        )

    def _short_in_one(self, count: int) -> DomainShortfall:
        ask = self.ask
        level, label = ask.level_name(ask.depth), ask.level_label(ask.depth)
        on_node = ask.depth == ask.node_depth
        domains = self.skeleton.leaves() if on_node else self.skeleton.by_depth[ask.depth]
        if on_node:
            best = max((self.totals.most_on_a_node(d) for d in domains), default=0)
        else:
            best = max((self.units(d) for d in domains), default=0) * self.k
        if ask.slice_size:
            return DomainShortfall(
                best,
                f"{self.units(self.skeleton.root)} slices of {self.k} members fit in Topology "
                f"{ask.topology}, at most {best // self.k} in any one {level} ({label}); "
                f"the gang needs {count // self.k} in one {level}",
            )
        resource, amount = self.totals.request.pairs[0]
        total, most = self._free(resource, ask.depth, per_node=on_node)
        res = self.resource
        return DomainShortfall(
            best,
            f"{format_milli(total, res)} {res} free in total in Topology "
            f"{ask.topology}, at most {format_milli(most, res)} in any one {level} ({label}); "
            f"the gang needs {format_milli(count * amount, res)} in one {level}",
        )

    def _free(self, resource: int, depth: int, *, per_node: bool) -> tuple[int, int]:
        """The scarce resource (a dimension index) free in the whole topology, and the most
        free in any one domain of ``depth`` (or on any one node), from each class's free
        buckets (no gang's view needs bringing up to date), re-read only where it moved."""
        skeleton = self.skeleton
        # Gangs alike are refused alike until a class moves (the version is the index's
        # move log, read at place()).
        key = (resource, depth, per_node)
        known = skeleton.free_seen.get(key)
        if known is not None and known[0] == self._version:
            return known[1]
        total = most = 0
        by_domain: dict[int, int] = {}
        for index in skeleton.root.classes:
            free, on_one_node = skeleton.class_free(index, resource)
            total += free
            if per_node:
                most = max(most, on_one_node)
            else:
                domain = skeleton.chains[index][depth + 1].id  # chains start at the root
                by_domain[domain] = by_domain.get(domain, 0) + free
        found = total, most if per_node else max(by_domain.values(), default=0)
        skeleton.free_seen[key] = (self._version, found)
        return found
