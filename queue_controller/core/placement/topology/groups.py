"""A group of pod sets in one domain: Kueue's ``podset-group-name``.

A Ray head and its workers, a PyTorchJob's master and its workers: pod sets with
different per-pod requests that must share one rack (or one block, one node).  Each
member keeps its own search (its own requests and node eligibility, so its own tree of
domains); the group meets in the domain of one *path*, at the level they all ask for.

How a group is placed (written down in docs/topology.md):

1. Each member must fit alone, under its own request; if one does not, that member's
   shortfall is the group's (the usual message, naming it).
2. From the requested level up to the broadest (only the requested one when required),
   the domains where every member fits alone are candidates, ranked as the largest
   member's search ranks them (in use before empty, least room, from the top).  In each,
   the members are placed in turn, the largest first (the workers before their leader),
   each by the usual fill of that domain and each taking its room before the next looks:
   the first candidate that holds them all is the group's.  So their resources are
   counted together: a leader's CPU and its workers' GPUs must fit in the same rack.
3. Preferred, and no one domain holds the group: each member by its own search, in turn.

The candidates are tried with tentative commits on the index (``take``), always given
back: the search changes nothing, as ``try_place`` does not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from queue_controller.core.model.objects import TopologyMode
from queue_controller.core.placement.topology.domains import (
    DomainPlacement,
    DomainSearch,
    DomainShortfall,
)
from queue_controller.core.placement.topology.slices import domain_name
from queue_controller.core.rules.topology import UNCONSTRAINED

if TYPE_CHECKING:
    from queue_controller.core.placement.topology.domaintree import Domain

Take = Callable[[int, DomainPlacement, int], None]  # (member, placement, +1 take / -1 give)
FitsOn = Callable[[int, str], int]  # (member, node) -> members of it that node holds now


@dataclass(frozen=True, slots=True)
class Member:
    search: DomainSearch
    count: int


@dataclass(frozen=True, slots=True)
class Apart:
    """The group does not fit together: which member fails alone (None: only together),
    and what to say."""

    member: int | None
    fits: int
    explanation: str


def place_group(
    members: Sequence[Member], moved: Sequence[int], take: Take, fits_on: FitsOn
) -> list[DomainPlacement] | Apart:
    """Every member placed in one domain (placements in the members' order), or why not.

    ``moved`` is the index's live log of moved classes: ``take`` appends to it, and each
    search catches up from it before it reads the room."""
    order = sorted(range(len(members)), key=lambda i: (-members[i].count, i))
    for i in order:
        alone = members[i].search.place(members[i].count, moved)
        if isinstance(alone, DomainShortfall):
            return Apart(i, alone.fits, alone.explanation)
    lead = members[order[0]].search
    ask = lead.ask
    depths = [ask.depth]
    if ask.mode is TopologyMode.PREFERRED:
        depths += list(range(ask.depth - 1, UNCONSTRAINED, -1))
    for depth in depths:
        if depth == ask.node_depth:
            for node, leaf in _nodes(members, order, moved):
                placed = _on_node(members, order, node, leaf, take, fits_on)
                if placed is not None:
                    return placed
            continue
        for path in _candidates(members, order, depth, moved):
            placed = _in_turn(members, order, moved, take, path)
            if placed is not None:
                return placed
    if ask.mode is TopologyMode.PREFERRED:
        placed = _in_turn(members, order, moved, take, None)
        if placed is not None:
            return placed
    level = ask.level_name(ask.depth)
    return Apart(
        None,
        0,
        f"each fits alone, but no one {level} ({ask.level_label(ask.depth)}) holds them "
        "together now",
    )


def _candidates(
    members: Sequence[Member], order: Sequence[int], depth: int, moved: Sequence[int]
) -> list[tuple[str, ...]]:
    """Paths of the domains at ``depth`` where every member fits alone, best first."""
    for member in members:
        member.search.sync(moved)
    lead = members[order[0]].search
    fitting: list[Domain] = []
    for domain in lead.skeleton.by_depth.get(depth, ()):
        for member in members:
            own = member.search.skeleton.by_path.get(domain.path)
            if own is None or member.search.units(own) < member.count:
                break
        else:
            fitting.append(domain)
    fitting.sort(key=lead.rank)
    return [domain.path for domain in fitting]


def _in_turn(
    members: Sequence[Member],
    order: Sequence[int],
    moved: Sequence[int],
    take: Take,
    path: tuple[str, ...] | None,
) -> list[DomainPlacement] | None:
    """The members placed one after another, inside ``path`` (None: each by its own
    search); every tentative take given back before returning."""
    found: dict[int, DomainPlacement] = {}
    try:
        for i in order:
            member = members[i]
            if path is None:
                placed = member.search.place(member.count, moved)
                if isinstance(placed, DomainShortfall):
                    return None
            else:
                within = member.search.place_within(path, member.count, moved)
                if within is None:
                    return None
                placed = within
            take(i, placed, 1)
            found[i] = placed
        return [found[i] for i in range(len(members))]
    finally:
        for i, placed in found.items():
            take(i, placed, -1)


def _nodes(
    members: Sequence[Member], order: Sequence[int], moved: Sequence[int]
) -> list[tuple[str, Domain]]:
    """Nodes holding every member of the largest one, best first (its leaf's rank, then
    the node heuristic's)."""
    lead_member = members[order[0]]
    lead = lead_member.search
    lead.sync(moved)
    ranked = []
    for leaf in lead.skeleton.leaves():
        if lead.totals.members[leaf.id] < lead_member.count:
            continue
        leaf_rank = lead.rank(leaf)
        for view in lead.totals.views(leaf):
            buckets = view.node_class.buckets
            for free, (fits, rank) in view.fitting.items():
                if fits >= lead_member.count:
                    ranked += [(leaf_rank, rank, name, leaf) for name in buckets[free]]
    ranked.sort(key=lambda r: (r[0], r[1], r[2]))
    return [(name, leaf) for _, _, name, leaf in ranked]


def _on_node(
    members: Sequence[Member],
    order: Sequence[int],
    node: str,
    leaf: Domain,
    take: Take,
    fits_on: FitsOn,
) -> list[DomainPlacement] | None:
    """Every member on ``node``, each taking its room before the next looks."""
    ask = members[order[0]].search.ask
    name = domain_name(ask, [leaf.path], [node])
    found: dict[int, DomainPlacement] = {}
    try:
        for i in order:
            if fits_on(i, node) < members[i].count:
                return None
            placed = DomainPlacement({node: members[i].count}, name, ())
            take(i, placed, 1)
            found[i] = placed
        return [found[i] for i in range(len(members))]
    finally:
        for i, placed in found.items():
            take(i, placed, -1)
