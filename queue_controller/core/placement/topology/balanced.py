"""Balanced placement: Kueue's ``TASBalancedPlacement``, for a Topology whose
``spec.placement`` is ``Balanced``.

Why: best fit packs.  Twelve members over two racks of ten free go (10, 2), and an
all-to-all collective (Allgather) then waits on the crowded side of the cut; (6, 6)
shares the cross-domain traffic evenly.  Packing is what keeps whole domains whole
for later gangs, so this is a Topology's choice (the admin's), never the default.

The rule (docs/topology.md says how it maps to Kueue's):

- Only *preferred* requests, and only when one domain one level above the
  requested level (the *group*; the whole Topology for the broadest level) holds
  the gang.  Otherwise best fit places it, as in Kueue.
- The gang takes the fewest domains of the requested level (the *mids*) that any
  group needs, so it is never split over more of them than best fit would split
  it: a gang that one rack holds stays in one rack.  Kueue maximises the least
  count first and may split such a gang over two racks; we keep "preferred" first.
- One level below (the *parts*: child domains, or nodes), it takes the fewest
  parts of the chosen mids and maximises the least count any part gets (Kueue's
  *threshold*, the minimum of ``units // parts`` and the last part's room).  Every
  part gets the threshold, and the rest is dealt one unit at a time round the
  parts, largest first, skipping full ones (water filling): two parts differ by
  more than one unit only where the smaller is full.
- Ties: the highest threshold, then the least room in all (Kueue's "tightest
  set"), then the best-fit rank (in use first), so that balance costs as few
  whole domains as it can.

Counting is in units (members, or whole slices) as in ``domains.py``; a slice
level at the requested level makes the mids their own parts (a slice is never cut).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from queue_controller.core.model.objects import TopologyMode
from queue_controller.core.placement.topology.domaintree import Domain, Skeleton, Totals
from queue_controller.core.rules.topology import UNCONSTRAINED, TopologyAsk

Parts = list[tuple[Domain, dict[str, int]]]


class Search(Protocol):
    """What balanced placement reads of a gang shape's DomainSearch."""

    ask: TopologyAsk
    totals: Totals
    k: int

    def units(self, domain: Domain) -> int: ...

    def rank(self, domain: Domain) -> tuple[object, ...]: ...

    def _fill(self, domain: Domain, units: int) -> Parts: ...


@dataclass(frozen=True, slots=True)
class _Part:
    """A domain, or a node (``node`` set, ``domain`` its narrowest domain)."""

    domain: Domain
    node: str
    units: int
    key: tuple[object, ...]  # best-fit order among equals


@dataclass(frozen=True, slots=True)
class _Mid:
    part: _Part  # the mid itself, as one candidate
    parts: tuple[_Part, ...]  # what is one level below it


@dataclass(frozen=True, slots=True)
class _Plan:
    mids: int
    threshold: int
    room: int
    key: tuple[object, ...]
    counts: tuple[tuple[_Part, int], ...]


def place(search: Search, units: int) -> Parts | None:
    """``units`` placed balanced, or None where best fit places them instead."""
    ask = search.ask
    if ask.mode is not TopologyMode.PREFERRED or ask.depth == UNCONSTRAINED or units <= 0:
        return None
    best: _Plan | None = None
    for group in _groups(search.totals.skeleton, ask.depth):
        if search.units(group) < units:
            continue
        plan = _plan(search, group, units)
        if plan is not None and (best is None or _order(plan) < _order(best)):
            best = plan
    if best is None:
        return None
    out: Parts = []
    for part, count in best.counts:
        if part.node:
            out.append((part.domain, {part.node: count * search.k}))
        else:
            out += search._fill(part.domain, count)
    return out


def _order(plan: _Plan) -> tuple[object, ...]:
    return (plan.mids, -plan.threshold, plan.room, plan.key)


def _groups(skeleton: Skeleton, depth: int) -> Sequence[Domain]:
    if depth - 1 == UNCONSTRAINED:
        return [skeleton.root]
    return skeleton.by_depth.get(depth - 1, ())


