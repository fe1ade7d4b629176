"""The admission side of a run: what the core is shown, and which gangs are worth asking about.

The core decides.  This module only builds its snapshot cheaply and leaves out
gangs whose answer cannot have changed:

- Admitted gangs whose members are all bound (or, for quota-only, that have no
  plan) only charge their quota, because their pods are already in the node
  usage.  The settled gangs of one queue and one pod template are handed to
  the core as a single workload of their summed pods: the same charge, and a
  cycle's cost that stays flat however many gangs run.
- During a cycle quota and nodes only fill up.  So a gang the core left
  pending for ``NoNodeFit`` can only be admitted once a node it may use has
  room for a member again, and one pending for ``QuotaExceeded`` once its
  cohort got quota back and has room for it.  Only those, gangs that became
  candidates since the last cycle (``fresh``: arrivals, requeues come due),
  StrictFIFO queues (where the head decides for the rest) and gangs that fit
  their team's nominal (refused, they hold its idle part from later borrowers)
  go to the next cycle.  The rest would be refused again, changing nothing.
  Such a hold lasts one cycle: the cohort gets that room back in the next one.
  ``exhaustive`` turns this off, and a test holds both ways to identical
  results.

Preemption changes both.  A gang the core may choose as a victim must be shown
as itself, with the pods it holds named as its own (``JobState.alone``), so the
settled gangs of a team that some TeamQuota with preemption may preempt from
are not merged.  And a gang whose TeamQuota may preempt can be admitted
whenever something is admitted that it may evict, not only when room comes
back: such gangs are always shown, uncapped.  Teams that neither preempt nor
can be preempted keep both savings.

Admission fair sharing does the same for its TeamQuotas (``fair_teams`` holds them
too): which Queue's gang goes next depends on every gang shown.  Their admitted
gangs are never merged either, each keeping when it was admitted (a gang admitted
since its Queue's last sample counts an entry penalty), and the Queues' decayed
usage the core returns is carried to the next cycle (``queue_usage``), as the
controller writes it to Queue status.

Fair sharing turns both off for its cohorts.  Where a Cohort object enables
it, the core gives each of the cohort's borrowing turns to the gang whose
quota's share would be lowest with it admitted (``FairTurns``): which gang is
a quota's next, and so the order of everyone else's, depends on the gangs
shown, refused ones included.  And there a borrower may preempt too, from a
quota of higher share.  Rather than prove which gangs cannot matter, every
pending gang of a fair-sharing cohort's TeamQuotas is always shown, uncapped
and as a possible preemptor (``fair_teams``), as ``exhaustive`` would show it;
other cohorts keep the pruning.  A test holds pruned and exhaustive runs of
such a cohort identical.

Reservation with backfill (``reserving``) turns both savings off for the whole
run, as ``exhaustive`` does, and shows every admitted gang as itself, its bound
pods named as its own.  A reservation is made for a Queue's *head* (so every
pending gang must be shown, or the head the core finds is not the Queue's), at
the moment the running gangs' estimated ends free room (so each admitted gang
must come with its own ``admitted_at``, runtime and nodes, never summed into a
settled one), and a backfill window moves with the clock (so a gang refused
once may fit a window in a later cycle though nothing was freed).  Proving
which gangs cannot matter would be fragile; showing everything is simple and
correct, at the price of a cycle's cost growing with the running gangs.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import fields, replace

from queue_controller.core import (
    CycleResult,
    Decision,
    EquivalenceIndex,
    Ordering,
    PodTemplate,
    Queue,
    Snapshot,
    Verdict,
    Workload,
    WorkloadPhase,
    one_pod_set,
    schedule,
)
from queue_controller.core.model import BorrowPolicy, ReclaimPolicy, WithinPolicy, scale
from queue_controller.core.quota import QuotaLedger, roots_of
from queue_controller.core.quota.admissionfair import QueueKey, QueueUsage
from queue_controller.sim.scenario.rules import (
    NeverRefuses,
    admission_fair_teams,
    fair_sharing_teams,
    preemption_teams,
)
from queue_controller.sim.scenario.spec import Scenario
from queue_controller.sim.world.cluster import NodeBook, PodScheduler
from queue_controller.sim.world.runstate import JOB_TEMPLATE, JobState, Phase

NO_NODE_FIT = "NoNodeFit"
QUOTA_EXCEEDED = "QuotaExceeded"


class Admission:
    def __init__(
        self,
        scenario: Scenario,
        *,
        queues: tuple[Queue, ...],
        book: NodeBook,
        scheduler: PodScheduler,
        exact_placement: bool,
        priority: Mapping[str, int],
        exhaustive: bool = False,
        reserving: bool = False,
    ) -> None:
        self.scenario = scenario
        self.priority = priority  # workload -> its PriorityClass value, as the core orders
        self.queues = queues
        self.book = book
        self.scheduler = scheduler
        self.placer = EquivalenceIndex if exact_placement else NeverRefuses
        self.reserving = reserving  # reservation with backfill: see the module
        # The cluster-wide cap on reservations: the controller's default.
        limit = next(f.default for f in fields(Snapshot) if f.name == "reservation_limit")
        assert isinstance(limit, int)
        self.reservation_limit = limit
        self.exhaustive = exhaustive or reserving
        # What came back since the last cycle, and who became a candidate.
        self.freed_nodes: set[str] = set()
        self.quota_back: set[tuple[str, str]] = set()  # (cohort, resource)
        self.fresh: dict[str, JobState] = {}
        # TeamQuota -> resource -> what its admitted gangs are charged, as the core counts.
        self.quota_usage: dict[str, dict[str, int]] = defaultdict(dict)
        self.unsettled: dict[str, JobState] = {}
        self.settled: dict[tuple[str, str, tuple[object, ...]], tuple[int, PodTemplate]] = {}
        roots = roots_of(scenario.quotas, scenario.cohorts)  # a tree shares as one cohort
        self.cohort_of = {q.name: roots.get(q.name, f"TeamQuota/{q.name}") for q in scenario.quotas}
        self.strict_queues = {
            (q.namespace, q.name) for q in queues if q.ordering is Ordering.STRICT_FIFO
        }
        self._ledger: QuotaLedger | None = None
        self._worth: dict[tuple[object, ...], bool] = {}
        self.preempting_teams, self.victim_teams = preemption_teams(scenario)
        self.afs_teams = admission_fair_teams(scenario)
        self.fair_teams = fair_sharing_teams(scenario) | self.afs_teams
        # Each admission-fair Queue's decayed usage after the last cycle (Queue status).
        self.queue_usage: dict[QueueKey, QueueUsage] = {}
        self.on_usage: Callable[[str], None] | None = None  # a team's charge changed
        self.lowest: dict[str, int] = {}  # team -> the lowest priority of its gangs so far
        self._preempts: dict[tuple[object, ...], bool] = {}

    # -- bookkeeping, told by the run --------------------------------------------

    def ledger(self) -> QuotaLedger:
        """The core's quota ledger over what is admitted now (kept until the next cycle)."""
        if self._ledger is None:
            self._ledger = QuotaLedger(
                self.scenario.quotas, self.quota_usage, self.scenario.cohorts
            )
        return self._ledger

    def admitted(self, job: JobState) -> None:
        self._charge(job, +1)
        if job.placement or job.alone or job.team in self.afs_teams:
            self.unsettled[job.key] = job
        else:
            self.settle(job, +1)

    def settle(self, job: JobState, sign: int) -> None:
        """Move an admitted gang into (+1) or out of (-1) the merged, settled ones."""
        if job.alone or job.team in self.afs_teams:
            return  # a possible victim, or its admission time counts: shown as itself
        key = (job.spec.namespace, job.spec.queue, job.shape)
        pods, _ = self.settled.get(key, (0, job.template))
        self.settled[key] = (pods + sign * job.pods, job.template)
        job.settled = sign > 0
        if sign > 0:
            self.unsettled.pop(job.key, None)

    def released(self, job: JobState, nodes: list[str] | None, *, quota: bool) -> None:
        """``job`` gives back its pods on ``nodes`` (None: everything, quota included)."""
        self.freed_nodes.update(job.bound if nodes is None else nodes)
        if nodes is not None or not quota:
            return
        self.freed_nodes.update(job.placement)  # its planned places
        self._charge(job, -1)
        if job.settled:
            self.settle(job, -1)
        self.unsettled.pop(job.key, None)
        cohort = self.cohort_of.get(job.team, "")
        self.quota_back.update((cohort, resource) for resource in job.request)

    def _charge(self, job: JobState, sign: int) -> None:
        self._ledger = None
        if not job.team:
            return
        usage = self.quota_usage[job.team]
        for resource, amount in job.request.items():
            usage[resource] = usage.get(resource, 0) + sign * amount * job.pods
        if self.on_usage is not None:
            self.on_usage(job.team)

    # -- the cycle ------------------------------------------------------------------

    def cycle(self, pending: Mapping[str, JobState], *, now: float) -> tuple[Decision, ...]:
        """Run the core over the admitted gangs and the pending ones worth deciding."""
        eligible, candidates = self._candidates(pending, now)
        self.freed_nodes, self.quota_back, self.fresh = set(), set(), {}
        if not candidates:
            return ()
        result = self._schedule(candidates, now)
        if len(candidates) < len(eligible) and any(
            d.verdict is Verdict.PREEMPT for d in result.decisions
        ):
            # Its victims gave room back in the middle of the cycle, which any gang
            # after the preemptor may take: the cycle is run again over them all.
            result = self._schedule(eligible, now)
        self._held_nominal(result.decisions, pending)
        self._sampled(result.queue_usage)
        return result.decisions

    def snapshot(self, pending: Mapping[str, JobState], *, now: float) -> Snapshot:
        """The snapshot a cycle run at ``now`` would show the core; nothing changes.

        The ETA sample (``sim.engine.reserving``) forecasts from it, so that an
        estimate starts from exactly what admission decides over.
        """
        _, candidates = self._candidates(pending, now)
        return self._snapshot(candidates, now)

    def _candidates(
        self, pending: Mapping[str, JobState], now: float
    ) -> tuple[list[JobState], list[JobState]]:
        """The gangs eligible now, and of them those worth showing the core."""
        self._worth = {}
        self._preempts = {}
        eligible = [
            job
            for job in pending.values()
            if job.phase is Phase.PENDING and (job.requeue_at is None or job.requeue_at <= now)
        ]
        candidates = [
            job for job in eligible if self._may_preempt(job) or self._worth_deciding(job)
        ]
        if not self.exhaustive:
            candidates = self._within_quota(candidates)
        return eligible, candidates

    def _sampled(self, usage: Mapping[QueueKey, QueueUsage]) -> None:
        """Carry each Queue's decayed usage to the next cycle, as its status would."""
        if not usage:
            return
        self.queue_usage.update(usage)
        self.queues = tuple(
            replace(q, consumed=u.consumed, consumed_at=u.consumed_at)
            if (u := usage.get((q.namespace, q.name))) is not None and u.sampled
            else q
            for q in self.queues
        )

    def _held_nominal(
        self, decisions: tuple[Decision, ...], pending: Mapping[str, JobState]
    ) -> None:
        """A gang refused within its nominal held idle nominal in this cycle only: in
        the next one its cohort may lend that room again, as if it came back."""
        for decision in decisions:
            if decision.verdict is not Verdict.PENDING or decision.reason.value != QUOTA_EXCEEDED:
                continue
            job = pending[decision.workload]
            if self._may_hold_nominal(job):
                cohort = self.cohort_of.get(job.team, "")
                self.quota_back.update((cohort, resource) for resource in job.request)

    def _schedule(self, candidates: list[JobState], now: float) -> CycleResult:
        return schedule(self._snapshot(candidates, now), placer=self.placer)

    def _snapshot(self, candidates: list[JobState], now: float) -> Snapshot:
        usage = self.book.usage()
        if self.victim_teams or self.reserving:
            owned = (p for job in self.unsettled.values() if job.alone for p in job.core_pods())
            usage += tuple(owned)
        snapshot = Snapshot(
            nodes=self.book.core_nodes(),
            pods=usage,
            workloads=self._admitted_workloads(candidates)
            + tuple(j.core_workload() for j in candidates),
            queues=self.queues,
            quotas=self.scenario.quotas,
            priority_classes=self.scenario.priority_classes,
            cohorts=self.scenario.cohorts,
            topologies=self.scenario.topologies,
            now=now,
            reservation_limit=self.reservation_limit,
        )
        dra = self.scenario.dra
        if dra is not None:
            snapshot = replace(
                snapshot,
                device_classes=dra.device_classes,
                resource_slices=dra.resource_slices,
                claim_templates=dra.claim_templates,
                resource_claims=self.book.devices.claims(_claim_of),
            )
        return snapshot

    def arrived(self, job: JobState) -> None:
        if job.team:
            priority = self.priority.get(job.key, 0)
            self.lowest[job.team] = min(self.lowest.get(job.team, priority), priority)

    def _may_preempt(self, job: JobState) -> bool:
        """Whether the core might answer Preempt for ``job`` in this cycle.

        Necessary conditions only, read before the cycle (until a preemption in it,
        which runs the cycle again, a cycle's first pass makes no quota borrow):
        reclaiming, the gang fits its team's nominal and another member of the
        cohort borrows what it needs; within its TeamQuota, the team has a gang of
        lower priority (or, LowerOrNewerEqualPriority, as low); borrowing, always.
        """
        if job.team not in self.preempting_teams or not job.request:
            return False
        if job.nominated or self.exhaustive:
            return True  # it holds room: the core charges it and admits it there
        if job.team in self.fair_teams:
            return True  # fair sharing lets a borrower take from a higher share
        priority = self.priority.get(job.key, 0)
        key = (job.team, job.shape, job.pods, priority)
        found = self._preempts.get(key)
        if found is None:
            found = self._preempts[key] = self._could_preempt(job, priority)
        return found

    def _could_preempt(self, job: JobState, priority: int) -> bool:
        ledger = self.ledger()
        policy = ledger.quota(job.team).preemption
        if policy.borrow_within_cohort is not BorrowPolicy.NEVER:
            return True
        within = policy.within_team_quota
        lowest = self.lowest.get(job.team, priority)
        if (within is WithinPolicy.LOWER_PRIORITY and lowest < priority) or (
            within is WithinPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY and lowest <= priority
        ):
            return True
        need = scale(job.request, job.pods)
        return (
            policy.reclaim_within_cohort is not ReclaimPolicy.NEVER
            and ledger.within_nominal(job.team, need)
            and any(ledger.borrowers(job.team, r) for r, amount in need.items() if amount > 0)
        )

    def _within_quota(self, candidates: list[JobState]) -> list[JobState]:
        """At most as many gangs of one team and shape as its quota has room for now.

        Admissions during the cycle only use quota up, so if the team has room for
        ``k`` such gangs before it, only the first ``k`` in the core's order can be
        admitted; the rest would be refused whatever happens.  StrictFIFO queues
        keep every gang: there a refused head still holds the others back.
        """
        groups: dict[tuple[object, ...], list[JobState]] = defaultdict(list)
        kept: list[JobState] = []
        for job in candidates:
            if (
                not job.team
                or job.team in self.fair_teams  # its cohort's turns go by share
                or self._may_preempt(job)  # it may evict for room it lacks
                or self._may_hold_nominal(job)  # refused, it still holds idle nominal
                or (job.spec.namespace, job.spec.queue) in self.strict_queues
            ):
                kept.append(job)
            else:
                # Gangs alike but for topology are not: a gang refused for its domain
                # leaves the quota to the next, which may fit anywhere.
                groups[(job.team, job.shape, job.pods, job.spec.topology)].append(job)
        for jobs in groups.values():
            room = self._room_for(jobs[0])
            if room is None or room >= len(jobs):
                kept.extend(jobs)
                continue
            kept.extend(heapq.nsmallest(room, jobs, key=self._core_order))
        return kept

    def _room_for(self, job: JobState) -> int | None:
        """How many gangs like ``job`` its TeamQuota could still take (None: no limit)."""
        ledger = self.ledger()
        if job.team not in ledger:
            return None
        room: int | None = None
        for resource, amount in job.request.items():
            available = ledger.available(job.team, resource)
            if available is None or amount <= 0:
                continue
            fits = available // (amount * job.pods)
            room = fits if room is None else min(room, fits)
        return room

    def _core_order(self, job: JobState) -> tuple[int, float, str, str]:
        return (-self.priority.get(job.key, 0), job.spec.arrival, job.spec.namespace, job.spec.name)

    def _worth_deciding(self, job: JobState) -> bool:
        if self.exhaustive or job.key in self.fresh or not job.reason:
            return True
        if job.team in self.fair_teams:
            return True  # its cohort's turns go by share: see the module
        if (job.spec.namespace, job.spec.queue) in self.strict_queues:
            return True
        if self._may_hold_nominal(job):
            return True  # whatever it waited for last, refused for quota now it holds
        # Gangs of one team, shape and size get the same answer: ask once per cycle.
        key = (job.reason, job.team, job.shape, job.pods)
        worth = self._worth.get(key)
        if worth is None:
            worth = self._worth[key] = self._may_be_admitted(job)
        return worth

    def _may_be_admitted(self, job: JobState) -> bool:
        if job.reason == NO_NODE_FIT:
            # Necessary: a node that got room back can take one member now, even
            # before counting what admitted gangs still hold there by plan.
            eligible = self.scheduler.eligible_set(job.shape, job.template)
            return any(
                node in eligible and self.book.fits(node, job.request) for node in self.freed_nodes
            )
        if job.reason == QUOTA_EXCEEDED:
            cohort = self.cohort_of.get(job.team, "")
            if not any((cohort, resource) in self.quota_back for resource in job.request):
                return False
            # Necessary: the quota has room for the whole gang before this cycle admits
            # anything (the core's own ledger, over what is admitted now).
            return self.ledger().shortfall(job.team, scale(job.request, job.pods)) is None
        return False  # the Queue or TeamQuota is missing: nothing in a run changes that

    def _may_hold_nominal(self, job: JobState) -> bool:
        """Whether ``job`` fits its team's nominal, read before the cycle.

        The core refuses such a gang when the cohort has lent that nominal out, and
        then holds what is still idle of it for the rest of the cycle
        (``QuotaLedger.hold_idle_nominal``): a later borrower does not get it.  So
        the gang changes the cycle even while it stays pending, and is always shown.
        During a cycle its team's usage only grows, so one that does not fit the
        nominal before the cycle holds nothing in it.
        """
        ledger = self.ledger()
        if job.team not in ledger or not job.request:
            return False
        return ledger.within_nominal(job.team, scale(job.request, job.pods))

    def _admitted_workloads(self, candidates: list[JobState]) -> tuple[Workload, ...]:
        shown = self._victims_now(candidates)
        out: list[Workload] = []
        # ``alone`` gangs that cannot be victims in this cycle merge like settled ones
        # (their pods still come named, which changes nothing where no gang claims them).
        merged: dict[tuple[str, str, tuple[object, ...]], tuple[int, PodTemplate]] = {}
        for job in self.unsettled.values():
            settled = job.bound_count == job.pods or not job.placement  # as settle() has it
            if (
                job.alone
                and settled
                and not self.reserving
                and job.team not in shown
                and job.team not in self.afs_teams
            ):
                key = (job.spec.namespace, job.spec.queue, job.shape)
                pods, _ = merged.get(key, (0, job.template))
                merged[key] = (pods + job.pods, job.template)
                continue
            out.append(job.core_workload())
        for prefix, groups in (("settled", self.settled), ("merged", merged)):
            for (namespace, queue, _), (pods, template) in groups.items():
                if pods:
                    out.append(
                        Workload(
                            namespace=namespace,
                            name=f"{prefix}-{queue}-{len(out)}",
                            queue=queue,
                            pod_sets=one_pod_set(template, count=pods, path=JOB_TEMPLATE),
                            kind="Job",
                            phase=WorkloadPhase.ADMITTED,
                        )
                    )
        return tuple(out)

    def _victims_now(self, candidates: list[JobState]) -> frozenset[str]:
        """The teams whose admitted gangs the core may choose as victims in this cycle.

        None unless some gang may preempt.  Then: the teams of those gangs (within
        their TeamQuota), and the teams borrowing now, the only ones a reclaim can
        take from (a cycle's first pass makes no team borrow).  A borrowing
        preemptor may take from teams that start borrowing during the cycle: with
        borrowWithinCohort on anywhere, or a preemptor in a fair-sharing cohort
        (where a borrower may take from a higher share), every team that may lose
        gangs is shown.
        """
        if not self.victim_teams:
            return frozenset()
        preemptors = [job for job in candidates if self._may_preempt(job)]
        if not preemptors:
            return frozenset()
        ledger = self.ledger()
        if any(job.team in self.fair_teams for job in preemptors) or any(
            ledger.quota(team).preemption.borrow_within_cohort is not BorrowPolicy.NEVER
            for team in self.preempting_teams
        ):
            return self.victim_teams
        shown = {job.team for job in preemptors}
        for team in self.victim_teams:
            used = ledger.used(team)
            limits = ledger.quota(team).resources
            if any(used.get(r, 0) > quota.nominal for r, quota in limits.items()):
                shown.add(team)
        return frozenset(shown)


def _claim_of(owner: Hashable, node: str) -> tuple[str, str, str]:
    """The allocated claim of what ``owner`` holds on ``node`` (DeviceBook.claims).

    A gang's bound members hold theirs for the pod the core knows them by (an
    ``alone`` gang's, JobState.core_pods): the core then counts those devices as
    the gang's, which preempting it gives back.  A preempted attempt's
    terminating pods and foreign pods hold theirs for nobody the core knows.
    """
    if isinstance(owner, JobState):
        namespace, name = owner.spec.namespace, owner.spec.name
        return namespace, f"{name}-{node}-gpus", f"{namespace}/{owner.core_pod(node)}"
    parts = owner if isinstance(owner, tuple) else (owner,)
    return "", "held-" + "-".join(str(p).replace("/", "-") for p in parts) + f"-{node}", ""
