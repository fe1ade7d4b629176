"""The one scheduling loop: snapshot, run the core, plan, apply.

It turns when the state changes (after gathering a burst of changes for
``batch_seconds``) and at least every ``tick_seconds``, which is what moves
timeouts and backoffs along when nothing else happens; but cycles start at most once
every ``period_seconds`` (Volcano's schedule period).  At scale something changes all
the time (a pod ends somewhere every few milliseconds), and without the period the
loop would cycle back to back, taking CPU the API server and the Job controller wait
for; members of admitted gangs do not wait for it (controller/release.py).  Only the leader runs
cycles.  The snapshot, the core and the planner run in a worker thread on a
frozen copy of the state, so watch events keep flowing meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.binding import with_sent, without_sent_since
from queue_controller.controller.leader import Leadership
from queue_controller.controller.lifecycle import HOLDING, Planner, subject
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.runtimes import HistoryCache
from queue_controller.controller.server import Health
from queue_controller.controller.state import ClusterState
from queue_controller.controller.summaries import nominated_room
from queue_controller.core import CycleResult, Verdict, schedule
from queue_controller.core.reservation import DEFAULT_MIN_HISTORY
from queue_controller.core.rules import unhealthy_indices
from queue_controller.errors import InputError
from queue_controller.kube.gangs import GangView
from queue_controller.kube.memo import TranslationMemo
from queue_controller.kube.snapshot import Located, Translation, translate
from queue_controller.kube.unread import Unread

log = logging.getLogger(__name__)
# Queues', TeamQuotas' and Cohorts' counts and figures (kubectl's columns, read by people)
# are written at most this often: in a busy cluster they change every cycle, and each
# change was a write, about two API requests for every gang admitted.  Kueue's
# ClusterQueue counts lag their workloads the same way.  A new admission fair sharing
# sample is never held back: the core reads it back from the Queue's status.
SUMMARY_SECONDS = 5.0
# (kind name, namespace, gang name) -> its member pods' names (in its namespace)
GangMembers = dict[tuple[str, str, str], tuple[str, ...]]


@dataclass(frozen=True)
class Plan:
    result: CycleResult
    actions: list[act.Action]
    partially_placed: int
    skipped: list[str]
    phases: dict[str, float]  # translate | core | plan -> seconds this cycle took in it
    unhealthy_gpus: dict[str, int]  # node -> GPUs its health report takes out
    flagged: Counter[tuple[str, str]]  # (queue, Idle | GPUUnhealthy) -> gangs
    nominal: dict[tuple[str, str], int]  # (TeamQuota, resource) -> nominal, milli-units
    nominated: dict[tuple[str, str], float]  # (queue, resource) -> held for preemptors
    members: GangMembers  # each gang's member pods, for the releaser between cycles
    left_out: tuple[Unread, ...] = ()  # objects that could not be read


class SchedulingLoop:
    def __init__(
        self,
        *,
        state: ClusterState,
        planner: Planner,
        applier: Applier,
        leadership: Leadership,
        metrics: Metrics,
        health: Health,
        clock: Callable[[], float],
        tick_seconds: float,
        batch_seconds: float,
        status_writes_per_cycle: int,
        creation_backlog: int | None = None,
        period_seconds: float = 0.0,
        idle: Callable[[tuple[GangView, ...], float], dict[str, float]] | None = None,
        history: HistoryCache | None = None,
        min_history: int = DEFAULT_MIN_HISTORY,
        reservation_limit: int = 8,
    ) -> None:
        self.state, self.planner, self.applier = state, planner, applier
        self.leadership, self.metrics, self.health = leadership, metrics, health
        self.clock = clock
        self.tick, self.batch, self.status_budget = (
            tick_seconds,
            batch_seconds,
            status_writes_per_cycle,
        )
        self.creation_backlog = creation_backlog  # admission's pacing (core/cycle/pacing.py)
        self.period = period_seconds
        self.idle = idle  # which running gangs idle (from DCGM), when it is read
        # Handed each cycle's translation (the ETA writer's offer, controller/eta.py).
        self.translated: Callable[[Translation], None] | None = None
        # Finished gangs' runtimes (the journal), read every few minutes off the cycle.
        self.history = history
        self.min_history = min_history
        self.reservation_limit = reservation_limit  # --max-reservations
        # Admitted gangs as of the last cycle, to notice one whose objects vanish.
        self._holding: dict[str, act.Subject] = {}
        # Typed pieces of the objects that did not change since the last cycle.
        self._memo = TranslationMemo(log_bugs=True)
        # Left-out objects already warned about (event, log) -> the reason said.
        self._warned: dict[tuple[str, str, str], str] = {}
        # Members being released (by this loop's applier or the releaser's, which share it).
        self.in_flight = applier.in_flight
        # Each gang's member pods as of the last cycle (the releaser's index).
        self.members: GangMembers = {}
        self.planning = asyncio.Lock()  # held while a view is copied, and while slots are reserved
        self._summarized = -math.inf  # when the last summaries went out (the cycle's clock)

    async def run(self, stop: asyncio.Event) -> None:
        started = -math.inf  # when the last cycle started (monotonic)
        while not stop.is_set():
            self.health.last_turn = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken(), timeout=self.tick)
            if stop.is_set():
                return
            # Let a burst of events land together, and keep to the period.
            since = time.monotonic() - started
            await asyncio.sleep(max(self.batch, self.period - since))
            self.state.changed.clear()
            self.leadership.changed.clear()
            if not self.leadership.leading:
                continue
            started = time.monotonic()
            await self.turn()

    async def turn(self) -> bool:
        """One cycle; a failed one is logged and counted (a bug), and scheduling goes on.

        Nothing a user writes fails a cycle: each object is read behind its own boundary
        (kube/snapshot.py), so ``cycle_failures_total`` stays 0 however bad one object is.
        """
        try:
            await self.cycle()
        except Exception as error:  # a bug in one cycle must not end scheduling
            self.metrics.cycle_failures.labels(type(error).__name__).inc()
            log.exception("scheduling cycle failed")
            return False
        return True

    async def _woken(self) -> None:
        waits = [
            asyncio.create_task(self.state.changed.wait()),
            asyncio.create_task(self.leadership.changed.wait()),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()

    async def cycle(self) -> None:
        # The releaser goes on sending members while the cycle plans (a cycle at
        # thousands of nodes takes most of a second: arrived members waited that long).
        # What it sent since the copy is noted, and the cycle's bindings that could
        # clash with it are dropped before the cycle reserves its own (binding.py).
        if self.history is not None:
            self.history.refresh_if_due(self.clock())  # in its own thread: never waited for
        async with self.planning:
            frozen = self.state.copy()
            sent = self.in_flight.copy()  # releases not yet in the copy hold their slots
            since = self.in_flight.since()
        try:
            started = time.perf_counter()
            plan = await asyncio.to_thread(self._plan, frozen, self.clock(), sent)
            async with self.planning:
                self.members = plan.members
                planned = time.perf_counter()
                self.metrics.cycle_seconds.observe(planned - started)
                actions = without_sent_since(self._budgeted(plan.actions), since)
                reserved = self.applier.reserve(actions)
        finally:
            self.in_flight.close(since)
        # The gauges describe this cycle's decisions: set before the writes that carry
        # them out, so whoever reads a status this cycle wrote finds them already.
        self._gauges(plan)
        failed = await self.applier.apply_all(actions, reserved=reserved)
        phases = {**plan.phases, "apply": time.perf_counter() - planned}
        for phase, seconds in phases.items():
            self.metrics.cycle_phase_seconds.labels(phase).observe(seconds)
        self.health.cycles += 1
        log.debug(
            "cycle %d: %d objects, %d writes; %s",
            self.health.cycles,
            len(frozen),
            len(actions),
            ", ".join(f"{phase} {seconds:.3f}s" for phase, seconds in phases.items()),
        )
        if failed:
            log.info(
                "cycle %d: %d of %d writes to retry", self.health.cycles, failed, len(plan.actions)
            )

    def _plan(self, frozen: ClusterState, now: float, sent: dict[str, str] | None = None) -> Plan:
        # The cycle makes a great many small objects and frees few: collections of the
        # old generation mid-cycle cost more than the cycle at thousands of nodes.
        with gc_paused():
            return self._plan_now(frozen, now, sent or {})

    def _plan_now(self, frozen: ClusterState, now: float, sent: dict[str, str]) -> Plan:
        skipped: list[str] = []

        def skip(error: InputError) -> None:
            skipped.append(str(error))

        # Each step's time goes to the phase metric: thread CPU would hide lock waits.
        marks = [time.perf_counter()]
        # The one translation of this cycle: everything below reads its views.
        seen = translate(
            (Located(None, obj) for obj in frozen.all()),
            now=now,
            skip=skip,
            memo=self._memo,
            history=self.history.current if self.history is not None else None,
            min_history=self.min_history,
            reservation_limit=self.reservation_limit,
        )
        seen = replace(seen, gangs=with_sent(seen.gangs, sent))
        if self.translated is not None:
            self.translated(seen)  # a reference: the forecast runs later, off this cycle
        marks.append(time.perf_counter())
        result = schedule(seen.snapshot, creation_backlog=self.creation_backlog)
        marks.append(time.perf_counter())
        idle = self.idle(seen.gangs, now) if self.idle is not None else None
        actions = self._summaries_due(self.planner.plan(seen, result, now=now, idle=idle), now)
        partial = 0
        flagged: Counter[tuple[str, str]] = Counter()
        for gang in seen.gangs:
            group = gang.group
            if group is not None and group.phase in HOLDING:
                placed = sum(1 for p in gang.live_pods if p.node and not p.gated)
                if 0 < placed < group.min_member:
                    partial += 1
                for kind in ("Idle", "GPUUnhealthy"):
                    if group.condition_is(kind, "True"):
                        flagged[(gang.queue_key, kind)] += 1
        unhealthy = {
            node: (report.gpu_count or 0) if report.whole_node else len(unhealthy_indices(report))
            for node, (report, _) in seen.node_health.items()
        }
        nominal = {
            (quota.name, resource): limits.nominal
            for quota in seen.snapshot.quotas
            for resource, limits in quota.resources.items()
        }
        nominated = nominated_room(seen, result)
        actions.extend(self._vanished(seen))
        actions.extend(self._warnings(seen.left_out, skipped))
        marks.append(time.perf_counter())
        phases = dict(zip(("translate", "core", "plan"), _steps(marks), strict=True))
        members = {
            (gang.kind.name, gang.namespace, gang.gang.name): tuple(
                p.ref.name for p in gang.gang.members
            )
            for gang in seen.gangs
        }
        return Plan(
            result,
            actions,
            partial,
            skipped,
            phases,
            unhealthy,
            flagged,
            nominal,
            nominated,
            members,
            seen.left_out,
        )

    def _summaries_due(self, actions: list[act.Action], now: float) -> list[act.Action]:
        """``actions`` without the summaries that can wait (SUMMARY_SECONDS); a later cycle
        computes them again from how things stand then."""
        if now - self._summarized >= SUMMARY_SECONDS or now < self._summarized:
            if any(_can_wait(a) for a in actions):
                self._summarized = now
            return actions
        return [a for a in actions if not _can_wait(a)]

    def _warnings(self, left: tuple[Unread, ...], skipped: list[str]) -> list[act.Action]:
        """A Warning event on each object left out, and a log line, once for each reason
        it is left out for: not again at every cycle while it stays so."""
        warned, self._warned = self._warned, {}
        out: list[act.Action] = []
        for unread in left:
            model = unread.model
            key = (model.kind, model.namespace, model.name)
            if warned.get(key) != model.why:
                log.warning("left out of the cycle: %s", model.why)
                if unread.ref is not None:
                    out.append(act.WarnLeftOut(about=unread.ref, message=model.why))
            self._warned[key] = model.why
        said = {u.model.why for u in left}
        for problem in skipped:  # a gang that was dropped, not an object left out
            if problem not in said and warned.get(("", "", problem)) != problem:
                log.warning("left out of the cycle: %s", problem)
            if problem not in said:
                self._warned[("", "", problem)] = problem
        return out

    def _vanished(self, seen: Translation) -> list[act.Action]:
        """Gangs admitted last cycle whose objects are gone now (a Job deleted while it
        ran): nothing is left to write to, so only the journal records it."""
        holding = {
            gang.key: subject(gang)
            for gang in seen.gangs
            if gang.group is not None and gang.group.phase in HOLDING
        }
        present = {gang.key for gang in seen.gangs}
        gone: list[act.Action] = [
            act.Vanished(subject=who) for key, who in self._holding.items() if key not in present
        ]
        self._holding = holding
        return gone

    def _budgeted(self, actions: list[act.Action]) -> list[act.Action]:
        """Pending-reason writes beyond the budget wait for a later cycle; reason changes first."""
        pending = [a for a in actions if isinstance(a, act.MarkPending)]
        if len(pending) <= self.status_budget:
            return actions

        def reason_unchanged(a: act.MarkPending) -> bool:
            return a.group is not None and a.group.status.reason == a.reason

        keep = {id(a) for a in sorted(pending, key=reason_unchanged)[: self.status_budget]}
        return [a for a in actions if not isinstance(a, act.MarkPending) or id(a) in keep]

    def _gauges(self, plan: Plan) -> None:
        pending: Counter[tuple[str, str]] = Counter()
        for decision in plan.result.decisions:
            if decision.verdict is not Verdict.ADMIT:
                namespace = decision.workload.split("/", 1)[0]
                pending[(f"{namespace}/{decision.queue}", decision.reason.value)] += 1
        self.metrics.set_pending(pending)
        self.metrics.partially_placed.set(plan.partially_placed)
        self.metrics.awaiting_creation.set(plan.result.awaiting_creation)
        usage = plan.result.quota_usage
        nominal = {key: milli / 1000 for key, milli in plan.nominal.items()}
        used = {
            (name, resource): usage.get(name, {}).get(resource, 0) / 1000
            for name, resource in plan.nominal
        }
        self.metrics.set_quota(used, nominal)
        self.metrics.set_gpu_signals(plan.unhealthy_gpus, plan.flagged)
        self.metrics.set_nominated(plan.nominated)
        self.metrics.set_weighted_shares(plan.result.weighted_shares)
        self.metrics.set_cohorts(plan.result.cohorts)
        self.metrics.set_admission_fair_sharing(
            {f"{ns}/{name}": u.usage for (ns, name), u in plan.result.queue_usage.items()}
        )
        self.metrics.set_left_out(Counter(u.model.kind for u in plan.left_out))
        reserved: Counter[str] = Counter(
            f"{d.workload.split('/', 1)[0]}/{d.queue}"
            for d in plan.result.decisions
            if d.reservation is not None and d.verdict is Verdict.PENDING
        )
        self.metrics.set_reservations(reserved)


def _can_wait(action: act.Action) -> bool:
    if isinstance(action, act.QueueStatus):
        return action.fair_sharing is None and not action.drop_fair_sharing
    return isinstance(action, act.TeamQuotaStatus | act.CohortStatus)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _steps(marks: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(marks)]
