"""How a run's member pods get to nodes: where the core planned, or through kube-scheduler.

gang-fit binds each member to the node the core planned for it (retrying
there while the bind fails); the other policies queue members for the
kube-scheduler model, which binds them wherever they fit, in priority order.
:class:`~queue_controller.sim.engine.run.PolicyRun` mixes this in; the bind itself,
and what it holds, stays there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from queue_controller.sim.scenario.policy import Policy
from queue_controller.sim.world.cluster import NodeBook, PodScheduler, QueuedPod
from queue_controller.sim.world.events import Kind
from queue_controller.sim.world.faults import FaultPlan, uniform
from queue_controller.sim.world.runstate import JobState, Phase

_Owner = tuple[JobState, int, int]  # a queued pod's job, its index, and its bind tries


class Binding:
    # Provided by PolicyRun.
    book: NodeBook
    scheduler: PodScheduler
    plan: FaultPlan
    policy: Policy
    priority: dict[str, int]
    seq: int
    push: Callable[[float, Kind, Any], None]
    _bind: Callable[[JobState, str, int], None]
    _wake: Callable[[], None]

    @property
    def now(self) -> float:
        raise NotImplementedError

    def _bind_delay(self, job: JobState, pod: int) -> float:
        window = self.policy.bind_delay_seconds
        return uniform(f"bind:{job.key}:{job.attempt}:{pod}", window.min, window.max)

    def _enqueue(self, data: tuple[JobState, int, int, int]) -> None:
        job, attempt, pod, tries = data
        if attempt != job.attempt or job.phase is not Phase.ADMITTED:
            return
        self.scheduler.add(
            QueuedPod(
                sort_key=(-self.priority.get(job.key, 0), self.now, self.seq),
                owner=(job, pod, tries),
                attempt=attempt,
                template=job.template,
                request=job.request,
                shape=job.shape,
            )
        )
        self.scheduler.fresh.add(job.shape)
        self._wake()

    def _stale(self, pod: QueuedPod) -> bool:
        job: JobState = pod.owner[0]
        return pod.attempt != job.attempt or job.phase is not Phase.ADMITTED

    def _bind_queued(self, pod: QueuedPod, node: str) -> bool:
        job, index, tries = cast(_Owner, pod.owner)
        if self.plan.bind_fails(job.key, job.attempt, index, tries):
            return False
        self._bind(job, node, index)
        return True

    def _retry(self, pod: QueuedPod) -> None:
        job, index, tries = cast(_Owner, pod.owner)
        self.push(
            self.now + self.plan.bind_retry_seconds,
            Kind.ENQUEUE,
            (job, pod.attempt, index, tries + 1),
        )

    def _bind_planned(self, data: tuple[JobState, int, int, int, str]) -> None:
        """gang-fit: a member binds to the node the core planned for it, or retries there."""
        job, attempt, pod, tries, node = data
        if attempt != job.attempt or job.phase is not Phase.ADMITTED:
            return
        if (
            node in self.book.down
            or not self.book.fits(node, job.request)
            or self.plan.bind_fails(job.key, attempt, pod, tries)
        ):
            at = self.now + self.plan.bind_retry_seconds
            self.push(at, Kind.BIND, (job, attempt, pod, tries + 1, node))
            return
        self._bind(job, node, pod)
