"""Jobs that got past the webhook in a managed namespace, queued after the fact.

The webhook queues an unlabelled accelerator Job in a managed namespace as it is
created (controller/handlers.py, kube/kinds/managed.py).  Some are not: a Job made
while no controller answered a webhook registered with ``failurePolicy: Ignore`` (the
local webhook always is), one made before the controller or the setting was there,
one in a namespace labelled managed since.  Kueue's reconciler suspends such jobs
(``manageJobsWithoutQueueName``: "this also applies to jobs created before starting the
kueue controller"); so does this.  Every Job the watch brings (kopf's first listing
included) is offered; one that :func:`kinds.queue_by_default` would have queued, not
finished, in a managed namespace, is patched as the webhook would have patched it: the
queue label ``default`` and ``spec.suspend: true``.  Suspended, the Job controller
deletes its pods; from then on it is an ordinary queued Job.

Only Jobs: a Pod cannot be gated once created.  An unlabelled accelerator Pod in a
managed namespace is for the admission policies to refuse (the chart's).

Only the leader writes, each patch conditional on the version the watch saw: a Job
changed meanwhile conflicts and is offered again by its next event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from queue_controller.controller.leader import Leadership
from queue_controller.kube import gateway as gw
from queue_controller.kube import kinds
from queue_controller.kube.kinds.batchjob import FINISHED_CONDITIONS

log = logging.getLogger(__name__)
_Key = tuple[str, str]  # (namespace, name)


def _finished(job: Mapping[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, Mapping)
        and c.get("status") == "True"
        and c.get("type") in FINISHED_CONDITIONS
        for c in conditions
    )


class Adopter:
    def __init__(
        self,
        *,
        gateway: gw.Gateway,
        leadership: Leadership,
        managed: Callable[[str], bool],
    ) -> None:
        self.gateway, self.leadership, self.managed = gateway, leadership, managed
        self._waiting: dict[_Key, tuple[str, dict[str, Any]]] = {}  # -> (resourceVersion, patch)
        self._lock = threading.Lock()  # offer() and adopt() share the loop today; cheap
        self.adopted = 0

    def offer(self, job: Mapping[str, Any]) -> None:
        """Take note of ``job`` (a watch event's object) if it is to be queued."""
        meta = job.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if not namespace or not name or meta.get("deletionTimestamp") or _finished(job):
            return
        patch = kinds.queue_by_default(gw.JOB, dict(job))
        if not patch or not self.managed(namespace):
            return
        with self._lock:
            self._waiting[(namespace, name)] = (str(meta.get("resourceVersion") or ""), dict(patch))

    def _take(self) -> dict[_Key, tuple[str, dict[str, Any]]]:
        with self._lock:
            taken, self._waiting = self._waiting, {}
        return taken

    async def adopt(self) -> int:
        """Patch every Job offered since the last call; how many were queued."""
        waiting = self._take()
        if not self.leadership.leading:
            return 0
        done = 0
        for (namespace, name), (version, patch) in sorted(waiting.items()):
            try:
                await asyncio.to_thread(
                    self.gateway.patch, gw.JOB, namespace, name, patch, resource_version=version
                )
            except (gw.Conflict, gw.NotFound):
                continue  # changed or gone: its next event offers it again, if still ours
            except gw.GatewayError as error:
                log.warning("could not queue Job %s/%s: %s", namespace, name, error)
                continue
            done += 1
            log.info(
                "queued Job %s/%s in Queue %s: it asks for an accelerator in a managed "
                "namespace and came without a queue label",
                namespace,
                name,
                kinds.DEFAULT_QUEUE,
            )
        self.adopted += done
        return done

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            # Offers come from other threads; a second's delay is nothing next to a
            # Job that already got past the webhook.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)
            try:
                await self.adopt()
            except Exception:  # a bug here must not end the controller
                log.exception("queueing Jobs that got past the webhook failed")
