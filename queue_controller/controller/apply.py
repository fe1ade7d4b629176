"""Carry out the planner's actions through the gateway, one handler per action.

Order within an admission matters for restarts: the PodGroup status
(``Admitted`` with its placement) is written first, then the gang's kind
releases it.  A crash between the two leaves a PodGroup that says Admitted on
a held gang, which the next cycle resumes; it can never leave a running gang
that no PodGroup accounts for.  How each write is made (conditionally, and
assumed) is :mod:`queue_controller.controller.writer`'s business.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import singledispatchmethod
from typing import Any

from queue_controller.controller import actions as act
from queue_controller.controller.lanes import run_in_lanes
from queue_controller.controller.status import (
    Update,
    conditions_with,
    iso,
    room_patch,
    topology_assignment,
    topology_domain,
)
from queue_controller.controller.writer import WRITE_THREADS, Writer
from queue_controller.core.model import NODE_REPLACED
from queue_controller.journal import JournalEvent
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import epoch_seconds
from queue_controller.kube.resources import ADMISSION_GATE, HOSTNAME_LABEL

log = logging.getLogger(__name__)
Obj = dict[str, Any]
# The reason of the Warning event on an object a cycle left out (stable: users alert on it).
LEFT_OUT_REASON = "InvalidObject"


class Applier(Writer):
    def reserve(self, actions: list[act.Action]) -> list[str]:
        """Mark every member these actions send as in flight, at once (synchronously):
        from here on whoever plans counts their slots as taken.  The keys marked."""
        sent = [(a.pod.key, a.node) for a in actions if isinstance(a, act.BindMember) and a.node]
        for pod, node in sent:
            self.in_flight.add(pod, node)
        return [pod for pod, _ in sent]

    async def apply_all(
        self, actions: list[act.Action], *, reserved: list[str] | None = None
    ) -> int:
        """Apply; a failed action is logged and skipped.  Returns how many failed.

        Each gang's actions run in their planned order (its PodGroup is written before
        its kind releases it; see above), different gangs' at once (lanes.py).

        ``reserved``: what :meth:`reserve` marked for these actions (else marked here).
        The marks go when every write is done: the writes that landed are in the state
        by then (assumed), and the members whose writes failed are gated still.
        """
        self._written.clear()
        self._groups.clear()
        reserved = self.reserve(actions) if reserved is None else reserved
        try:
            # As many lanes at once as the writer has threads to send them on.
            return await run_in_lanes(actions, self._apply_one, at_once=WRITE_THREADS)
        finally:
            for pod in reserved:
                self.in_flight.discard(pod)

    async def _apply_one(self, action: act.Action) -> int:
        """1 if the action failed (logged), else 0."""
        try:
            await self.apply(action)
        except gw.Conflict as error:
            log.debug("conflict, retrying next cycle: %s", error)
            return 1
        except gw.GatewayError as error:
            log.warning("could not %s: %s", type(action).__name__, error)
            return 1
        return 0

    # -- actions -------------------------------------------------------------------

    @singledispatchmethod
    async def apply(self, action: act.Action) -> None:
        raise NotImplementedError(type(action).__name__)

    @apply.register
    async def _create_pod_group(self, action: act.CreatePodGroup) -> None:
        namespace = action.body["metadata"]["namespace"]
        try:
            created = await self._call(self.gateway.create, gw.POD_GROUP, namespace, action.body)
        except gw.Conflict:
            return  # one of that name exists (an old gang's, about to be collected): next cycle
        created.setdefault("kind", gw.POD_GROUP.kind)
        created.setdefault("apiVersion", gw.POD_GROUP.api_version)
        self._assume(created)

    @apply.register
    async def _hold_unadmitted(self, action: act.HoldUnadmitted) -> None:
        for write in action.writes:
            await self._write(write)
        await self._events(
            action.subject.about,
            "Suspended",
            f"the {action.subject.kind} started without being admitted by its queue; it is "
            "held until its whole gang fits",
            warning=True,
        )

    @apply.register
    async def _admit(self, action: act.Admit) -> None:
        found = self._group_now(action.group, action.group_ref)
        if found is None:
            return
        current, ref = found
        now = self.clock()
        status: Obj = {
            "phase": "Admitted",
            "placement": dict(action.placement),
            "podSetPlacement": {k: dict(v) for k, v in action.pod_set_placement.items()} or None,
            "nominatedPlacement": None,  # merge patch: the room held is the placement now
            "nominatedAt": None,
            # Cleared (null) when no pod set asked for a topology.
            "topologyDomain": topology_domain(action.domains) if action.domains else None,
            "topologyAssignment": topology_assignment(current, action.domains, action.slices),
            "admittedAt": iso(now),
            "running": 0,
            **action.fields,
            "reason": "Admitted",
            "message": action.message,
            "conditions": conditions_with(
                current,
                now,
                ("Admitted", True, "Admitted", action.message),
                ("PodsReady", False, "WaitingForPods", "waiting for every member to run"),
            ),
        }
        group = await self._patch(ref, {"status": status}, status=True)
        # Admitted from here: the status says so.  Say it (events, journal, metrics)
        # before the release, which may conflict with the Job controller's own
        # updates and is then resumed next cycle (ResumeAdmission) without a word.
        placed = ", ".join(f"{node}: {n}" for node, n in sorted(action.placement.items()))
        about = self._about(action.subject, ref)
        said = action.message
        if action.domains:
            said += f"; topology domain {topology_domain(action.domains)}"
        await self._events(about, "Admitted", f"{said} ({placed})")
        if action.backfilled_over:
            await self._events(
                about,
                "Backfilled",
                "placed on nodes reserved for "
                f"{', '.join(action.backfilled_over)}, as it should end before their start",
            )
            self.metrics.backfilled.labels(action.subject.queue).inc()
        self._journal(
            action.subject,
            JournalEvent.ADMITTED,
            "Admitted",
            said,
            placement=dict(action.placement),
            requeue_count=int((group.get("status") or {}).get("requeueCount", 0)),
        )
        self.metrics.admitted_gangs.labels(action.subject.queue).inc()
        self.metrics.admission_wait.observe(max(0.0, now - action.created))
        nominated_at = current.status.nominatedAt
        if nominated_at is not None:  # it preempted: its room is given back and taken
            reclaim = self.metrics.reclaim.labels(action.subject.queue)
            reclaim.observe(max(0.0, now - epoch_seconds(nominated_at)))
        for write in action.release:
            await self._write(write)

    @apply.register
    async def _nominate(self, action: act.Nominate) -> None:
        found = self._group_now(action.group, action.group_ref)
        if found is None:
            return
        group, ref = found
        now = self.clock()
        # The preemption began when the gang first took room; taking it again (its room
        # was dropped and found afresh) does not restart the reclaim time.  Stored, so
        # that a restarted controller still knows it.
        held = group.status.nominatedAt if group.status.nominatedPlacement else None
        status: Obj = {
            "phase": "Pending",
            "reason": "Preempting",
            "message": action.message,
            "nominatedPlacement": room_patch(group.status.nominatedPlacement, action.nominated),
            "nominatedAt": iso(epoch_seconds(held) if held is not None else now),
            **action.fields,
            "conditions": conditions_with(
                group, now, ("Admitted", False, "Preempting", action.message)
            ),
        }
        await self._patch(ref, {"status": status}, status=True)
        about = self._about(action.subject, ref)
        await self._events(about, "Preempting", f"{action.reason}: {action.message}")
        self._journal(action.subject, JournalEvent.PENDING, "Preempting", action.message)

    @apply.register
    async def _resume_admission(self, action: act.ResumeAdmission) -> None:
        for write in action.release:
            await self._write(write)

    @apply.register
    async def _bind_member(self, action: act.BindMember) -> None:
        pod = action.pod
        patch: Obj = {
            "spec": {
                "schedulingGates": [g for g in pod.raw_gates if g.get("name") != ADMISSION_GATE]
            }
        }
        if action.node is None:
            await self._patch(pod.ref, patch)
            return
        # A gated pod may gain a nodeSelector (KEP-3838): kube-scheduler still
        # checks the node, but can only put the member where the core planned it.
        patch["spec"]["nodeSelector"] = {**pod.node_selector, HOSTNAME_LABEL: action.node}
        # Its slot is held in flight (reserve) until every write of this batch is done.
        await self._patch(pod.ref, patch)

    @apply.register
    async def _mark_running(self, action: act.MarkRunning) -> None:
        now = self.clock()
        status: Obj = {
            "phase": "Running",
            "running": action.running,
            "reason": "PodsReady",
            "message": f"{action.running} members running",
            "conditions": conditions_with(
                self._latest(action.group, action.group_ref),
                now,
                ("PodsReady", True, "PodsReady", "every member runs"),
            ),
        }
        if action.group.status.runningAt is None:
            status["runningAt"] = iso(now)
            admitted = action.group.status.admittedAt
            if admitted is not None:
                self.metrics.partial_placement.observe(max(0.0, now - epoch_seconds(admitted)))
        await self._patch(action.group_ref, {"status": status}, status=True)
        await self._event(action.group_ref, "PodsReady", f"{action.running} members running")

    @apply.register
    async def _mark_members_lost(self, action: act.MarkMembersLost) -> None:
        now = self.clock()
        message = f"only {action.running} of {action.group.spec.minMember} members running"
        status = {
            "running": action.running,
            "reason": "MembersLost",
            "message": message,
            "conditions": conditions_with(
                self._latest(action.group, action.group_ref),
                now,
                ("PodsReady", False, "MembersLost", message),
            ),
        }
        await self._patch(action.group_ref, {"status": status}, status=True)
        await self._event(action.group_ref, "MembersLost", message, warning=True)

    @apply.register
    async def _replace_nodes(self, action: act.ReplaceNodes) -> None:
        # Conditional, as every status write: a plan that changed meanwhile conflicts, and
        # the next cycle decides again from what it then holds.
        await self._patch(action.group_ref, {"status": dict(action.patch)}, status=True)
        # The journal's placement must stay exact: where the gang runs now.
        placement = action.patch.get("placement") or {}
        self._journal(
            action.subject,
            JournalEvent.REPLACED,
            NODE_REPLACED,
            "; ".join(action.messages),
            placement={node: count for node, count in placement.items() if count},
        )
        for message in action.messages:
            log.info(
                "%s %s/%s: %s",
                NODE_REPLACED,
                action.subject.namespace,
                action.subject.name,
                message,
            )
            await self._events(action.subject.about, NODE_REPLACED, message)

    @apply.register
    async def _evict(self, action: act.Evict) -> None:
        now = self.clock()
        requeue = action.requeue
        if requeue.deactivated:
            note = f"evicted {requeue.count} times, past the queue's backoffLimit: deactivated"
            requeued: Update = ("Requeued", False, "BackoffLimitExceeded", note)
        else:
            note = f"requeued ({requeue.count}); eligible again at {iso(requeue.at)}"
            requeued = ("Requeued", True, "Backoff", note)
        conditions = conditions_with(
            self._latest(action.group, action.group_ref),
            now,
            ("Admitted", False, "Evicted", action.message),
            ("PodsReady", False, action.reason, action.message),
            ("Evicted", True, action.reason, action.message),
            requeued,
        )
        status = {
            "phase": "Failed" if requeue.deactivated else "Evicted",
            "placement": None,  # merge patch: remove
            "podSetPlacement": None,
            "topologyDomain": None,  # the domain goes with the placement
            "topologyAssignment": None,
            "replacedNodes": None,
            "running": 0,
            "requeueCount": requeue.count,
            "requeueAt": None if requeue.deactivated else iso(requeue.at),
            "reason": action.reason,
            "message": action.message,
            "conditions": conditions,
        }
        # The status first: from here the gang holds no quota, whatever happens next.
        # It is then said (events, journal, metrics) before the gang is taken back,
        # which may fail part-way and is finished by later cycles (FinishEviction).
        await self._patch(action.group_ref, {"status": status}, status=True)
        about = action.subject.about
        await self._events(about, "Evicted", f"{action.reason}: {action.message}", warning=True)
        await self._events(
            about,
            "Deactivated" if requeue.deactivated else "Requeued",
            note,
            warning=requeue.deactivated,
        )
        self._journal(
            action.subject,
            JournalEvent.EVICTED,
            action.reason,
            action.message,
            requeue_count=requeue.count,
        )
        self._journal(
            action.subject,
            JournalEvent.DEACTIVATED if requeue.deactivated else JournalEvent.REQUEUED,
            "BackoffLimitExceeded" if requeue.deactivated else "Backoff",
            note,
            requeue_count=requeue.count,
        )
        queue = action.subject.queue
        self.metrics.evicted_gangs.labels(queue, action.reason).inc()
        if action.preemption:
            self.metrics.preemptions.labels(queue, action.preemption).inc()
        if not requeue.deactivated:
            self.metrics.requeued_gangs.labels(queue).inc()
        if action.partial_since is not None:
            self.metrics.partial_placement.observe(max(0.0, now - action.partial_since))
        for write in action.hold:
            await self._write(write)
        await self._delete_pods(action.pods)

    @apply.register
    async def _set_condition(self, action: act.SetCondition) -> None:
        update = (action.condition, action.status, action.reason, action.message)
        latest = self._latest(action.group, action.group_ref)
        status = {"conditions": conditions_with(latest, self.clock(), update)}
        await self._patch(action.group_ref, {"status": status}, status=True)
        await self._event(action.group_ref, action.reason, action.message, warning=action.warning)
        self._journal(action.subject, JournalEvent.FLAGGED, action.reason, action.message)

    @apply.register
    async def _finish_eviction(self, action: act.FinishEviction) -> None:
        for write in action.hold:
            await self._write(write)
        await self._delete_pods(action.pods)
        if action.requeued:
            due = action.group.status.requeueAt
            message = (
                "requeued after eviction; eligible again at "
                f"{iso(epoch_seconds(due)) if due else 'once due'}"
            )
            await self._patch(
                action.group_ref,
                {"status": {"phase": "Pending", "reason": "Requeued", "message": message}},
                status=True,
            )

    @apply.register
    async def _mark_pending(self, action: act.MarkPending) -> None:
        previous = action.group.status.reason if action.group is not None else ""
        found = self._group_now(action.group, action.group_ref)
        if found is None:
            return
        group, ref = found
        now = self.clock()
        status = {
            "phase": "Pending",
            "reason": action.reason,
            "message": action.message,
            "conditions": conditions_with(
                group, now, ("Admitted", False, action.reason, action.message)
            ),
            **action.fields,
        }
        await self._patch(ref, {"status": status}, status=True)
        if action.new_reservation:
            about = self._about(action.subject, ref)
            await self._events(about, "Reserved", action.message)
            self._journal(action.subject, JournalEvent.PENDING, action.reason, action.message)
        elif previous != action.reason:
            invalid = action.verdict == "Invalid"
            about = self._about(action.subject, ref)
            await self._events(
                about,
                "Invalid" if invalid else "Pending",
                f"{action.reason}: {action.message}",
                warning=invalid,
            )
            self._journal(
                action.subject,
                JournalEvent.INVALID if invalid else JournalEvent.PENDING,
                action.reason,
                action.message,
            )

    @apply.register
    async def _mark_finished(self, action: act.MarkFinished) -> None:
        now = self.clock()
        reason = "Succeeded" if action.succeeded else "Failed"
        message = f"the {action.subject.kind} {'completed' if action.succeeded else 'failed'}"
        status = {
            "phase": "Finished",
            "placement": None,
            "podSetPlacement": None,
            "topologyDomain": None,  # the domain goes with the placement
            "topologyAssignment": None,
            "running": 0,
            "reason": reason,
            "message": message,
            "conditions": conditions_with(
                self._latest(action.group, action.group_ref),
                now,
                ("Finished", True, reason, message),
            ),
        }
        await self._patch(action.group_ref, {"status": status}, status=True)
        await self._event(action.group_ref, "Finished", message)
        self._journal(action.subject, JournalEvent.FINISHED, reason, message)

    @apply.register
    async def _delete_orphan(self, action: act.DeleteOrphan) -> None:
        log.info("deleting PodGroup %s: %s", action.group_ref.key, action.why)
        await self._delete(action.group_ref)

    @apply.register
    async def _vanished(self, action: act.Vanished) -> None:
        who = action.subject
        message = f"the {who.kind} was deleted while admitted; its quota is free again"
        log.info("%s %s/%s: %s", who.kind, who.namespace, who.name, message)
        self._journal(who, JournalEvent.FINISHED, "Deleted", message)

    @apply.register
    async def _warn_left_out(self, action: act.WarnLeftOut) -> None:
        await self._event(action.about, LEFT_OUT_REASON, action.message, warning=True)

    @apply.register
    async def _queue_status(self, action: act.QueueStatus) -> None:
        status: dict[str, object] = dict(action.counts)
        if action.fair_sharing is not None:
            status["fairSharing"] = {"admissionFairSharingStatus": action.fair_sharing}
        elif action.drop_fair_sharing:
            status["fairSharing"] = None
        await self._patch(action.queue, {"status": status}, status=True)

    @apply.register
    async def _team_quota_status(self, action: act.TeamQuotaStatus) -> None:
        current = action.current
        status = {
            "used": _replacing_map(current, "used", action.used),
            "borrowed": _replacing_map(current, "borrowed", action.borrowed),
            **action.counts,
        }
        _fair_figure(status, current, action.weighted_share)
        await self._patch(action.quota, {"status": status}, status=True)

    @apply.register
    async def _cohort_status(self, action: act.CohortStatus) -> None:
        current = action.current
        status: dict[str, object] = {
            "subtreeQuota": _replacing_map(current, "subtreeQuota", action.subtree_quota),
            "used": _replacing_map(current, "used", action.used),
        }
        _fair_figure(status, current, action.weighted_share)
        await self._patch(action.cohort, {"status": status}, status=True)


def _replacing_map(
    current: Mapping[str, object], key: str, wanted: Mapping[str, str]
) -> dict[str, str | None]:
    """A merge patch merges maps: resources that left need an explicit null."""
    held = current.get(key)
    gone = dict.fromkeys(held) if isinstance(held, Mapping) else {}
    return gone | dict(wanted)


def _fair_figure(
    status: dict[str, object], current: Mapping[str, object], share: int | None
) -> None:
    if share is not None:
        status["fairSharing"] = {"weightedShare": share}
    elif current.get("fairSharing") is not None:
        status["fairSharing"] = None  # fair sharing turned off: the figure goes
