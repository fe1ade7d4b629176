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

import heapq
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

from queue_controller.core import BoundPod, Container, Node, PodTemplate
from queue_controller.core.model import GPU, ONE, scarcity_rank
from queue_controller.core.rules import exclusion, usable_allocatable
from queue_controller.sim.scenario.dra import DeviceBook
from queue_controller.sim.scenario.gpus import capacity, value_of
from queue_controller.sim.world.faults import ForeignPod

NOT_READY = {"Ready": "False"}


class NodeBook:
    """Free capacity per node.  With ``devices`` (node -> whole GPUs offered through
    DRA, ``simulate --dra``) the whole GPUs pods take there are also devices of the
    :class:`DeviceBook`, by owner; the core is shown those nodes and pods without
    ``nvidia.com/gpu``, and the devices as allocated claims instead."""

    def __init__(self, nodes: Sequence[Node], devices: Mapping[str, int] | None = None) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.devices = DeviceBook(devices or {})
        self._claimed = frozenset(devices or ())  # nodes whose GPUs the core sees as devices
        # Such a node's whole GPUs are offered as devices of its ResourceSlice instead.
        self._core_base = {
            node.name: replace(
                node,
                allocatable={r: a for r, a in node.allocatable.items() if r != GPU},
                capacity={r: a for r, a in node.capacity.items() if r != GPU},
            )
            if node.name in self._claimed
            else node
            for node in nodes
        }
        self.order = sorted(self.nodes)
        self.allocatable = {n.name: dict(usable_allocatable(n)) for n in nodes}
        self.free = {name: dict(a) for name, a in self.allocatable.items()}
        self.gpus = {n.name: capacity(n) for n in nodes}
        self.down: set[str] = set()
        # Nodes whose free capacity grew since the scheduler last looked.
        self.freed: set[str] = set(self.order)
        self._snapshot_nodes: tuple[Node, ...] | None = None
        self._touched: set[str] = set(self.order)
        self._usage: dict[str, BoundPod] = {}
        # Node -> what pods shown to the core as their gang's own take there
        # (JobState.core_pods): left out of the anonymous usage, or counted twice.
        self.owned: dict[str, dict[str, int]] = {}

    def fits(self, name: str, request: Mapping[str, int]) -> bool:
        free = self.free[name]
        for resource, amount in request.items():  # noqa: SIM110 (a loop is faster; hot)
            if free.get(resource, 0) < amount:
                return False
        return True

    def take(self, name: str, request: Mapping[str, int], owner: Hashable = None) -> None:
        """One pod of ``request`` binds to ``name``; ``owner`` holds its devices, if any."""
        free = self.free[name]
        for r, amount in request.items():
            free[r] = free.get(r, 0) - amount
        self._touched.add(name)
        if name in self._claimed:
            self.devices.take(name, owner, request.get(GPU, 0) // ONE)

    def give(self, name: str, request: Mapping[str, int], owner: Hashable = None) -> None:
        """One pod of ``request`` that ``owner`` bound to ``name`` is gone."""
        free = self.free[name]
        for r, amount in request.items():
            free[r] = free.get(r, 0) + amount
        self.freed.add(name)
        self._touched.add(name)
        if name in self._claimed:
            self.devices.give(name, owner, request.get(GPU, 0) // ONE)

    def own(self, name: str, request: Mapping[str, int], times: int) -> None:
        """``times`` pods of ``request`` on ``name`` become (or, negative, stop being)
        shown to the core as their gang's own."""
        owned = self.owned.setdefault(name, {})
        for r, amount in request.items():
            owned[r] = owned.get(r, 0) + amount * times
        self._touched.add(name)

    def clear(self, name: str) -> None:
        """Everything on the node is gone (it failed)."""
        self.free[name] = dict(self.allocatable[name])
        self._touched.add(name)
        self.devices.clear(name)

    def fail(self, name: str) -> None:
        self.down.add(name)
        self._snapshot_nodes = None

    def recover(self, name: str) -> None:
        self.down.discard(name)
        self.clear(name)
        self.freed.add(name)
        self._snapshot_nodes = None

    def core_nodes(self) -> tuple[Node, ...]:
        """The nodes as the core sees them: a failed node is NotReady."""
        if self._snapshot_nodes is None:
            self._snapshot_nodes = tuple(self._core_node(n) for n in self.order)
        return self._snapshot_nodes

    def _core_node(self, name: str) -> Node:
        node = self._core_base[name]
        return replace(node, conditions=NOT_READY) if name in self.down else node

    def usage(self) -> tuple[BoundPod, ...]:
        """What bound pods take, one summed pod per node that has any, for the core.

        Only nodes touched since the last call are recomputed: a cycle at 500 nodes
        would otherwise spend most of its time here.
        """
        for name in self._touched:
            allocatable = self.allocatable[name]
            used = {r: allocatable.get(r, 0) - amount for r, amount in self.free[name].items()}
            owned = self.owned.get(name)
            if owned:
                used = {r: amount - owned.get(r, 0) for r, amount in used.items()}
            if name in self._claimed:
                used.pop(GPU, None)  # held by claims (DeviceBook.claims)
            if any(used.values()):
                self._usage[name] = BoundPod(
                    namespace="", name=f"usage-{name}", node_name=name, request=used
                )
            else:
                self._usage.pop(name, None)
        self._touched.clear()
        return tuple(self._usage.values())

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

    def _score(self, name: str, scarce: str, need: int) -> float:
        """best_node's score: the share of the scarce resource left after binding."""
        total = self.book.allocatable[name].get(scarce, 0)
        share = (self.book.free[name].get(scarce, 0) - need) / total if total else 0.0
        return share if self.most_allocated else -share

    def run(self, *, bind: Bind, stale: Stale, retry: Callable[[QueuedPod], None]) -> int:
        """One pass over the queue in order; returns how many pods were bound.

        Each pod goes where :meth:`best_node` would send it.  Rather than scan
        the nodes for every pod, a pass keeps one heap of (score, node) per shape:
        a bind changes one node, whose new score is pushed to every heap, and an
        entry whose score is no longer the node's is dropped when it surfaces.
        Within a pass capacity only shrinks, so a node that no longer fits a
        shape is dropped from that shape's heap for good.
        """
        book = self.book
        freed, book.freed = book.freed, set()
        blocked_now: set[tuple[object, ...]] = set()
        heaps: dict[tuple[object, ...], tuple[list[tuple[float, str]], str, int, QueuedPod]] = {}
        kept: list[QueuedPod] = []
        bound = 0
        # Nearly sorted already (pods are appended as they come), so this is cheap.
        self.queue.sort(key=_SORT_KEY)
        queue, self.queue = self.queue, kept
        for pod in queue:
            if stale(pod):
                continue
            shape = pod.shape
            if shape in blocked_now:
                kept.append(pod)
                continue
            entry = heaps.get(shape)
            if entry is None:
                candidates = self.eligible(shape, pod.template)
                if shape in self._blocked:
                    candidates = [n for n in candidates if n in freed]
                scarce = min(pod.request, key=scarcity_rank)
                need = pod.request[scarce]
                heap = [
                    (self._score(n, scarce, need), n)
                    for n in candidates
                    if n not in book.down and book.fits(n, pod.request)
                ]
                heapq.heapify(heap)
                entry = heaps[shape] = (heap, scarce, need, pod)
            heap, scarce, need, _ = entry
            node = None
            while heap:
                score, name = heap[0]
                if name in book.down or not book.fits(name, pod.request):
                    heapq.heappop(heap)
                elif score != self._score(name, scarce, need):
                    heapq.heappop(heap)  # stale: the node's current entry is in the heap too
                else:
                    node = name
                    break
            if node is None:
                blocked_now.add(shape)
                kept.append(pod)
            elif bind(pod, node):
                bound += 1
                for other, (other_heap, other_scarce, other_need, sample) in heaps.items():
                    if node in self.eligible_set(other, sample.template) and book.fits(
                        node, sample.request
                    ):
                        heapq.heappush(
                            other_heap, (self._score(node, other_scarce, other_need), node)
                        )
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


# Pods outside any queue: no selector, nothing tolerated.
_FOREIGN_TEMPLATE = PodTemplate(containers=(Container(name="foreign"),))


class ForeignPods:
    """Pods outside any queue (notebooks, debug pods) that take GPUs from every policy.

    kube-scheduler places each one when it arrives, knowing nothing of the plans of
    admitted gangs; one that finds no room is dropped rather than queued.
    """

    def __init__(self, book: NodeBook, scheduler: PodScheduler) -> None:
        self.book = book
        self.scheduler = scheduler
        self.on_node: dict[str, set[int]] = defaultdict(set)
        self.dropped = 0

    def start(self, pod: ForeignPod) -> str | None:
        """Bind ``pod`` where kube-scheduler would; the node, or None if none had room."""
        queued = QueuedPod((0, 0.0, 0), pod, 0, _FOREIGN_TEMPLATE, pod.request, ("foreign",))
        node = self.scheduler.best_node(
            queued, self.scheduler.eligible(queued.shape, queued.template)
        )
        if node is None:
            self.dropped += 1
            return None
        self.book.take(node, pod.request, ("foreign", pod.index))
        self.on_node[node].add(pod.index)
        return node

    def end(self, pod: ForeignPod, node: str) -> bool:
        """``pod`` ends; False if it was already gone with its node."""
        if pod.index not in self.on_node[node]:
            return False
        self.on_node[node].discard(pod.index)
        self.book.give(node, pod.request, ("foreign", pod.index))
        return True

    def node_failed(self, node: str) -> None:
        self.on_node[node].clear()
