"""The applier's plumbing: conditional writes through the gateway, assumed as they return.

Every write is conditional on the ``resourceVersion`` the decision was made
from.  Every successful write is *assumed*: the object it returns goes into
the state at once, so the next cycle sees it even before its watch event, and
a later write to the same object in this cycle is conditional on the version
this one produced and built on what it returned.  A failed write is simply
forgotten and recomputed next cycle (Kueue's assume, then forget).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

from queue_controller.api.v1alpha1 import PodGroup
from queue_controller.controller import actions as act
from queue_controller.controller.binding import InFlight
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.journal import Entry, Journal, JournalEvent
from queue_controller.kube import gateway as gw
from queue_controller.kube.objects import pod_group
from queue_controller.kube.views import Delete, MemberPod, Patch, Ref, Write

log = logging.getLogger(__name__)
Obj = dict[str, Any]
T = TypeVar("T")

# Threads for the gateway's blocking calls.  asyncio's default pool has a few per core
# (6 on 2 cores); writes wait on the API server, not on a core, so a burst of them
# needs more in flight.  The gateway's connection pool is sized to match.
WRITE_THREADS = 32


class Writer:
    def __init__(
        self,
        gateway: gw.Gateway,
        state: ClusterState,
        journal: Journal | None,
        metrics: Metrics,
        *,
        clock: Callable[[], float],
        in_flight: InFlight | None = None,
        threads: ThreadPoolExecutor | None = None,
    ) -> None:
        self.gateway = gateway
        # Members being released, shared with the other applier (cycles', releaser's).
        self.in_flight = in_flight if in_flight is not None else InFlight()
        self.state = state
        self.journal = journal
        self.metrics = metrics
        self.clock = clock
        # (kind, namespace, name) -> the version our own write in this cycle produced.
        self._written: dict[tuple[str, str, str], str | None] = {}
        # PodGroups as our own writes in this cycle returned them, read once each.
        self._groups: dict[tuple[str, str, str], PodGroup] = {}
        # Shared by the appliers of one process: they share one connection pool too.
        self.threads = threads or ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="write")

    async def _call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # Every write to the API goes through here: counted, so that the writes an
        # admission costs can be measured (and a write storm seen) from /metrics.
        resource = args[0].plural if args and isinstance(args[0], gw.Resource) else "events"
        self.metrics.api_writes.labels(function.__name__, resource).inc()
        call = functools.partial(function, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self.threads, call)

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
        """``group`` as our own write earlier in this cycle left it, if there was one."""
        return self._groups.get((ref.resource.kind, ref.namespace, ref.name), group)

    def _group_now(self, group: PodGroup | None, ref: Ref) -> tuple[PodGroup, Ref] | None:
        """The PodGroup to build a status on, and the ref to write it through.

        As our own write earlier in this cycle left it, if there was one (a merge
        patch replaces ``conditions`` whole, so building on the planned copy would
        undo that write); else as the action was planned on.  ``group`` is None for
        one created in this cycle: None comes back if that create did not succeed.
        """
        if group is not None:
            return self._latest(group, ref), ref
        written = self._groups.get((ref.resource.kind, ref.namespace, ref.name))
        if written is None:
            return None  # the create failed, or was not made: next cycle
        version = written.metadata.resourceVersion or None
        return written, Ref(ref.resource, ref.namespace, ref.name, written.metadata.uid, version)

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

    @staticmethod
    def _about(who: act.Subject, group: Ref) -> tuple[Ref, ...]:
        """Where a gang's events go: its head object, if any, and ``group`` as written now."""
        return (*[r for r in who.about if r.resource.kind != "PodGroup"], group)

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
                kind=who.kind,
                uid=who.uid,
                runtime_class=who.runtime_class,
                **extra,
            )
        )

    async def _delete_pods(self, pods: tuple[MemberPod, ...]) -> None:
        for pod in pods:
            await self._delete(pod.ref)
