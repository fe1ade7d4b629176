"""Leader election on a ``coordination.k8s.io`` Lease: only the leader admits.

kopf's peering pauses lower-priority operators but is not leader election, so
every replica watches and keeps its state warm, while admission is gated on
holding the Lease.  The official client's election loop is thread-based; it
runs in a daemon thread and reports into asyncio.  After losing the Lease a
replica stops admitting at once and stands for election again.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from kubernetes.leaderelection import electionconfig
from kubernetes.leaderelection.leaderelection import LeaderElection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from queue_controller.controller.metrics import Metrics
from queue_controller.controller.settings import Settings

log = logging.getLogger(__name__)


class Leadership:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._leading = not settings.leader_election
        self._stopping = threading.Event()
        self.changed = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        metrics.leader.set(1 if self._leading else 0)

    @property
    def leading(self) -> bool:
        return self._leading

    def start(self) -> None:
        if not self.settings.leader_election:
            log.info("leader election off: this replica admits")
            return
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._stand, name="leader-election", daemon=True).start()

    def stop(self) -> None:
        self._stopping.set()

    def _set(self, leading: bool) -> None:
        def update() -> None:
            if self._leading != leading:
                log.info(
                    "%s the lease %s/%s",
                    "acquired" if leading else "lost",
                    self.settings.namespace,
                    self.settings.lease_name,
                )
            self._leading = leading
            self.metrics.leader.set(1 if leading else 0)
            self.changed.set()

        if self._loop is not None:
            self._loop.call_soon_threadsafe(update)

    def _stand(self) -> None:
        s = self.settings
        while not self._stopping.is_set():
            config = electionconfig.Config(
                LeaseLock(s.lease_name, s.namespace, s.identity),  # type: ignore[no-untyped-call]
                lease_duration=s.lease_duration_seconds,
                renew_deadline=s.renew_deadline_seconds,
                retry_period=s.retry_period_seconds,
                onstarted_leading=lambda: self._set(True),
                onstopped_leading=lambda: self._set(False),
            )
            try:
                # run() returns when the lease is lost.
                LeaderElection(config).run()  # type: ignore[no-untyped-call]
            except Exception:  # the library raises on unexpected API answers: stand again
                log.exception("leader election failed; standing again")
            self._set(False)
            self._stopping.wait(s.retry_period_seconds)
