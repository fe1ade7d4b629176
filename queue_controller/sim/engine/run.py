"""One policy's run of the event loop: gangs queue, are admitted, bind, run, finish or go."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from queue_controller.core import (
    Decision,
    Verdict,
)
from queue_controller.core.model import scale
from queue_controller.core.quota import QuotaLedger
from queue_controller.core.rules import PriorityTable, pods_ready_timeout, requeue
from queue_controller.errors import InvalidSpecError
from queue_controller.sim.engine.admission import Admission
from queue_controller.sim.engine.binding import Binding
from queue_controller.sim.engine.nodefaults import NodeFaults
from queue_controller.sim.engine.preempting import Preempting
from queue_controller.sim.engine.reserving import (
    DEFAULT_ETA_SAMPLES,
    Reserving,
    estimate,
    eta_sample,
    reserving,
)
from queue_controller.sim.measurement.domainmeter import DomainMeter
from queue_controller.sim.measurement.measure import Meters
from queue_controller.sim.measurement.outcome import journal_entry, policy_result
from queue_controller.sim.measurement.queueshare import QueueShareMeter
from queue_controller.sim.measurement.reservation import ReservationMeter
from queue_controller.sim.measurement.results import PolicyResult, size_class
from queue_controller.sim.measurement.sharing import ReclaimClock, ShareMeter
from queue_controller.sim.scenario.policy import DEFAULT_TIMEOUT_SECONDS, Policy
from queue_controller.sim.scenario.spec import Scenario
from queue_controller.sim.world.cluster import ForeignPods, NodeBook, PodScheduler
from queue_controller.sim.world.events import STRANDED_SAMPLE_SECONDS, Event, Kind
from queue_controller.sim.world.faults import FaultPlan, uniform
from queue_controller.sim.world.runstate import JOB_TEMPLATE, JobState, Phase, prepare_jobs

if TYPE_CHECKING:
    from queue_controller.journal import Entry

Record = Callable[["Entry"], None]
Progress = Callable[[str, float], None]
PODS_READY_TIMEOUT = "PodsReadyTimeout"
GIVE_UP_SECONDS = 30 * 86400.0


class PolicyRun(Binding, Preempting, NodeFaults, Reserving):
    def __init__(
        self,
        name: str,
        scenario: Scenario,
        *,
        policy: Policy,
        plan: FaultPlan,
        record: Record | None = None,
        progress: Progress | None = None,
        run_id: str = "sim",
        exhaustive: bool = False,
        estimate_noise: float = 0.0,
        seed: int = 0,
        eta_samples: int = DEFAULT_ETA_SAMPLES,
    ) -> None:
        self.name = name
        # "gang-fit+preemption" runs gang-fit (over quotas with preemption on).
        self.kind = name.split("+", 1)[0]
        self.admits = self.kind in ("gang-fit", "quota-only")
        self.scenario = scenario
        self.policy = policy
        self.plan = plan
        self.record_entry = record
        self.progress = progress
        self.source = f"simulation:{run_id}:{name}"
        self.book = NodeBook(scenario.nodes, scenario.dra.devices if scenario.dra else None)
        self.scheduler = PodScheduler(self.book, scoring=policy.scheduler_scoring)
        self.meters = Meters(self.book.capacity_gpus())
        self.queues = tuple(policy.applied_to(q) for q in scenario.queues)
        self.queue_by_key = {(q.namespace, q.name): q for q in self.queues}
        # Reservation with backfill (.reserving): gang-fit only, where a Queue turns it on.
        self.reserving = self.kind == "gang-fit" and reserving(self.queues)
        self.priorities = PriorityTable(scenario.priority_classes)
        self.jobs = prepare_jobs(scenario.jobs, scenario.queues, scenario.quotas, scenario.dra)
        self.priority: dict[str, int] = {}
        self.pending: dict[str, JobState] = {}
        self.admitted: dict[str, JobState] = {}
        self.on_node: dict[str, set[JobState]] = defaultdict(set)
        self.foreign = ForeignPods(self.book, self.scheduler)
        self.events: list[Event] = []
        self.seq = 0
        self.next_tick: float | None = None
        self.dirty = False  # something an admission cycle could act on changed
        self.admission = Admission(
            scenario,
            queues=self.queues,
            book=self.book,
            scheduler=self.scheduler,
            exact_placement=self.kind == "gang-fit",
            priority=self.priority,
            exhaustive=exhaustive,
            reserving=self.reserving,
        )
        for job in self.jobs:
            # With reservation, the core must see what each running gang holds, and until
            # when: every gang is shown as itself (sim.engine.admission).
            job.alone = self.admits and (self.reserving or job.team in self.admission.victim_teams)
            if self.reserving:
                job.runtime = estimate(job.spec, noise=estimate_noise, seed=seed)
        self.reservations = (
            ReservationMeter(reserving=self.reserving) if self.kind == "gang-fit" else None
        )
        # The gangs whose estimated start is forecast on arrival (.reserving).
        self.eta_sample = (
            eta_sample(self.jobs, samples=eta_samples) if self.reserving else frozenset()
        )
        self._preemption_init()
        self.reclaim = ReclaimClock(scenario.quotas)
        self.shares = ShareMeter(scenario.quotas, scenario.cohorts)
        self.queue_shares = QueueShareMeter(scenario.quotas, self.queues)
        self.domains = DomainMeter(scenario, self.queues, waits_measured=self.kind == "gang-fit")
        self.admission.on_usage = self._usage_changed
        self.cycles = 0
        self.completed = 0
        self.deactivated = 0
        self.deadlocked = 0
        self.finished_jobs = 0  # done, deactivated or invalid: for the progress bar

    # -- the loop ------------------------------------------------------------

    def push(self, at: float, kind: Kind, data: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, kind.value, self.seq, data))

    def run(self) -> None:
        for job in self.jobs:
            self.push(job.spec.arrival, Kind.ARRIVE, job)
        for failure in self.plan.node_failures:
            self.push(failure.at, Kind.NODE_DOWN, failure.node)
            self.push(failure.repaired, Kind.NODE_UP, failure.node)
        for pod in self.plan.foreign_pods:
            self.push(pod.at, Kind.FOREIGN_START, pod)
        self.push(0.0, Kind.SAMPLE)
        handlers: dict[int, Callable[[Any], None]] = {
            Kind.ARRIVE.value: self._arrive,
            Kind.TICK.value: self._tick,
            Kind.BIND.value: self._bind_planned,
            Kind.ENQUEUE.value: self._enqueue,
            Kind.START.value: self._start,
            Kind.FINISH.value: self._finish,
            Kind.GRACE_END.value: self._grace_end,
            Kind.TIMEOUT.value: self._timeout,
            Kind.DUE.value: self._due,
            Kind.NODE_DOWN.value: self._node_down,
            Kind.NODE_UP.value: self._node_up,
            Kind.FOREIGN_START.value: self._foreign_start,
            Kind.FOREIGN_END.value: self._foreign_end,
            Kind.DEADLOCK_CHECK.value: self._deadlock_check,
            Kind.SAMPLE.value: self._sample,
        }
        handled = 0
        # A gang that can never run and is requeued without limit would keep the
        # clock going forever: stop a month after the last arrival.
        stop = max((job.spec.arrival for job in self.jobs), default=0.0) + GIVE_UP_SECONDS
        while self.events:
            at, kind, _, data = heapq.heappop(self.events)
            if at > stop:
                break
            self.meters.advance(at)
            handlers[kind](data)
            self.meters.record()
            handled += 1
            if self.progress is not None and handled % 2000 == 0:
                self.progress(self.name, self.finished_jobs / max(len(self.jobs), 1))
        if self.progress is not None:
            self.progress(self.name, 1.0)

    @property
    def now(self) -> float:
        return self.meters.now

    def _wake(self) -> None:
        """Make sure a tick comes: the cycle (or kube-scheduler's pass) runs then."""
        if self.next_tick is not None:
            return
        period = self.policy.cycle_seconds
        at = (int(self.now // period) + 1) * period
        self.next_tick = at
        self.push(at, Kind.TICK)

    # -- arrivals, cycles and kube-scheduler ---------------------------------

    def _arrive(self, job: JobState) -> None:
        try:
            self.priority[job.key] = self.priorities.value_of(job.template)
        except InvalidSpecError as error:
            job.error = job.error or f"{JOB_TEMPLATE}.{error.field}: {error.detail}"
        self.meters.pending += 1
        if self.admits:
            self.admission.arrived(job)
            job.phase = Phase.PENDING
            self.pending[job.key] = job
            self.admission.fresh[job.key] = job
            self.dirty = True
            self._wake()
            self._forecast_arrival(job)
            return
        if job.error or not job.request:
            self._invalid(job, job.error or "no usable request")
            return
        job.phase = Phase.ADMITTED
        self.admitted[job.key] = job
        for pod in range(job.pods):
            self.push(
                self.now + self._bind_delay(job, pod), Kind.ENQUEUE, (job, job.attempt, pod, 0)
            )

    def _tick(self, _: object) -> None:
        self.next_tick = None
        if self.admits and self.dirty:
            self.dirty = False
            self._cycle()
        if self.scheduler.queue and self.book.freed | self.scheduler.fresh:
            self.scheduler.fresh = set()
            self.scheduler.run(bind=self._bind_queued, stale=self._stale, retry=self._retry)

    def _cycle(self) -> None:
        self.cycles += 1
        self.reclaim.observe(self.pending.values(), self.admission.ledger(), self.now)
        decisions = self.admission.cycle(self.pending, now=self.now)
        self.queue_shares.sample(self.admission.queue_usage, self.now)
        for decision in decisions:
            job = self.pending[decision.workload]
            self.domains.decided(job, decision, self.now)
            if decision.verdict is Verdict.ADMIT:
                self._admit(job, decision)
            elif decision.verdict is Verdict.PREEMPT:
                if self.reservations is not None:
                    self.reservations.preempted(decision)
                if self.reserving:
                    self._room_taken(job)
                self._preempt(job, decision)
            elif decision.verdict is Verdict.INVALID:
                del self.pending[job.key]
                self._invalid(job, decision.message)
            else:
                if self.reserving:
                    self._waited(job, decision)
                if decision.reason.value == job.reason:
                    continue
                if job.nominated:  # the core tried it afresh: the room it held is gone
                    job.nominated = {}
                    job.changed()
                job.reason = decision.reason.value
                self._journal(job, "Pending", job.reason, decision.message)
        if self.reclaim.open:
            self.reclaim.waiting(self.pending, self._ledger_after(), self.now)

    def _ledger_after(self) -> QuotaLedger:
        """The quota as a cycle left it: what is admitted, and the room nominated gangs
        hold (the core charges it at every cycle)."""
        ledger = self.admission.ledger()
        held = [job for job in self.pending.values() if job.nominated]
        if not held:
            return ledger
        ledger = QuotaLedger(
            self.scenario.quotas, self.admission.quota_usage, self.scenario.cohorts
        )
        for job in held:
            ledger.reserve(job.team, scale(job.request, job.pods))
        return ledger

    def _admit(self, job: JobState, decision: Decision) -> None:
        del self.pending[job.key]
        self.admitted[job.key] = job
        job.phase = Phase.ADMITTED
        job.admitted_at = self.now
        job.reason = ""
        job.placement = dict(decision.placement)
        job.nominated = {}
        job.changed()
        if self.reservations is not None:
            self.reservations.admitted(job, decision, self.now)
        if self.reserving:
            self._room_taken(job)
        self.reclaim.admitted(job, self.now)
        self.admission.admitted(job)
        self._journal(job, "Admitted", "Admitted", decision.message, placement=job.placement)
        if self.kind == "gang-fit":
            pod = 0
            for node, count in sorted(job.placement.items()):
                for _ in range(count):
                    at = self.now + self._bind_delay(job, pod)
                    self.push(at, Kind.BIND, (job, job.attempt, pod, 0, node))
                    pod += 1
        else:
            for pod in range(job.pods):
                at = self.now + self._bind_delay(job, pod)
                self.push(at, Kind.ENQUEUE, (job, job.attempt, pod, 0))
        queue = self.queue_by_key[(job.spec.namespace, job.spec.queue)]
        timeout = pods_ready_timeout(
            pod_group_seconds=None,
            queue_seconds=queue.pods_ready_timeout_seconds,
            default_seconds=DEFAULT_TIMEOUT_SECONDS,
        )
        self.push(self.now + timeout, Kind.TIMEOUT, (job, job.attempt))

    # -- binding, running, finishing -----------------------------------------

    def _bind(self, job: JobState, node: str, pod: int) -> None:
        self.book.take(node, job.request, job)
        job.bound[node] += 1
        job.bound_count += 1
        gpus = job.gpus_on.get(node)
        if gpus is None:
            gpus = job.gpus_on[node] = self.scheduler.gpus_of(node, job.request)
        job.held_gpus += gpus
        job.bind_weight[node] = job.bind_weight.get(node, 0.0) + gpus * self.now
        if job.alone:
            self.book.own(node, job.request, 1)
        self.meters.hold(gpus)
        self.on_node[node].add(job)
        job.last_progress = self.now
        job.changed()
        window = self.policy.start_delay_seconds
        start = uniform(f"start:{job.key}:{job.attempt}:{pod}", window.min, window.max)
        self.push(self.now + start, Kind.START, (job, job.attempt))
        if job.bound_count == job.pods:
            if self.admits and not job.settled:
                self.admission.settle(job, +1)
            job.fully_placed = True
            self.meters.placed(job.team, job.held_gpus)
            self.domains.placed(job, job.bound)
            self.meters.pending -= 1
            if not job.placed_once:
                job.placed_once = True
                job.placed_at = self.now
                gang_gpus = job.held_gpus
                self.meters.waits.append((size_class(gang_gpus), self.now - job.spec.arrival))
        elif not self.admits:
            self.push(self.now + self.policy.deadlock_seconds, Kind.DEADLOCK_CHECK, (job, self.now))

    def _start(self, data: tuple[JobState, int]) -> None:
        job, attempt = data
        if attempt != job.attempt or job.phase is not Phase.ADMITTED:
            return
        job.running += 1
        if job.running == job.pods:
            self.push(self.now + job.spec.duration, Kind.FINISH, (job, attempt))

    def _release(self, job: JobState, nodes: list[str] | None = None) -> None:
        """Give back the pods ``job`` has on ``nodes`` (all of them by default)."""
        self.admission.released(job, nodes, quota=self.admits)
        if job.fully_placed:
            self.meters.unplaced(job.team, job.held_gpus)
            job.fully_placed = False
            self.meters.pending += 1
        for node in nodes if nodes is not None else list(job.bound):
            count = job.bound.pop(node, 0)
            if not count:
                continue
            job.bound_count -= count
            job.bind_weight.pop(node, None)
            if job.alone:
                self.book.own(node, job.request, -count)
            for _ in range(count):
                self.book.give(node, job.request, job)
            gpus = job.gpus_on[node] * count
            job.held_gpus -= gpus
            self.meters.release(gpus)
            self.on_node[node].discard(job)
        job.changed()
        self.dirty = True
        self._wake()

    def _finish(self, data: tuple[JobState, int]) -> None:
        job, attempt = data
        if attempt != job.attempt or job.phase is not Phase.ADMITTED:
            return
        self._release(job)
        self.meters.pending -= 1  # _release counted it as waiting again
        job.phase = Phase.DONE
        del self.admitted[job.key]
        self.completed += 1
        self.finished_jobs += 1
        self._journal(job, "Finished", "Succeeded", "every member completed")

    def _timeout(self, data: tuple[JobState, int]) -> None:
        job, attempt = data
        if attempt != job.attempt or job.phase is not Phase.ADMITTED:
            return
        if job.running < job.pods:
            self._evict(
                job,
                PODS_READY_TIMEOUT,
                f"{job.running} of {job.pods} members running after the pods-ready timeout",
            )

    def _evict(self, job: JobState, reason: str, message: str) -> None:
        self._release(job)
        job.attempt += 1
        job.running = 0
        job.placement = {}
        del self.admitted[job.key]
        self.meters.evictions[reason] += 1
        self._journal(job, "Evicted", reason, message)
        queue = self.queue_by_key[(job.spec.namespace, job.spec.queue)]
        outcome = requeue(queue.requeue, previous=job.requeue_count, now=self.now)
        job.requeue_count = outcome.count
        if outcome.deactivated:
            job.phase = Phase.DEACTIVATED
            self.meters.pending -= 1
            self.deactivated += 1
            self.finished_jobs += 1
            self._journal(job, "Deactivated", "BackoffLimitExceeded", "past the backoffLimit")
            return
        job.phase = Phase.PENDING
        job.requeue_at = outcome.at
        self.pending[job.key] = job
        self.push(outcome.at, Kind.DUE, job)
        self._journal(job, "Requeued", "Backoff", f"eligible again in {outcome.at - self.now:.0f}s")

    def _due(self, job: JobState) -> None:
        if job.phase is Phase.PENDING:
            self.admission.fresh[job.key] = job
        self.dirty = True
        self._wake()

    def _invalid(self, job: JobState, message: str) -> None:
        job.phase = Phase.INVALID
        self.meters.pending -= 1
        self.finished_jobs += 1
        self._journal(job, "Invalid", "InvalidSpec", message)

    # -- faults ----------------------------------------------------------------

    def _usage_changed(self, team: str) -> None:
        self.shares.sample(team, self.admission.quota_usage[team], self.now)

    def _deadlock_check(self, data: tuple[JobState, float]) -> None:
        job, stamp = data
        if job.deadlocked or job.phase is not Phase.ADMITTED or job.fully_placed:
            return
        if job.last_progress == stamp and job.bound_count > 0:
            job.deadlocked = True
            self.deadlocked += 1

    def _sample(self, _: object) -> None:
        """Stranded capacity: free GPUs on up nodes that no waiting pod shape could use."""
        waiting = {
            j.shape: (j.template, j.request)
            for j in (*self.pending.values(), *self.admitted.values())
            if not j.fully_placed and j.request
        }
        self.meters.stranded(self.scheduler.stranded_gpus(waiting), STRANDED_SAMPLE_SECONDS)
        if self.domains.rack_of:
            self.domains.sample(self._free_and_total)
        if self.events:
            self.push(self.now + STRANDED_SAMPLE_SECONDS, Kind.SAMPLE)

    def _free_and_total(self, node: str) -> tuple[float, float] | None:
        book = self.book
        if node in book.down:
            return None
        return self.scheduler.gpus_of(node, book.free[node]), book.gpus[node]

    # -- output ----------------------------------------------------------------

    def _journal(
        self,
        job: JobState,
        event: str,
        reason: str,
        message: str,
        *,
        placement: dict[str, int] | None = None,
    ) -> None:
        if self.record_entry is not None:
            self.record_entry(
                journal_entry(
                    job,
                    event,
                    reason,
                    message,
                    at=self.now,
                    source=self.source,
                    placement=placement or {},
                )
            )

    def result(self, *, wall_seconds: float) -> PolicyResult:
        self.domains.finish(self.jobs, self.meters.times[-1])
        result = policy_result(
            self.meters,
            policy=self.name,
            scenario=self.scenario,
            jobs=self.jobs,
            completed=self.completed,
            deactivated=self.deactivated,
            deadlocked=self.deadlocked,
            cycles=self.cycles,
            wall_seconds=wall_seconds,
            preemption=self._preemption_result(),
            reclaim=self.reclaim.result() if self.admits else {},
            reclaim_waits=self.reclaim.waits() if self.admits else None,
            shares=self.shares.result(self.meters.times[-1]) if self.admits else {},
            queue_shares=self.queue_shares.result(self.meters.times[-1]) if self.admits else {},
            domains=self.domains,
        )
        if self.reservations is None:
            return result
        figures = self.reservations.figures(self.jobs, end=self.meters.times[-1])
        return replace(result, reservation=figures)
