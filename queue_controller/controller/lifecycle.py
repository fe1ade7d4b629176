"""The gang lifecycle: from the typed views of a cycle, and what the core decided, to actions.

A queued gang moves through its PodGroup's phases:

    Pending --admit--> Admitted --minMember running--> Running --gang done--> Finished
       ^                  |  (timeout)                   |  (members lost past timeout)
       |                  v                              v
       +---requeued--- Evicted <-------------------------+
                          |
                          +--past backoffLimit--> Failed

Every decision is re-derived from the objects each cycle, and what is stored
in the API (PodGroup status, the gang's own objects) is the only memory, so a
restarted controller picks up exactly where the last one stopped.  This
module reads views and decides; it writes nothing, and it knows no workload
kind: each gang's kind (kube/kinds) spells the writes that hold and release it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from queue_controller.api.v1alpha1 import PodGroupPhase
from queue_controller.controller import actions as act
from queue_controller.controller import gpuwatch
from queue_controller.controller.binding import member_bindings
from queue_controller.controller.replacing import rewrite
from queue_controller.controller.reservations import is_new, pending_fields, settled_fields
from queue_controller.controller.status import iso
from queue_controller.controller.summaries import summaries
from queue_controller.core.cycle import NOT_REPLACED, CycleResult, lost_reason, replaces
from queue_controller.core.model import (
    Decision,
    GpuHealth,
    Node,
    Queue,
    Replacement,
    RequeuePolicy,
    TeamQuota,
    Verdict,
)
from queue_controller.core.rules import Requeue, pods_ready_timeout, requeue
from queue_controller.kube.fields import epoch_seconds
from queue_controller.kube.gangs import GangView
from queue_controller.kube.resources import POD_GROUP
from queue_controller.kube.snapshot import Translation
from queue_controller.kube.unread import PROVISIONAL, BrokenGang
from queue_controller.kube.views import Delete, MemberPod, Ref, Write

HOLDING = frozenset({PodGroupPhase.ADMITTED, PodGroupPhase.RUNNING})
# A PodGroup whose gang has gone (every member pod deleted, no owner to make
# them again) is deleted after this long, so that an owner recreating evicted
# pods finds the requeue count and backoff still there.
ORPHAN_GRACE_SECONDS = 600.0


def subject(gang: GangView) -> act.Subject:
    head = gang.gang.head_ref
    uid = head.uid if head is not None else (gang.group.ref.uid if gang.group else "")
    return act.Subject(
        kind=gang.kind.name,
        namespace=gang.namespace,
        name=gang.workload.name,
        uid=uid,
        queue=gang.queue_key,
        about=gang.about,
        runtime_class=gang.gang.facts.runtime.runtime_class,
    )


def group_ref(gang: GangView) -> Ref:
    """The gang's PodGroup, or the one about to be created (no version yet)."""
    if gang.group is not None:
        return gang.group.ref
    return Ref(POD_GROUP, gang.namespace, gang.kind.pod_group_name(gang.name))


@dataclass(frozen=True)
class Signals:
    """What the cycle knows about admitted gangs' GPUs besides the objects' own state."""

    health: Mapping[str, tuple[GpuHealth, float]] = field(default_factory=dict)
    idle: Mapping[str, float] = field(default_factory=dict)  # gang key -> idle since
    # The cycle's nodes (a plan's node absent from it is gone), and the lost nodes the
    # core replaced: gang key -> its replacements.
    nodes: Mapping[str, Node] | None = None
    replacements: Mapping[str, tuple[Replacement, ...]] = field(default_factory=dict)

    quotas: Mapping[str, TeamQuota] = field(default_factory=dict)
    # Gangs the core found no replacement for: gang key -> why (said in their eviction).
    unreplaced: Mapping[str, str] = field(default_factory=dict)

    def lost(self, plan: Iterable[str], gang: GangView) -> frozenset[str]:
        """The nodes of ``plan`` that are gone, NotReady or without a healthy GPU, for a
        gang with a topology request whose Queue replaces them (``onNodeFailure:
        Replace``, the default); none for others, whose members go where the plan says."""
        if self.nodes is None or not replaces(gang.workload, gang.queue, self.quotas):
            return frozenset()
        nodes = self.nodes
        return frozenset(n for n in plan if lost_reason(nodes.get(n)) is not None)


