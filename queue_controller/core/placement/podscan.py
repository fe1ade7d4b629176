"""The naive placer: every member pod scans every node, as a per-pod scheduler does.

It applies the same filters and the same best-fit preference as the
equivalence index, but with none of its grouping, so it costs
``members x nodes`` filter runs per gang.  It exists as the baseline the
benchmark measures against and as an independent cross-check in the tests;
the simulator's per-pod policy uses it too.  It ignores topology requests, as a
per-pod scheduler without topology plugins does: that is the baseline.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from queue_controller.core.model.objects import Node
from queue_controller.core.model.resources import Resources, is_extended, scarcity_rank
from queue_controller.core.placement.explain import Scatter, explain_shortfall
from queue_controller.core.placement.shapes import GangShape, Placement, Shortfall
from queue_controller.core.rules.nodes import exclusion, usable_allocatable


class PodByPodPlacer:
    def __init__(
        self,
        nodes: Sequence[Node],
        used: Mapping[str, Resources],
        shapes: Iterable[GangShape] = (),
    ) -> None:
        del shapes  # the naive placer prepares nothing per shape
        self._nodes = sorted(nodes, key=lambda n: n.name)
        self._allocatable = {n.name: usable_allocatable(n) for n in self._nodes}
        self._free: dict[str, dict[str, int]] = {}
        for node in self._nodes:
            node_used = used.get(node.name, {})
            allocatable = self._allocatable[node.name]
            names = set(allocatable) | set(node_used)
            self._free[node.name] = {r: allocatable.get(r, 0) - node_used.get(r, 0) for r in names}

    def _best_node(self, shape: GangShape, taken: Mapping[str, int]) -> str | None:
        request = sorted(shape.request.items(), key=lambda kv: scarcity_rank(kv[0]))
        best: tuple[object, ...] | None = None
        best_name: str | None = None
        for node in self._nodes:
            if exclusion(node, shape.template) is not None:
                continue
            free = self._free[node.name]
            members = taken.get(node.name, 0) + 1
            after = tuple(free.get(r, 0) - amount * members for r, amount in request)
            if any(left < 0 for left in after):
                continue
            key = (
                any(
                    amount > 0 and is_extended(r) and r not in shape.request
                    for r, amount in free.items()
                ),
                after,
                members == 1 and self._is_empty(node.name),
                node.name,
            )
            if best is None or key < best:
                best, best_name = key, node.name
        return best_name

    def _is_empty(self, name: str) -> bool:
        allocatable = self._allocatable[name]
        return all(self._free[name].get(r, 0) == a for r, a in allocatable.items())

    def try_place(self, shape: GangShape, count: int) -> Placement | Shortfall:
        taken: Counter[str] = Counter()
        for placed in range(count):
            name = self._best_node(shape, taken)
            if name is None:
                return Shortfall(placed, count, self._explain(shape, count, placed))
            taken[name] += 1
        return Placement(dict(taken))

    def commit(self, shape: GangShape, placement: Placement) -> None:
        self._take(shape, placement, 1)

    def release(self, shape: GangShape, placement: Placement) -> None:
        self._take(shape, placement, -1)

    def adjust(self, node: str, freed: Mapping[str, int]) -> None:
        free = self._free.get(node)
        if free is None:
            return
        for resource, amount in freed.items():
            free[resource] = free.get(resource, 0) + amount

    def withhold(self, node: str) -> Mapping[str, int]:
        free = self._free.get(node)
        if free is None:
            return {}
        taken = {resource: amount for resource, amount in free.items() if amount > 0}
        for resource in taken:
            free[resource] = 0
        return taken

    def place_on(self, shape: GangShape, nodes: Mapping[str, int]) -> Placement | None:
        by_name = {n.name: n for n in self._nodes}
        for name, members in nodes.items():
            node = by_name.get(name)
            if node is None or exclusion(node, shape.template) is not None:
                return None
            free = self._free[name]
            if any(free.get(r, 0) < a * members for r, a in shape.request.items()):
                return None
        return Placement(dict(nodes))

    def _take(self, shape: GangShape, placement: Placement, sign: int) -> None:
        for name, members in placement.nodes.items():
            free = self._free[name]
            for r, amount in shape.request.items():
                free[r] = free.get(r, 0) - amount * members * sign

    def _explain(self, shape: GangShape, count: int, fits: int) -> str:
        request = sorted(shape.request.items(), key=lambda kv: scarcity_rank(kv[0]))
        scarce, per_member = request[0]
        blocked: Counter[str] = Counter()
        usable = total_free = most_free = 0
        for node in self._nodes:
            reason = exclusion(node, shape.template)
            if reason is not None:
                blocked[reason.describe()] += 1
                continue
            free = self._free[node.name]
            if all(free.get(r, 0) >= a for r, a in request):
                usable += 1
            # The resource that runs out first; on a tie, the scarcest (as the index does).
            limiting = min(request, key=lambda ra: max(free.get(ra[0], 0) // ra[1], 0))
            blocked[f"Insufficient {limiting[0]}"] += 1
            spare = max(0, free.get(scarce, 0))
            total_free += spare
            most_free = max(most_free, spare)
        return explain_shortfall(
            fits=fits,
            needed=count,
            usable_nodes=usable,
            blocked=blocked,
            scatter=Scatter(scarce, total_free, most_free, per_member),
        )
