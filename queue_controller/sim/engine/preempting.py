"""Preemption in a run, as the controller does it.

When the core answers Preempt, every victim it names is evicted whole, at once:

- its quota and the plan of its members not yet bound go back at once (it is a
  pending gang again), but its bound pods *terminate*: they keep their node
  capacity, and their GPUs, for the policy's ``terminationGracePeriodSeconds``
  (a node failing meanwhile takes them with it);
- it is requeued at once, without backoff and without counting toward its
  Queue's ``backoffLimit`` (a preemption is no fault of the victim's);
- its work is lost: it restarts from scratch when admitted again.  The GPU time
  its evicted attempt held, from each member's binding until that member's pod
  is gone (grace period included), is counted as *lost to preemption*.

The preemptor holds the room the core chose for it (``Workload.nominated``,
shown to the core at every cycle) until the core admits it there, once the
victims' pods are gone.  :class:`~queue_controller.sim.engine.run.PolicyRun` mixes
this in.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from queue_controller.core import Decision
from queue_controller.sim.engine.admission import Admission
from queue_controller.sim.measurement.measure import HOUR, Meters
from queue_controller.sim.measurement.results import Preemptions
from queue_controller.sim.scenario.policy import Policy
from queue_controller.sim.world.cluster import NodeBook
from queue_controller.sim.world.events import Kind
from queue_controller.sim.world.runstate import JobState, Phase

PREEMPTED = "Preempted"
PREEMPTING = "Preempting"


@dataclass(eq=False, slots=True)
class Terminating:
    """The pods of a preempted attempt, still on their nodes for the grace period."""

    request: dict[str, int]
    nodes: Counter[str]  # node -> pods
    gpus_on: dict[str, float]  # node -> GPU-equivalents of one pod
    since: float
    owner: str = field(default="")
    attempt: int = 0  # of the owner's, preempted: its pods' devices are held as (owner, attempt)

    @property
    def holder(self) -> tuple[str, int]:
        return (self.owner, self.attempt)


class Preempting:
    # Provided by PolicyRun.
    book: NodeBook
    meters: Meters
    policy: Policy
    admission: Admission
    pending: dict[str, JobState]
    admitted: dict[str, JobState]
    on_node: dict[str, set[JobState]]
    dirty: bool
    push: Callable[[float, Kind, Any], None]
    _wake: Callable[[], None]
    _journal: Callable[..., None]

    def _preemption_init(self) -> None:
        self.terminating: dict[str, set[Terminating]] = defaultdict(set)
        self.victims = 0
        self.preemptors = 0
        self.lost_gpu_seconds = 0.0

    @property
    def now(self) -> float:
        raise NotImplementedError

    def _preempt(self, job: JobState, decision: Decision) -> None:
        """``job`` takes the room ``decision`` nominates; its victims go."""
        self.preemptors += 1
        for key, reason in decision.victims:
            victim = self.admitted.get(key.split("/", 1)[1])  # Job/<ns>/<name> -> <ns>/<name>
            if victim is not None:
                self._evict_victim(victim, job, reason.value)
        job.nominated = {name: dict(nodes) for name, nodes in decision.nominated.items()}
        job.changed()
        job.reason = PREEMPTING
        self._journal(job, "Pending", PREEMPTING, decision.message)

    def _evict_victim(self, job: JobState, by: JobState, reason: str) -> None:
        now = self.now
        # Its quota and plan go back now; node hints first, while job.bound still names them.
        self.admission.released(job, None, quota=True)
        if job.fully_placed:
            self.meters.unplaced(job.team, job.held_gpus)
            job.fully_placed = False
            self.meters.pending += 1
        pods = Terminating(dict(job.request), Counter(), {}, now, job.key, job.attempt)
        for node, count in job.bound.items():
            if not count:
                continue
            gpus = job.gpus_on[node]
            self.lost_gpu_seconds += gpus * count * now - job.bind_weight.get(node, 0.0)
            if job.alone:
                self.book.own(node, job.request, -count)  # anonymous, terminating pods now
            self.book.devices.rehome(node, job, pods.holder)  # its devices too
            pods.nodes[node] = count
            pods.gpus_on[node] = gpus
            self.terminating[node].add(pods)
            self.on_node[node].discard(job)
        if pods.nodes:
            self.push(now + self.policy.termination_grace_period_seconds, Kind.GRACE_END, pods)
        # meters.held keeps the terminating pods' GPUs until they are gone.
        job.bound = Counter()
        job.bound_count = 0
        job.held_gpus = 0.0
        job.bind_weight = {}
        job.attempt += 1  # its old attempt's events (start, finish, timeout) are void
        job.running = 0
        job.placement = {}
        job.phase = Phase.PENDING
        job.requeue_at = None  # at once: no backoff, the requeue count stays
        job.reason = ""
        job.changed()
        del self.admitted[job.key]
        self.pending[job.key] = job
        self.admission.fresh[job.key] = job
        self.victims += 1
        self.meters.evictions[PREEMPTED] += 1
        self._journal(
            job, "Evicted", PREEMPTED, f"preempted by {by.spec.namespace}/{by.spec.name} ({reason})"
        )
        self._journal(job, "Requeued", PREEMPTED, "requeued at once; its work restarts")
        self.dirty = True
        self._wake()

    def _grace_end(self, pods: Terminating) -> None:
        for node in list(pods.nodes):
            self._gone(pods, node)
            self.admission.freed_nodes.add(node)
        self.dirty = True
        self._wake()

    def _gone(self, pods: Terminating, node: str) -> None:
        """The terminating pods on ``node`` are gone (grace over, or the node failed)."""
        count = pods.nodes.pop(node, 0)
        self.terminating[node].discard(pods)
        if not count:
            return
        for _ in range(count):
            self.book.give(node, pods.request, pods.holder)
        gpus = pods.gpus_on[node] * count
        self.meters.release(gpus)
        self.lost_gpu_seconds += gpus * (self.now - pods.since)

    def _terminating_lost(self, node: str) -> None:
        """``node`` failed: the pods terminating there are gone with it."""
        for pods in sorted(self.terminating.pop(node, set()), key=lambda p: (p.owner, p.since)):
            self._gone(pods, node)

    def _preemption_result(self) -> Preemptions:
        return Preemptions(
            victims=self.victims,
            preemptors=self.preemptors,
            lost_gpu_hours=round(self.lost_gpu_seconds / HOUR, 2),
        )