def _plan(search: Search, group: Domain, units: int) -> _Plan | None:
    mids = _mids(search, group)
    need = _fewest([m.part.units for m in mids], units)
    everything = [p for m in mids for p in m.parts]
    fewest_parts = _fewest([p.units for p in everything], units)
    if need is None or fewest_parts is None:
        return None
    ordered = sorted(p.units for p in everything)[::-1]
    top = min(units // fewest_parts, ordered[fewest_parts - 1])
    # Kueue's threshold bounds the least count from above; try it, then every smaller
    # one.  A threshold can fail on the tightest set of mids and hold on a lower one
    # (racks of 4 + 4, 4 and 8 for 9 members: at 4 the tightest pair, 4 + 4 and 4, needs
    # three parts of 4; at 3 it takes 3 + 3 + 3), and a gang that one group holds is
    # always placed balanced, never handed back to best fit for it.
    for threshold in range(top, 0, -1):
        found = _at(search, mids, units, threshold, need)
        if found is not None:
            room, counts = found
            return _Plan(need, threshold, room, search.rank(group), counts)
    return None


def _at(
    search: Search, mids: Sequence[_Mid], units: int, threshold: int, need: int
) -> tuple[int, tuple[tuple[_Part, int], ...]] | None:
    """The placement whose every part gets ``threshold`` or more, over ``need`` mids."""
    pruned = []
    for mid in mids:
        parts = [p for p in mid.parts if p.units >= threshold]
        room = sum(p.units for p in parts)
        if room >= threshold:
            pruned.append((mid, parts, room))
    if _fewest([room for _, _, room in pruned], units) != need:
        return None
    chosen = _tightest([(room, mid.part.key) for mid, _, room in pruned], need, units)
    if not chosen:
        return None
    candidates = sorted((p for i in chosen for p in pruned[i][1]), key=lambda p: (-p.units, p.key))
    used = _fewest([p.units for p in candidates], units)
    if used is None or used * threshold > units:
        return None
    picked = _tightest([(p.units, p.key) for p in candidates], used, units)
    if not picked:
        return None
    parts = [candidates[i] for i in sorted(picked)]
    counts = _water_fill([p.units for p in parts], units, threshold)
    room = sum(pruned[i][2] for i in chosen)
    return room, tuple(zip(parts, counts, strict=True))


def _mids(search: Search, group: Domain) -> list[_Mid]:
    ask = search.ask
    if ask.depth == ask.node_depth:
        return [_Mid(node, (node,)) for node in _nodes(search, group)]
    mids = []
    for child in group.children.values():
        mid = _Part(child, "", search.units(child), search.rank(child))
        if mid.units <= 0:
            continue
        if ask.slice_size and ask.slice_depth == child.depth:
            parts: tuple[_Part, ...] = (mid,)  # a slice is never cut below its level
        elif child.depth + 1 == ask.node_depth:
            parts = tuple(_nodes(search, child))
        else:
            parts = tuple(
                _Part(c, "", search.units(c), search.rank(c))
                for c in child.children.values()
                if search.units(c) > 0
            )
        mids.append(_Mid(mid, parts))
    mids.sort(key=lambda m: (-m.part.units, m.part.key))
    return mids


def _nodes(search: Search, domain: Domain) -> Iterator[_Part]:
    """The nodes of a narrowest domain, with the units each takes."""
    ask = search.ask
    k = ask.slice_size if ask.slice_size and ask.slice_depth == ask.node_depth else 1
    for view in search.totals.views(domain):
        buckets = view.node_class.buckets
        for free, (fits, rank) in view.fitting.items():
            if fits // k:
                for name in buckets[free]:
                    yield _Part(domain, name, fits // k, (rank, name))


def _fewest(rooms: Sequence[int], units: int) -> int | None:
    """How many of ``rooms`` hold ``units``, taking the largest first (the fewest)."""
    total = 0
    for count, room in enumerate(sorted(rooms, reverse=True), start=1):
        total += room
        if total >= units:
            return count
    return None


def _tightest(items: Sequence[tuple[int, tuple[object, ...]]], size: int, units: int) -> list[int]:
    """``size`` of ``items`` (room, key) holding ``units`` with the least room in all,
    ties to the earlier items in (largest room, key) order, as Kueue's search keeps
    the first set it finds; their indexes."""
    order = sorted(range(len(items)), key=lambda i: (-items[i][0], items[i][1]))
    if size == 1:
        fitting = [(items[i][0], position, i) for position, i in enumerate(order)]
        return [min(f for f in fitting if f[0] >= units)[2]] if fitting[0][0] >= units else []
    # Sets by how many are taken, then by room still missing (first found kept).
    start: dict[int, tuple[int, ...]] = {units: ()}
    found = [start] + [{} for _ in range(size)]
    for i in order:
        room = items[i][0]
        for taken in range(size, 0, -1):
            for missing, chosen in sorted(found[taken - 1].items()):
                if missing > 0:
                    found[taken].setdefault(missing - room, (*chosen, i))
    done = [missing for missing in found[size] if missing <= 0]
    return list(found[size][max(done)]) if done else []


def _water_fill(rooms: Sequence[int], units: int, threshold: int) -> list[int]:
    """Every part ``threshold``; the rest dealt evenly, largest first, none over its room."""
    counts = [threshold] * len(rooms)
    left = units - threshold * len(rooms)
    while left > 0:
        open_ = [i for i, room in enumerate(rooms) if counts[i] < room]
        if not open_:
            break
        step = min(left // len(open_), min(rooms[i] - counts[i] for i in open_))
        if step == 0:
            for i in open_[:left]:
                counts[i] += 1
            break
        for i in open_:
            counts[i] += step
        left -= step * len(open_)
    return counts
