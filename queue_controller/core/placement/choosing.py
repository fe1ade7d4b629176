"""Choosing the nodes for a gang's members among the buckets that take one.

The heuristic is fit.py's (docs/model.md): if one node holds every member, the best
fit; otherwise fill the nodes that hold the most, completely, and repeat.  Ties break
on rank (class order) and node name, so the result is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from queue_controller.core.placement.nodeclasses import ClassView, FreeVector, Rank


@dataclass(slots=True)
class _Spread:
    """One bucket of a class as a spread fills it: its nodes (one free vector), the
    members each takes, and how many of the nodes are taken so far."""

    rank: Rank
    fits: int  # members per node
    free: FreeVector
    names: list[str]
    taken: int = 0


def choose_nodes(views: list[ClassView], count: int) -> dict[str, int]:
    """``count`` members on the views' nodes, by the placement heuristic (fit.py)."""
    if count <= 0:
        return {}
    # One node holds every member: best fit, in one pass (the common case).
    best: tuple[Rank, str] | None = None
    for view in views:
        buckets = view.node_class.buckets
        for free, (fits, rank) in view.fitting.items():
            if fits >= count and (best is None or rank <= best[0]):
                candidate = (rank, buckets[free][0])
                if best is None or candidate < best:
                    best = candidate
    if best is not None:
        return {best[1]: count}
    return _spread(views, count)


def _spread(views: list[ClassView], count: int) -> dict[str, int]:
    """A gang larger than any node: fill the biggest nodes, then best-fit the rest."""
    request = views[0].request
    buckets = [
        _Spread(rank, fits, free, view.node_class.buckets[free])
        for view in views
        for free, (fits, rank) in view.fitting.items()
    ]
    placement: dict[str, int] = {}
    remaining = count
    while remaining > 0:
        whole = [b for b in buckets if b.fits >= remaining and b.taken < len(b.names)]
        if whole:
            best = min(whole, key=lambda b: (b.rank, b.names[b.taken]))
            placement[best.names[best.taken]] = remaining
            break
        open_buckets = [b for b in buckets if b.taken < len(b.names)]
        most = max(b.fits for b in open_buckets)

        def filled(b: _Spread, most: int = most) -> tuple[Any, ...]:
            left = tuple(b.free[d] - a * most for d, a in request.pairs)
            return (b.rank[0], left, *b.rank[2:], b.names[b.taken])

        pick = min((b for b in open_buckets if b.fits == most), key=filled)
        nodes = min(len(pick.names) - pick.taken, remaining // most)
        for name in pick.names[pick.taken : pick.taken + nodes]:
            placement[name] = most
        pick.taken += nodes
        remaining -= nodes * most
    return placement
