"""Layered slices: slices inside slices (Kueue's TASMultiLayerTopology).

A pod set asking for slices of 16 per rack and, inside them, slices of 4 per host
is placed outer slice by outer slice as a single layer is (``domains.py`` counts
and ranks in outer slices down to the rack).  Inside a rack chosen for ``n``
outer slices this module places ``n * 16 / 4`` host slices, each on one node,
by the same fill, one layer at a time: the children that hold all of them,
best-fitting, else the fewest, largest first.  A layer's room in a domain is
exact (``domaintree.Totals``), so the fill never runs short.

The slices recorded are the innermost ones, in the order filled.  Every domain of
a layer's level receives a run of them that is a whole number of that layer's
slices, and the runs follow one another, so each ``size / innermost`` consecutive
innermost slices lie in one domain of that layer: the binder, which sends the
member of completion index i to slice i // k, needs nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from queue_controller.core.placement.topology.domaintree import Domain, Totals
from queue_controller.core.rules.topology import TopologyAsk

if TYPE_CHECKING:
    from queue_controller.core.placement.nodeclasses import ClassView

Parts = list[tuple[Domain, dict[str, int]]]


class Search(Protocol):
    """What the layered fill reads of a gang shape's DomainSearch."""

    ask: TopologyAsk
    totals: Totals
    choose: Callable[[list[ClassView], int], dict[str, int]]

    def units(self, domain: Domain) -> int: ...

    def rank(self, domain: Domain) -> tuple[object, ...]: ...

    def _best(self, candidates: list[Domain]) -> Domain: ...


def fill(search: Search, domain: Domain, units: int) -> Parts:
    """``units`` outermost slices inside ``domain``, a domain of the outermost level."""
    layers = search.ask.layers
    return _fill(search, domain, units * (layers[0][1] // layers[1][1]), 1)


def _fill(search: Search, domain: Domain, count: int, layer: int) -> Parts:
    """``count`` slices of layer ``layer`` inside ``domain`` (at or above its level)."""
    layers = search.ask.layers
    depth, k = layers[layer]
    if domain.depth == depth:
        if layer + 1 == len(layers):
            # The innermost layer's domain: its members anywhere in it, cut in order.
            return [(domain, search.choose(search.totals.views(domain), count * k))]
        return _fill(search, domain, count * (k // layers[layer + 1][1]), layer + 1)
    if not domain.children:
        # A leaf above the layer's level: the layer is the node (the innermost).
        return [(domain, choose_units(search.totals.views(domain), count, k))]
    # Below the outermost level, a domain's units are this layer's slices (Totals).
    units, rank = search.units, search.rank
    children = list(domain.children.values())
    whole = [c for c in children if units(c) >= count]
    if whole:
        return _fill(search, search._best(whole), count, layer)
    out: Parts = []
    remaining = count
    open_parts = sorted(children, key=lambda c: (-units(c), rank(c)))
    while remaining > 0 and open_parts:
        enough = [c for c in open_parts if units(c) >= remaining]
        if enough:
            out += _fill(search, min(enough, key=rank), remaining, layer)
            break
        part = open_parts.pop(0)
        if units(part) > 0:
            out += _fill(search, part, units(part), layer)
            remaining -= units(part)
    return out


def choose_units(views: Sequence[ClassView], units: int, k: int) -> dict[str, int]:
    """``units`` slices of ``k`` members, each on one node, as fit.py places members: the
    best-ranked node (the node heuristic's best fit) of those that hold every slice left,
    else the node holding the most,
    and then the same again for the rest.  So the last slices go to the tightest node that
    takes them, not to the next-largest one, which a later gang may need whole."""
    options = sorted(
        (-(fits // k), rank, name)
        for view in views
        for free, (fits, rank) in view.fitting.items()
        if fits // k > 0
        for name in view.node_class.buckets[free]
    )
    placement: dict[str, int] = {}
    remaining = units
    for position, (most, _, name) in enumerate(options):
        if remaining <= 0:
            break
        if -most >= remaining:
            # The rest fits on one node: the best fit among those that hold it.
            fitting = (o for o in options[position:] if -o[0] >= remaining)
            _, _, tightest = min(fitting, key=lambda o: (o[1], o[2]))
            placement[tightest] = remaining * k
            return placement
        placement[name] = -most * k
        remaining += most
    return placement
