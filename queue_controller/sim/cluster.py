"""The simulated cluster: free capacity per node, and kube-scheduler's pod-by-pod placement.

Two parts that every policy shares:

- :class:`NodeBook` keeps each node's free capacity (physical: only bound
  pods count, never plans) and whether the node is up.
- :class:`PodScheduler` places pods one at a time in queue order, the way the
  default kube-scheduler does: filter (selector, taints, readiness, fit), then
  score with ``LeastAllocated`` (spread, its default) or ``MostAllocated``
  (bin-packing).  The baselines place every member this way, and pods outside
  any queue use it under every policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

from queue_controller.core import Node, PodTemplate
from queue_controller.core.nodes import exclusion, usable_allocatable
from queue_controller.core.resources import scarcity_rank
from queue_controller.sim.gpus import capacity, value_of

NOT_READY = {"Ready": "False"}


class NodeBook:
    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.order = sorted(self.nodes)
        self.allocatable = {n.name: dict(usable_allocatable(n)) for n in nodes}
        self.free = {name: dict(a) for name, a in self.allocatable.items()}
        self.gpus = {n.name: capacity(n) for n in nodes}
        self.down: set[str] = set()
        # Nodes whose free capacity grew since the scheduler last looked.
        self.freed: set[str] = set(self.order)
        self._snapshot_nodes: tuple[Node, ...] | None = None

    def fits(self, name: str, request: Mapping[str, int]) -> bool:
        free = self.free[name]
        return all(free.get(r, 0) >= amount for r, amount in request.items())

    def take(self, name: str, request: Mapping[str, int]) -> None:
        free = self.free[name]
        for r, amount in request.items():
            free[r] = free.get(r, 0) - amount

    def give(self, name: str, request: Mapping[str, int]) -> None:
        free = self.free[name]
        for r, amount in request.items():
            free[r] = free.get(r, 0) + amount
        self.freed.add(name)

    def fail(self, name: str) -> None:
        self.down.add(name)
        self._snapshot_nodes = None

    def recover(self, name: str) -> None:
        self.down.discard(name)
        self.free[name] = dict(self.allocatable[name])
        self.freed.add(name)
        self._snapshot_nodes = None

    def core_nodes(self) -> tuple[Node, ...]:
        """The nodes as the core sees them: a failed node is NotReady."""
        if self._snapshot_nodes is None:
            self._snapshot_nodes = tuple(
                replace(self.nodes[n], conditions=NOT_READY) if n in self.down else self.nodes[n]
                for n in self.order
            )
        return self._snapshot_nodes

    def used(self) -> dict[str, dict[str, int]]:
        """What bound pods take on each node that has any."""
        out = {}
        for name, free in self.free.items():
            allocatable = self.allocatable[name]
            used = {r: allocatable.get(r, 0) - amount for r, amount in free.items()}
            if any(used.values()):
                out[name] = used
        return out

    def capacity_gpus(self) -> float:
        return sum(self.gpus.values())


@dataclass(slots=True)
class QueuedPod:
    """A pod kube-scheduler has not bound yet.  Ordered by ``sort_key``: priority, then age."""

    sort_key: tuple[int, float, int]
    owner: Any  # what to tell when it binds
    attempt: int
    template: PodTemplate
    request: Mapping[str, int]
    shape: tuple[object, ...]


_SORT_KEY = attrgetter("sort_key")
Bind = Callable[[QueuedPod, str], bool]  # False: the bind failed, requeue the pod
Stale = Callable[[QueuedPod], bool]


class PodScheduler:
    def __init__(self, book: NodeBook, *, scoring: str) -> None:
        self.book = book
        self.most_allocated = scoring == "MostAllocated"
        self.queue: list[QueuedPod] = []
        self._eligible: dict[tuple[object, ...], list[str]] = {}
        self._eligible_sets: dict[tuple[object, ...], frozenset[str]] = {}
        # Shapes with pods queued since the last pass.
        self.fresh: set[tuple[object, ...]] = set()
        # Shapes that found no node at the last pass: only a freed node can change that.
        self._blocked: set[tuple[object, ...]] = set()

    def add(self, pod: QueuedPod) -> None:
        self.queue.append(pod)

    def eligible(self, shape: tuple[object, ...], template: PodTemplate) -> list[str]:
        """Nodes a pod of this shape may ever use (capacity aside), in name order."""
        nodes = self._eligible.get(shape)
        if nodes is None:
            nodes = [n for n in self.book.order if exclusion(self.book.nodes[n], template) is None]
            self._eligible[shape] = nodes
            self._eligible_sets[shape] = frozenset(nodes)
        return nodes

    def eligible_set(self, shape: tuple[object, ...], template: PodTemplate) -> frozenset[str]:
        if shape not in self._eligible_sets:
            self.eligible(shape, template)
        return self._eligible_sets[shape]

    def best_node(self, pod: QueuedPod, candidates: Sequence[str]) -> str | None:
        """kube-scheduler's choice: a node that fits, scored on the pod's scarcest resource
        (the share of it left free after binding), ties to the first name."""
        book, request = self.book, pod.request
        scarce = min(request, key=scarcity_rank)
        need = request[scarce]
        rest = [(r, a) for r, a in request.items() if r != scarce]
        free_of, allocatable_of, down = book.free, book.allocatable, book.down
        best: tuple[float, str] | None = None
        for name in candidates:
            free = free_of[name]
            left = free.get(scarce, 0) - need
            # The scarce resource first: on a busy cluster it rules out most nodes.
            if left < 0 or name in down or any(free.get(r, 0) < a for r, a in rest):
                continue
            total = allocatable_of[name].get(scarce, 0)
            share = left / total if total else 0.0
            score = share if self.most_allocated else -share
            if best is None or (score, name) < best:
                best = (score, name)
        return best[1] if best else None

    def run(self, *, bind: Bind, stale: Stale, retry: Callable[[QueuedPod], None]) -> int:
        """One pass over the queue in order; returns how many pods were bound."""
        freed, self.book.freed = self.book.freed, set()
        blocked_now: set[tuple[object, ...]] = set()
        kept: list[QueuedPod] = []
        bound = 0
        # Nearly sorted already (pods are appended as they come), so this is cheap.
        self.queue.sort(key=_SORT_KEY)
        queue, self.queue = self.queue, kept
        for pod in queue:
            if stale(pod):
                continue
            if pod.shape in blocked_now:
                kept.append(pod)
                continue
            candidates = self.eligible(pod.shape, pod.template)
            if pod.shape in self._blocked:
                candidates = [n for n in candidates if n in freed]
            node = self.best_node(pod, candidates)
            if node is None:
                blocked_now.add(pod.shape)
                kept.append(pod)
            elif bind(pod, node):
                bound += 1
            else:
                retry(pod)
        self._blocked = blocked_now
        return bound

    def stranded_gpus(
        self, waiting: Mapping[tuple[object, ...], tuple[PodTemplate, Mapping[str, int]]]
    ) -> float:
        """Free GPUs on up nodes that no waiting pod shape (shape -> template, request)
        could use.  Nothing is stranded while nothing waits: it is merely idle."""
        book = self.book
        stranded = 0.0
        if not waiting:
            return stranded
        for node in book.order:
            if node in book.down:
                continue
            free_gpus = self.gpus_of(node, book.free[node])
            if free_gpus <= 1e-9:
                continue
            if not any(
                book.fits(node, request) and node in self.eligible_set(shape, template)
                for shape, (template, request) in waiting.items()
            ):
                stranded += free_gpus
        return stranded

    def gpus_of(self, node: str, request: Mapping[str, int]) -> float:
        return value_of(self.book.nodes[node], request)
