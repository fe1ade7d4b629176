"""Nodes that fail and come back, and pods outside any queue that come and go.

:class:`~queue_controller.sim.engine.run.PolicyRun` mixes this in: a failed node's gangs are
evicted whole where a policy admits (and lose their pods where kube-scheduler alone
places them), and capacity that comes back wakes the admission cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queue_controller.sim.engine.admission import Admission
from queue_controller.sim.world.cluster import ForeignPods, NodeBook
from queue_controller.sim.world.events import Kind
from queue_controller.sim.world.faults import ForeignPod
from queue_controller.sim.world.runstate import JobState

MEMBERS_LOST = "MembersLost"


class NodeFaults:
    # Provided by PolicyRun.
    book: NodeBook
    admits: bool
    on_node: dict[str, set[JobState]]
    foreign: ForeignPods
    admission: Admission
    dirty: bool
    push: Callable[[float, Kind, Any], None]
    _wake: Callable[[], None]
    _evict: Callable[[JobState, str, str], None]
    _release: Callable[..., None]
    _terminating_lost: Callable[[str], None]
    _bind_delay: Callable[[JobState, int], float]

    @property
    def now(self) -> float:
        raise NotImplementedError

    def _node_down(self, node: str) -> None:
        self.book.fail(node)
        for job in sorted(self.on_node[node], key=lambda j: j.key):
            if self.admits:
                self._evict(job, MEMBERS_LOST, f"node {node} failed")
            else:
                self._lose(job, node)
        self.foreign.node_failed(node)
        self._terminating_lost(node)
        self.book.clear(node)

    def _lose(self, job: JobState, node: str) -> None:
        """per-pod: the Job controller recreates the lost pods; the gang's run restarts."""
        self._release(job, [node])
        job.attempt += 1
        job.running = job.bound_count
        for pod in range(job.bound_count, job.pods):
            at = self.now + self._bind_delay(job, pod)
            self.push(at, Kind.ENQUEUE, (job, job.attempt, pod, 0))

    def _node_up(self, node: str) -> None:
        self.book.recover(node)
        self.admission.freed_nodes.add(node)
        self.dirty = True
        self._wake()

    def _foreign_start(self, pod: ForeignPod) -> None:
        node = self.foreign.start(pod)
        if node is not None:
            self.push(pod.ends, Kind.FOREIGN_END, (pod, node))

    def _foreign_end(self, data: tuple[ForeignPod, str]) -> None:
        pod, node = data
        if self.foreign.end(pod, node):
            self.admission.freed_nodes.add(node)
            self.dirty = True
            self._wake()