@dataclass(frozen=True)
class Planner:
    default_timeout_seconds: int
    # The test-only fault QC_FAULT_SKIP_EVICTIONS: every eviction is dropped.
    skip_evictions: bool = False

    def plan(
        self,
        seen: Translation,
        result: CycleResult,
        *,
        now: float,
        idle: Mapping[str, float] | None = None,
    ) -> list[act.Action]:
        decisions = {d.key: d for d in result.decisions}
        replaced: dict[str, list[Replacement]] = {}
        for one in result.replacements:
            replaced.setdefault(one.key, []).append(one)
        signals = Signals(
            seen.node_health,
            idle or {},
            {node.name: node for node in seen.snapshot.nodes},
            {key: tuple(ones) for key, ones in replaced.items()},
            {view.model.name: view.model for view in seen.quotas},
            result.unreplaced,
        )
        out: list[act.Action] = []
        victims = self._victims(seen, result, now)
        for gang in seen.gangs:
            if gang.key in victims:
                out.append(victims[gang.key])
                continue
            out.extend(self._gang(gang, decisions.get(gang.key), now, signals))
        out.extend(_orphans(seen, now))
        out.extend(summaries(seen, result))
        if self.skip_evictions:
            return [a for a in out if not isinstance(a, act.Evict)]
        return out

    def _gang(
        self, gang: GangView, decision: Decision | None, now: float, signals: Signals = Signals()
    ) -> list[act.Action]:
        who = subject(gang)
        facts = gang.gang.facts
        if facts.finished:
            if gang.group is not None and gang.phase is not PodGroupPhase.FINISHED:
                return [
                    act.MarkFinished(
                        subject=who,
                        group=gang.group.model,
                        group_ref=gang.group.ref,
                        succeeded=facts.succeeded,
                    )
                ]
            return []
        out: list[act.Action] = []
        broken = isinstance(gang.gang, BrokenGang)
        if gang.group is None:
            out.append(act.CreatePodGroup(subject=who, body=gang.new_group()))
        elif (
            not broken
            and gang.size >= 1
            and PROVISIONAL in gang.group.model.metadata.annotations
            and not gang.holding
        ):
            # Its gang reads again: made anew next cycle, sized as the gang now says.
            why = "its gang can be read again; made anew with the gang's own size"
            return [act.DeleteOrphan(group_ref=gang.group.ref, why=why)]
        phase = gang.phase
        if gang.holding:
            flagged = self._gpu_signals(gang, now, signals)
            if flagged and isinstance(flagged[0], act.Evict):
                return out + flagged
            return out + flagged + self._admitted(gang, now, signals)
        if phase in (PodGroupPhase.EVICTED, PodGroupPhase.FAILED):
            assert gang.group is not None
            live = _holding(gang)
            if facts.held and not live and phase is PodGroupPhase.FAILED:
                return out
            requeued = phase is PodGroupPhase.EVICTED and facts.held and not live
            return [
                *out,
                act.FinishEviction(
                    subject=who,
                    group=gang.group.model,
                    group_ref=gang.group.ref,
                    pods=live,
                    hold=tuple(gang.kind.evict(gang.gang)),
                    requeued=requeued,
                ),
            ]
        if not facts.held:
            writes = tuple(gang.kind.hold(gang.gang))
            return [*out, act.HoldUnadmitted(subject=who, writes=writes)] if writes else out
        stray = _stray(gang)
        if stray:
            out.append(act.HoldUnadmitted(subject=who, writes=stray))
        if decision is None:
            return out
        if decision.verdict is Verdict.PREEMPT:
            out.append(
                act.Nominate(
                    subject=who,
                    group=gang.group.model if gang.group else None,
                    group_ref=group_ref(gang),
                    reason=decision.reason.value,
                    message=decision.message,
                    nominated=decision.nominated,
                    victims=tuple(key.split("/", 1)[1] for key, _ in decision.victims),
                    fields=settled_fields(gang.group.model if gang.group else None),
                )
            )
            return out
        if decision.verdict is Verdict.ADMIT:
            out.append(
                act.Admit(
                    subject=who,
                    group=gang.group.model if gang.group else None,
                    group_ref=group_ref(gang),
                    placement=decision.placement,
                    pod_set_placement=decision.pod_set_placement,
                    domains=decision.domains,
                    slices=decision.slices,
                    message=decision.message,
                    created=gang.gang.created or now,
                    release=tuple(gang.kind.release(gang.gang)),
                    backfilled_over=tuple(k.split("/", 1)[1] for k in decision.backfilled_over),
                    fields=settled_fields(
                        gang.group.model if gang.group else None, gang.workload.runtime
                    ),
                )
            )
            return out
        group = gang.group.model if gang.group else None
        fields = pending_fields(group, decision, gang.workload.runtime, now)
        if fields or _pending_changed(gang, decision):
            out.append(
                act.MarkPending(
                    subject=who,
                    group=gang.group.model if gang.group else None,
                    group_ref=group_ref(gang),
                    verdict=decision.verdict.value,
                    reason=decision.reason.value,
                    message=decision.message,
                    fields=fields,
                    new_reservation=is_new(group, decision.reservation),
                )
            )
        return out

    def _victims(self, seen: Translation, result: CycleResult, now: float) -> dict[str, act.Evict]:
        """The gangs this cycle's preemptions evict, each named for its preemptor.

        A preemption is no fault of the victim's: it is requeued at once, and it
        does not count toward its Queue's backoffLimit.
        """
        by_key = {gang.key: gang for gang in seen.gangs}
        out: dict[str, act.Evict] = {}
        for decision in result.decisions:
            if decision.verdict is not Verdict.PREEMPT:
                continue
            for key, reason in decision.victims:
                victim = by_key.get(key)
                if victim is None or victim.group is None or key in out:
                    continue
                message = f"preempted by {decision.kind} {decision.workload} ({reason.value})"
                out[key] = self._evict(victim, now, "Preempted", message, preemption=reason.value)
        return out

    def _admitted(
        self, gang: GangView, now: float, signals: Signals = Signals()
    ) -> list[act.Action]:
        group = gang.group
        assert group is not None
        who = subject(gang)
        live = gang.live_pods
        status = group.status
        if gang.gang.facts.held and not gang.kind.held_until_bound:
            if group.phase is PodGroupPhase.ADMITTED and not live:
                return [
                    act.ResumeAdmission(subject=who, release=tuple(gang.kind.release(gang.gang)))
                ]
            return [
                self._evict(
                    gang, now, "JobSuspended", f"the {gang.kind.name} was held by someone else"
                )
            ]
        plan = {*status.placement, *(n for s in status.podSetPlacement.values() for n in s)}
        out: list[act.Action] = list(member_bindings(gang, signals.lost(plan, gang)))
        replaced = signals.replacements.get(gang.key)
        if replaced:
            # Its members bound now stay put; the lost ones' new pods are sent to the
            # replacement once the plan that names it is written (next cycle, or the
            # releaser), so no member is sent on a plan that may not land.
            first = gang.workload.pod_sets[0].name if gang.workload.pod_sets else ""
            written = rewrite(status, first, replaced, now)
            out.insert(
                0,
                act.ReplaceNodes(
                    subject=who,
                    group=group.model,
                    group_ref=group.ref,
                    patch=written.patch,
                    messages=tuple(r.describe() for r in replaced),
                ),
            )
        min_member = group.min_member
        phases = Counter(p.phase for p in gang.members if not p.deleting)
        running, done = phases["Running"], phases["Succeeded"]
        ready = running + done >= min_member
        timeout = pods_ready_timeout(
            pod_group_seconds=group.model.spec.timeoutSeconds,
            queue_seconds=gang.queue.pods_ready_timeout_seconds if gang.queue else None,
            default_seconds=self.default_timeout_seconds,
        )

        def running_now() -> act.MarkRunning:
            return act.MarkRunning(
                subject=who, group=group.model, group_ref=group.ref, running=running
            )

        if group.phase is PodGroupPhase.ADMITTED:
            if ready:
                out.append(running_now())
            else:
                admitted_at = epoch_seconds(status.admittedAt) if status.admittedAt else now
                if now >= admitted_at + timeout:
                    message = (
                        f"{running + done} of {min_member} members running "
                        f"{timeout}s after admission"
                    )
                    out.append(self._evict(gang, now, "PodsReadyTimeout", message, admitted_at))
            return out
        ready_condition = status.condition("PodsReady")
        lost = ready_condition is not None and ready_condition.reason == "MembersLost"
        if ready:
            if lost:
                out.append(running_now())
            return out
        if not lost:
            lost_now = act.MarkMembersLost(
                subject=who, group=group.model, group_ref=group.ref, running=running
            )
            return [*out, lost_now]
        assert ready_condition is not None
        changed = ready_condition.lastTransitionTime
        since = epoch_seconds(changed) if changed else now
        if now >= since + timeout:
            message = f"only {running + done} of {min_member} members running for {timeout}s"
            why = signals.unreplaced.get(gang.key)
            if why:  # its Queue replaces lost nodes, and none fit: say so (chaos reads it)
                message += f"; {NOT_REPLACED}{why}"
            out.append(self._evict(gang, now, "MembersLost", message, since))
        return out

    def _gpu_signals(self, gang: GangView, now: float, signals: Signals) -> list[act.Action]:
        """GPUUnhealthy and Idle: evict (the Queue's choice) or set and clear the conditions."""
        group = gang.group
        assert group is not None
        queue = gang.queue or Queue("", "", "")
        out: list[act.Action] = []
        hit = gpuwatch.hits(gang.live_pods, signals.health) if signals.health else []
        if hit:
            message = hit[0].describe() + (f" (and {len(hit) - 1} more)" if len(hit) > 1 else "")
            if queue.evict_on_gpu_unhealthy:
                return [self._evict(gang, now, "GPUUnhealthy", message)]
            if not group.condition_is("GPUUnhealthy", "True"):
                out.append(_flag(gang, "GPUUnhealthy", True, "GPUUnhealthy", message, True))
        elif group.condition_is("GPUUnhealthy", "True"):
            out.append(_flag(gang, "GPUUnhealthy", False, "GPUsHealthy", "its GPUs are healthy"))
        since = signals.idle.get(gang.key)
        if since is not None and group.phase is PodGroupPhase.RUNNING:
            message = f"its GPUs have been idle since {iso(since)}"
            if queue.evict_idle:
                return [self._evict(gang, now, "Idle", message)]
            if not group.condition_is("Idle", "True"):
                out.append(_flag(gang, "Idle", True, "GPUIdle", message, True))
        elif since is None and group.condition_is("Idle", "True"):
            out.append(_flag(gang, "Idle", False, "GPUActive", "its GPUs are active again"))
        return out

    def _evict(
        self,
        gang: GangView,
        now: float,
        reason: str,
        message: str,
        since: float | None = None,
        *,
        preemption: str = "",
    ) -> act.Evict:
        group = gang.group
        assert group is not None
        policy = gang.queue.requeue if gang.queue else RequeuePolicy()
        previous = group.status.requeueCount
        # A preempted gang did nothing wrong: back in its queue at once, no count.
        again = (
            Requeue(previous, now, deactivated=False)
            if preemption
            else requeue(policy, previous=previous, now=now)
        )
        return act.Evict(
            subject=subject(gang),
            group=group.model,
            group_ref=group.ref,
            pods=gang.live_pods,
            hold=tuple(gang.kind.evict(gang.gang)),
            reason=reason,
            message=message,
            requeue=again,
            partial_since=since,
            preemption=preemption,
        )


