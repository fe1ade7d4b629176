"""Carry out the planner's actions through the gateway.

Order within an admission matters for restarts: the PodGroup status
(``Admitted`` with its placement) is written first, then the Job is gated and
unsuspended.  A crash between the two leaves a PodGroup that says Admitted on
a suspended Job, which the next cycle resumes; it can never leave a running
Job that no PodGroup accounts for.  Every successful write is *assumed* into
the state at once, so the next cycle sees it even before its watch event;
a failed write is simply forgotten and recomputed next cycle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import singledispatchmethod
from typing import Any, TypeVar

from queue_controller.controller import actions as act
from queue_controller.controller.lifecycle import GATE, HOSTNAME
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.controller.status import Update, conditions_with, iso
from queue_controller.journal import Entry, Journal, JournalEvent
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import timestamp

log = logging.getLogger(__name__)
Obj = dict[str, Any]
T = TypeVar("T")


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, str | None]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta["name"], meta.get("resourceVersion")


class Applier:
    def __init__(
        self,
        gateway: gw.Gateway,
        state: ClusterState,
        journal: Journal | None,
        metrics: Metrics,
        *,
        clock: Callable[[], float],
    ) -> None:
        self.gateway = gateway
        self.state = state
        self.journal = journal
        self.metrics = metrics
        self.clock = clock

    async def apply_all(self, actions: list[act.Action]) -> int:
        """Apply in order; a failed action is logged and skipped.  Returns how many failed."""
        failed = 0
        for action in actions:
            try:
                await self.apply(action)
            except gw.Conflict as error:
                log.debug("conflict, retrying next cycle: %s", error)
                failed += 1
            except gw.GatewayError as error:
                log.warning("could not %s: %s", type(action).__name__, error)
                failed += 1
        return failed

    # -- plumbing ------------------------------------------------------------------

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(function, *args, **kwargs)

    async def _patch(
        self, kind: gw.Kind, obj: Mapping[str, Any], patch: Obj, *, status: bool = False
    ) -> Obj:
        namespace, name, version = _meta(obj)
        updated = await self._call(
            self.gateway.patch,
            kind,
            namespace,
            name,
            patch,
            resource_version=version,
            subresource="status" if status else "",
        )
        self.state.upsert(updated)
        return updated

    def _latest(self, kind: str, obj: Mapping[str, Any]) -> Obj | None:
        namespace, name, _ = _meta(obj)
        return self.state.get(kind, namespace, name)

    async def _event(
        self, about: Mapping[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        try:
            await self._call(
                self.gateway.event, about, reason=reason, message=message, warning=warning
            )
        except gw.GatewayError as error:  # events are best effort
            log.debug("event %s not posted: %s", reason, error)

    def _journal(
        self,
        job: Mapping[str, Any],
        queue: str,
        event: JournalEvent,
        reason: str,
        message: str = "",
        **extra: Any,
    ) -> None:
        if self.journal is None:
            return
        meta = job["metadata"]
        self.journal.record(
            Entry(
                at=datetime.now(UTC),
                namespace=meta.get("namespace", ""),
                name=meta["name"],
                queue=queue.split("/", 1)[-1],
                event=event,
                reason=reason,
                message=message,
                uid=meta.get("uid", ""),
                **extra,
            )
        )

    async def _delete_pods(self, pods: tuple[Obj, ...]) -> None:
        for pod in pods:
            namespace, name, _ = _meta(pod)
            await self._call(self.gateway.delete, gw.POD, namespace, name)

    # -- actions -------------------------------------------------------------------

    @singledispatchmethod
    async def apply(self, action: act.Action) -> None:
        raise NotImplementedError(type(action).__name__)

    @apply.register
    async def _(self, action: act.CreatePodGroup) -> None:
        namespace = action.body["metadata"]["namespace"]
        try:
            created = await self._call(self.gateway.create, gw.POD_GROUP, namespace, action.body)
        except gw.Conflict:
            return  # one of that name exists (an old Job's, about to be collected): next cycle
        self.state.upsert(created)

    @apply.register
    async def _(self, action: act.SuspendUnadmitted) -> None:
        await self._patch(gw.JOB, action.job, {"spec": {"suspend": True}})
        await self._delete_pods(action.pods)
        await self._event(
            action.job,
            "Suspended",
            "the Job started without being admitted by its queue; it is suspended until its "
            "whole gang fits",
            warning=True,
        )

    @apply.register
    async def _(self, action: act.Admit) -> None:
        group = self.state.get(
            "PodGroup", action.job["metadata"].get("namespace", ""), action.group_name
        )
        if group is None:
            return  # created this cycle and not back yet: admit next cycle
        now = self.clock()
        status = {
            "phase": "Admitted",
            "placement": dict(action.placement),
            "admittedAt": iso(now),
            "running": 0,
            "reason": "Admitted",
            "message": action.message,
            "conditions": conditions_with(
                group,
                now,
                ("Admitted", True, "Admitted", action.message),
                ("PodsReady", False, "WaitingForPods", "waiting for every member to run"),
            ),
        }
        group = await self._patch(gw.POD_GROUP, group, {"status": status}, status=True)
        await self._gate_and_resume(action.job)
        placed = ", ".join(f"{node}: {n}" for node, n in sorted(action.placement.items()))
        for about in (action.job, group):
            await self._event(about, "Admitted", f"{action.message} ({placed})")
        self._journal(
            action.job,
            action.queue,
            JournalEvent.ADMITTED,
            "Admitted",
            action.message,
            placement=dict(action.placement),
            requeue_count=int(group.get("status", {}).get("requeueCount", 0)),
        )
        self.metrics.admitted_gangs.labels(action.queue).inc()
        self.metrics.admission_wait.observe(max(0.0, now - action.created))

    async def _gate_and_resume(self, job: Obj) -> None:
        latest = self._latest("Job", job) or job
        template = latest.get("spec", {}).get("template", {}).get("spec", {})
        gates = [g for g in template.get("schedulingGates", []) if g.get("name") != GATE]
        patch = {
            "spec": {
                "suspend": False,
                "template": {"spec": {"schedulingGates": [*gates, {"name": GATE}]}},
            }
        }
        await self._patch(gw.JOB, latest, patch)

    @apply.register
    async def _(self, action: act.ResumeAdmission) -> None:
        await self._gate_and_resume(action.job)

    @apply.register
    async def _(self, action: act.BindMember) -> None:
        spec = action.pod.get("spec", {})
        patch: Obj = {
            "spec": {
                "schedulingGates": [
                    g for g in spec.get("schedulingGates", []) if g.get("name") != GATE
                ]
            }
        }
        if action.node is not None:
            # A gated pod may gain a nodeSelector (KEP-3838): kube-scheduler still
            # checks the node, but can only put the member where the core planned it.
            patch["spec"]["nodeSelector"] = {**spec.get("nodeSelector", {}), HOSTNAME: action.node}
        await self._patch(gw.POD, action.pod, patch)

    @apply.register
    async def _(self, action: act.MarkRunning) -> None:
        now = self.clock()
        status: Obj = {
            "phase": "Running",
            "running": action.running,
            "reason": "PodsReady",
            "message": f"{action.running} members running",
            "conditions": conditions_with(
                action.group, now, ("PodsReady", True, "PodsReady", "every member runs")
            ),
        }
        if not action.group.get("status", {}).get("runningAt"):
            status["runningAt"] = iso(now)
            admitted = timestamp(action.group, "status.admittedAt")
            if admitted is not None:
                self.metrics.partial_placement.observe(max(0.0, now - admitted))
        group = await self._patch(gw.POD_GROUP, action.group, {"status": status}, status=True)
        await self._event(group, "PodsReady", f"{action.running} members running")

    @apply.register
    async def _(self, action: act.MarkMembersLost) -> None:
        now = self.clock()
        message = f"only {action.running} of {action.group['spec']['minMember']} members running"
        status = {
            "running": action.running,
            "reason": "MembersLost",
            "message": message,
            "conditions": conditions_with(
                action.group, now, ("PodsReady", False, "MembersLost", message)
            ),
        }
        group = await self._patch(gw.POD_GROUP, action.group, {"status": status}, status=True)
        await self._event(group, "MembersLost", message, warning=True)

    @apply.register
    async def _(self, action: act.Evict) -> None:
        now = self.clock()
        requeue = action.requeue
        if requeue.deactivated:
            note = f"evicted {requeue.count} times, past the queue's backoffLimit: deactivated"
            requeued: Update = ("Requeued", False, "BackoffLimitExceeded", note)
        else:
            note = f"requeued ({requeue.count}); eligible again at {iso(requeue.at)}"
            requeued = ("Requeued", True, "Backoff", note)
        conditions = conditions_with(
            action.group,
            now,
            ("Admitted", False, "Evicted", action.message),
            ("PodsReady", False, action.reason, action.message),
            ("Evicted", True, action.reason, action.message),
            requeued,
        )
        status = {
            "phase": "Failed" if requeue.deactivated else "Evicted",
            "placement": None,  # merge patch: remove
            "running": 0,
            "requeueCount": requeue.count,
            "requeueAt": None if requeue.deactivated else iso(requeue.at),
            "reason": action.reason,
            "message": action.message,
            "conditions": conditions,
        }
        group = await self._patch(gw.POD_GROUP, action.group, {"status": status}, status=True)
        await self._patch(
            gw.JOB, self._latest("Job", action.job) or action.job, {"spec": {"suspend": True}}
        )
        await self._delete_pods(action.pods)
        for about in (action.job, group):
            await self._event(about, "Evicted", f"{action.reason}: {action.message}", warning=True)
            await self._event(
                about,
                "Deactivated" if requeue.deactivated else "Requeued",
                note,
                warning=requeue.deactivated,
            )
        self._journal(
            action.job,
            action.queue,
            JournalEvent.EVICTED,
            action.reason,
            action.message,
            requeue_count=requeue.count,
        )
        self._journal(
            action.job,
            action.queue,
            JournalEvent.DEACTIVATED if requeue.deactivated else JournalEvent.REQUEUED,
            "BackoffLimitExceeded" if requeue.deactivated else "Backoff",
            note,
            requeue_count=requeue.count,
        )
        self.metrics.evicted_gangs.labels(action.queue, action.reason).inc()
        if not requeue.deactivated:
            self.metrics.requeued_gangs.labels(action.queue).inc()
        if action.partial_since is not None:
            self.metrics.partial_placement.observe(max(0.0, now - action.partial_since))

    @apply.register
    async def _(self, action: act.SetCondition) -> None:
        update = (action.kind, action.status, action.reason, action.message)
        status = {"conditions": conditions_with(action.group, self.clock(), update)}
        group = await self._patch(gw.POD_GROUP, action.group, {"status": status}, status=True)
        await self._event(group, action.reason, action.message, warning=action.warning)
        self._journal(
            action.job, group["spec"]["queue"], JournalEvent.FLAGGED, action.reason, action.message
        )

    @apply.register
    async def _(self, action: act.FinishEviction) -> None:
        job = self._latest("Job", action.job) or action.job
        if not job.get("spec", {}).get("suspend"):
            await self._patch(gw.JOB, job, {"spec": {"suspend": True}})
        await self._delete_pods(action.pods)
        if action.requeued:
            status = action.group.get("status", {})
            message = (
                f"requeued after eviction; eligible again at {status.get('requeueAt', 'once due')}"
            )
            await self._patch(
                gw.POD_GROUP,
                action.group,
                {"status": {"phase": "Pending", "reason": "Requeued", "message": message}},
                status=True,
            )

    @apply.register
    async def _(self, action: act.MarkPending) -> None:
        group = self._latest("PodGroup", action.group)
        if group is None:
            return
        now = self.clock()
        previous = group.get("status", {}).get("reason")
        status = {
            "phase": "Pending",
            "reason": action.reason,
            "message": action.message,
            "conditions": conditions_with(
                group, now, ("Admitted", False, action.reason, action.message)
            ),
        }
        group = await self._patch(gw.POD_GROUP, group, {"status": status}, status=True)
        if previous != action.reason:
            invalid = action.verdict == "Invalid"
            for about in (action.job, group):
                await self._event(
                    about,
                    "Invalid" if invalid else "Pending",
                    f"{action.reason}: {action.message}",
                    warning=invalid,
                )
            self._journal(
                action.job,
                action.queue,
                JournalEvent.INVALID if invalid else JournalEvent.PENDING,
                action.reason,
                action.message,
            )

    @apply.register
    async def _(self, action: act.MarkFinished) -> None:
        now = self.clock()
        reason = "Succeeded" if action.succeeded else "Failed"
        message = f"the Job {'completed' if action.succeeded else 'failed'}"
        status = {
            "phase": "Finished",
            "placement": None,
            "running": 0,
            "reason": reason,
            "message": message,
            "conditions": conditions_with(action.group, now, ("Finished", True, reason, message)),
        }
        group = await self._patch(gw.POD_GROUP, action.group, {"status": status}, status=True)
        await self._event(group, "Finished", message)
        self._journal(action.job, action.queue, JournalEvent.FINISHED, reason, message)

    @apply.register
    async def _(self, action: act.QueueStatus) -> None:
        namespace, name, _ = _meta(action.queue)
        updated = await self._call(
            self.gateway.patch,
            gw.QUEUE,
            namespace,
            name,
            {"status": dict(action.counts)},
            subresource="status",
        )
        self.state.upsert(updated)

    @apply.register
    async def _(self, action: act.TeamQuotaStatus) -> None:
        current = action.quota.get("status") or {}
        # A merge patch merges maps: resources that left need an explicit null.
        used: dict[str, str | None] = dict.fromkeys(current.get("used", {})) | dict(action.used)
        borrowed: dict[str, str | None] = dict.fromkeys(current.get("borrowed", {})) | dict(
            action.borrowed
        )
        status = {"used": used, "borrowed": borrowed, **action.counts}
        updated = await self._call(
            self.gateway.patch,
            gw.TEAM_QUOTA,
            "",
            action.quota["metadata"]["name"],
            {"status": status},
            subresource="status",
        )
        self.state.upsert(updated)
