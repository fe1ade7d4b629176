"""Which nodes to reserve for one gang, and from when.

The running gangs end, by their estimates, one after another.  After the first
``k`` of them end, either the gang fits (with the cycle's best-fit rules,
topology included) or it does not; ending more only frees more, so the least
such ``k`` is found by bisection, each step a placer built over the room as it
would then be.  The gang's reservation is that placement, from the ``k``-th
end.  Gangs without an estimate never end here: room they hold is never
promised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from queue_controller.core.model.objects import Node
from queue_controller.core.model.resources import Resources
from queue_controller.core.placement.gangsets import SetsRefused, place_sets
from queue_controller.core.placement.shapes import GangShape, Placer, SetShape

PlacerFactory = Callable[[Sequence[Node], Mapping[str, Resources], Sequence[GangShape]], Placer]
Usage = Mapping[str, Mapping[str, int]]  # node -> resource -> amount


@dataclass(frozen=True, slots=True)
class Occupant:
    """A running gang as the reservation sees it: when it ends, and what it frees."""

    end: float
    usage: Usage


@dataclass(frozen=True, slots=True)
class Chosen:
    placement: Mapping[str, Mapping[str, int]]  # pod set -> node -> members
    start: float


def choose(
    sets: Sequence[SetShape],
    *,
    nodes: Sequence[Node],
    used: Usage,
    occupants: Sequence[Occupant],
    now: float,
    placer: PlacerFactory,
) -> Chosen | None:
    """The nodes where ``sets`` fit soonest, and when; None if no estimate frees them."""
    ending = sorted(occupants, key=lambda o: o.end)
    shapes = [s.shape for s in sets]

    def placed_after(k: int) -> dict[str, dict[str, int]] | None:
        room = _without(used, ending[:k])
        index = placer(nodes, room, shapes)
        placed = place_sets(index, sets)
        if isinstance(placed, SetsRefused):
            return None
        return {
            item.pod_set.name: dict(sorted(p.nodes.items()))
            for item, p in zip(sets, placed, strict=True)
        }

    if placed_after(len(ending)) is None:
        return None
    low, high = 0, len(ending)  # fits after ``high`` ends; least such is wanted
    while low < high:
        middle = (low + high) // 2
        if placed_after(middle) is None:
            low = middle + 1
        else:
            high = middle
    placement = placed_after(low)
    assert placement is not None  # monotone: ending more never takes room away
    start = max(now, ending[low - 1].end) if low else now
    return Chosen(placement, start)


def _without(used: Usage, ended: Sequence[Occupant]) -> dict[str, dict[str, int]]:
    room: dict[str, dict[str, int]] = {node: dict(amounts) for node, amounts in used.items()}
    for occupant in ended:
        for node, amounts in occupant.usage.items():
            left = room.get(node)
            if left is None:
                continue
            for resource, amount in amounts.items():
                left[resource] = max(0, left.get(resource, 0) - amount)
    return room