def _stray(gang: GangView) -> tuple[Write, ...]:
    """Members running although their gang is held by its head (a suspended Job).

    The Job controller deletes a suspended Job's pods, but one that lags can
    create a pod from the unsuspended Job it last saw, after our eviction
    suspended it; that pod runs on GPUs nobody admitted.  Deleted here, as the
    eviction would have, rather than left to the Job controller's next sync.
    Kinds that hold each member by its gate hold no bound member this way.
    """
    if gang.kind.held_until_bound:
        return ()
    return tuple(Delete(ref=pod.ref) for pod in gang.live_pods if pod.node_name)


def _holding(gang: GangView) -> tuple[MemberPod, ...]:
    """The live members an evicted gang must still give back.

    Where the kind holds each member by its gate, a gated member holds nothing:
    it is a member the owner made again after the eviction, waiting to queue.
    """
    if not gang.kind.held_until_bound:
        return gang.live_pods
    return tuple(p for p in gang.live_pods if not (p.gated and not p.node_name))


def _flag(
    gang: GangView, kind: str, status: bool, reason: str, message: str, warning: bool = False
) -> act.SetCondition:
    assert gang.group is not None
    return act.SetCondition(
        subject=subject(gang),
        group=gang.group.model,
        group_ref=gang.group.ref,
        condition=kind,
        status=status,
        reason=reason,
        message=message,
        warning=warning,
    )


def _pending_changed(gang: GangView, decision: Decision) -> bool:
    if gang.group is None:
        return True
    status = gang.group.status
    return (status.reason, status.message, status.phase) != (
        decision.reason.value,
        decision.message,
        PodGroupPhase.PENDING,
    )


def _orphans(seen: Translation, now: float) -> list[act.Action]:
    out: list[act.Action] = []
    for group in seen.orphans:
        status = group.status
        changed = [c.lastTransitionTime for c in status.conditions if c.lastTransitionTime]
        created = group.model.metadata.creationTimestamp
        latest = max([epoch_seconds(t) for t in changed + ([created] if created else [])] or [0])
        if status.phase is PodGroupPhase.FINISHED or now >= latest + ORPHAN_GRACE_SECONDS:
            why = (
                "its gang finished and its members are gone"
                if status.phase is PodGroupPhase.FINISHED
                else f"no member of its gang has existed for {ORPHAN_GRACE_SECONDS:.0f}s"
            )
            out.append(act.DeleteOrphan(group_ref=group.ref, why=why))
    return out
