"""Carry out the planner's actions through the gateway.

Order within an admission matters for restarts: the PodGroup status
(``Admitted`` with its placement) is written first, then the gang's kind
releases it.  A crash between the two leaves a PodGroup that says Admitted on
a held gang, which the next cycle resumes; it can never leave a running gang
that no PodGroup accounts for.

Every write is conditional on the ``resourceVersion`` the decision was made
from.  Every successful write is *assumed*: the object it returns goes into
the state at once, so the next cycle sees it even before its watch event, and
a later write to the same object in this cycle is conditional on the version
this one produced.  A failed write is simply forgotten and recomputed next
cycle (Kueue's assume, then forget).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import singledispatchmethod
from typing import Any, TypeVar

from queue_controller.api.v1alpha1 import PodGroup
from queue_controller.controller import actions as act
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.controller.status import Update, conditions_with, iso
from queue_controller.journal import Entry, Journal, JournalEvent
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import epoch_seconds
from queue_controller.kube.objects import pod_group
from queue_controller.kube.resources import ADMISSION_GATE, HOSTNAME_LABEL
from queue_controller.kube.views import Delete, Patch, Ref, Write

log = logging.getLogger(__name__)
Obj = dict[str, Any]
T = TypeVar("T")


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
        # (kind, namespace, name) -> the version our own write in this cycle produced.
        self._written: dict[tuple[str, str, str], str | None] = {}
        # PodGroups as our own writes in this cycle returned them, read once each.
        self._groups: dict[tuple[str, str, str], PodGroup] = {}

    async def apply_all(self, actions: list[act.Action]) -> int:
        """Apply in order; a failed action is logged and skipped.  Returns how many failed."""
        self._written.clear()
        self._groups.clear()
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

    def _version(self, ref: Ref) -> str | None:
        """The version to write against: ours if we wrote it this cycle, else the ref's."""
        key = (ref.resource.kind, ref.namespace, ref.name)
        return self._written.get(key, ref.resource_version)

    def _assume(self, updated: Obj) -> None:
        """Hold what a write returned, and write against its version from now on.

        A PodGroup that came back is read once, here: a later status write in this
        cycle builds on it (a merge patch replaces ``conditions`` whole, so building
        on the planned copy would undo this write).
        """
        meta = updated.get("metadata") or {}
        key = (str(updated.get("kind", "")), meta.get("namespace") or "", meta.get("name", ""))
        self._written[key] = meta.get("resourceVersion")
        if key[0] == "PodGroup":
            self._groups[key] = pod_group(updated)
        self.state.upsert(updated)

    def _latest(self, group: PodGroup, ref: Ref) -> PodGroup:
        """The PodGroup to build a status on: as our own write earlier in this cycle left
        it, else as the action was planned on."""
        return self._groups.get((ref.resource.kind, ref.namespace, ref.name), group)

    def _just_created(self, ref: Ref) -> tuple[PodGroup, Ref] | None:
        """A PodGroup created earlier in this cycle, as its create returned it."""
        model = self._groups.get((ref.resource.kind, ref.namespace, ref.name))
        if model is None:
            return None  # the create failed, or was not made: next cycle
        version = model.metadata.resourceVersion or None
        return model, Ref(ref.resource, ref.namespace, ref.name, model.metadata.uid, version)

    async def _patch(self, ref: Ref, patch: Obj, *, status: bool = False) -> Obj:
        updated = await self._call(
            self.gateway.patch,
            ref.resource,
            ref.namespace,
            ref.name,
            patch,
            resource_version=self._version(ref),
            subresource="status" if status else "",
        )
        updated.setdefault("kind", ref.resource.kind)
        updated.setdefault("apiVersion", ref.resource.api_version)
        self._assume(updated)
        return updated

    async def _delete(self, ref: Ref) -> None:
        await self._call(self.gateway.delete, ref.resource, ref.namespace, ref.name)

    async def _write(self, write: Write) -> None:
        """A write a workload kind spelled (suspend, release, delete a member)."""
        if isinstance(write, Patch):
            await self._patch(write.ref, write.body)
        elif isinstance(write, Delete):
            await self._delete(write.ref)

    async def _event(self, about: Ref, reason: str, message: str, *, warning: bool = False) -> None:
        try:
            await self._call(
                self.gateway.event, about.about(), reason=reason, message=message, warning=warning
            )
        except gw.GatewayError as error:  # events are best effort
            log.debug("event %s not posted: %s", reason, error)

    async def _events(
        self, refs: tuple[Ref, ...], reason: str, message: str, *, warning: bool = False
    ) -> None:
        for ref in refs:
            await self._event(ref, reason, message, warning=warning)

    def _journal(
        self,
        who: act.Subject,
        event: JournalEvent,
        reason: str,
        message: str = "",
        **extra: Any,
    ) -> None:
        if self.journal is None:
            return
        self.journal.record(
            Entry(
                at=datetime.now(UTC),
                namespace=who.namespace,
                name=who.name,
                queue=who.queue.split("/", 1)[-1],
                event=event,
                reason=reason,
                message=message,
                uid=who.uid,
                **extra,
            )
        )

    async def _delete_pods(self, pods: tuple[Any, ...]) -> None:
        for pod in pods:
            await self._delete(pod.ref)

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
        ref, current = action.group_ref, action.group
        if current is None:
            created = self._just_created(ref)
            if created is None:
                return
            current, ref = created
        current = self._latest(current, ref)
        now = self.clock()
        status: Obj = {
            "phase": "Admitted",
            "placement": dict(action.placement),
            "podSetPlacement": {k: dict(v) for k, v in action.pod_set_placement.items()} or None,
            "admittedAt": iso(now),
            "running": 0,
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
        for write in action.release:
            await self._write(write)
        placed = ", ".join(f"{node}: {n}" for node, n in sorted(action.placement.items()))
        about = (*[r for r in action.subject.about if r.resource.kind != "PodGroup"], ref)
        await self._events(about, "Admitted", f"{action.message} ({placed})")
        self._journal(
            action.subject,
            JournalEvent.ADMITTED,
            "Admitted",
            action.message,
            placement=dict(action.placement),
            requeue_count=int((group.get("status") or {}).get("requeueCount", 0)),
        )
        self.metrics.admitted_gangs.labels(action.subject.queue).inc()
        self.metrics.admission_wait.observe(max(0.0, now - action.created))

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
        if action.node is not None:
            # A gated pod may gain a nodeSelector (KEP-3838): kube-scheduler still
            # checks the node, but can only put the member where the core planned it.
            patch["spec"]["nodeSelector"] = {**pod.node_selector, HOSTNAME_LABEL: action.node}
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
            "running": 0,
            "requeueCount": requeue.count,
            "requeueAt": None if requeue.deactivated else iso(requeue.at),
            "reason": action.reason,
            "message": action.message,
            "conditions": conditions,
        }
        # The status first: from here the gang holds no quota, whatever happens next.
        await self._patch(action.group_ref, {"status": status}, status=True)
        for write in action.hold:
            await self._write(write)
        await self._delete_pods(action.pods)
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
        if not requeue.deactivated:
            self.metrics.requeued_gangs.labels(queue).inc()
        if action.partial_since is not None:
            self.metrics.partial_placement.observe(max(0.0, now - action.partial_since))

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
        ref, group = action.group_ref, action.group
        previous = group.status.reason if group is not None else ""
        if group is None:
            created = self._just_created(ref)
            if created is None:
                return
            group, ref = created
        group = self._latest(group, ref)
        now = self.clock()
        status = {
            "phase": "Pending",
            "reason": action.reason,
            "message": action.message,
            "conditions": conditions_with(
                group, now, ("Admitted", False, action.reason, action.message)
            ),
        }
        await self._patch(ref, {"status": status}, status=True)
        if previous != action.reason:
            invalid = action.verdict == "Invalid"
            about = (*[r for r in action.subject.about if r.resource.kind != "PodGroup"], ref)
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
    async def _queue_status(self, action: act.QueueStatus) -> None:
        await self._patch(action.queue, {"status": dict(action.counts)}, status=True)

    @apply.register
    async def _team_quota_status(self, action: act.TeamQuotaStatus) -> None:
        current = action.current

        def replacing(key: str, wanted: Mapping[str, str]) -> dict[str, str | None]:
            # A merge patch merges maps: resources that left need an explicit null.
            held = current.get(key)
            gone = dict.fromkeys(held) if isinstance(held, Mapping) else {}
            return gone | dict(wanted)

        status = {
            "used": replacing("used", action.used),
            "borrowed": replacing("borrowed", action.borrowed),
            **action.counts,
        }
        await self._patch(action.quota, {"status": status}, status=True)
