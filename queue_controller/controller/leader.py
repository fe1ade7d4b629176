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
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig
from kubernetes.leaderelection.leaderelection import LeaderElection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from queue_controller.controller.metrics import Metrics
from queue_controller.controller.settings import Settings

log = logging.getLogger(__name__)


class _ReportingLeaseLock(LeaseLock):
    """The client's Lease lock, telling why it cannot take the Lease.

    The client logs a failed create or update at INFO on its own logger and
    tries again for ever; a controller whose Lease namespace is missing, or
    whose RBAC denies Leases, then sits silent and admits nothing.  This lock
    hands each failure to ``report`` instead.
    """

    def __init__(self, name: str, namespace: str, identity: str, report: Any) -> None:
        super().__init__(name, namespace, identity)  # type: ignore[no-untyped-call]
        self._report = report

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        found, record = super().get(name, namespace)  # type: ignore[no-untyped-call]
        if not found and isinstance(record, ApiException) and record.status != 404:
            self._report(record)  # not a Lease yet to create: something else is wrong
        return found, record

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        try:
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=name),
                spec=self.get_lease_spec(election_record),  # type: ignore[no-untyped-call]
            )
            self.lease_reference = self.api_instance.create_namespaced_lease(namespace, body)
        except ApiException as error:
            self._report(error)
            return False
        return True


def describe_lease_error(error: ApiException, *, namespace: str, name: str) -> tuple[str, str]:
    """(reason, message) for a Lease the API server refused: what is wrong and what to do."""
    lease = f"the Lease {namespace}/{name}"
    if error.status == 404:
        return "NamespaceNotFound", (
            f"cannot hold {lease}: namespace {namespace} does not exist; create it "
            f"(kubectl create namespace {namespace}) or set --namespace / QC_NAMESPACE to one "
            "that does. No gang is admitted until this replica holds the Lease"
        )
    if error.status in (401, 403):
        return "Forbidden", (
            f"cannot hold {lease}: the API server refuses it ({error.reason}); grant get, "
            f"create and update on leases.coordination.k8s.io in {namespace} (the chart's "
            "Role does). No gang is admitted until this replica holds the Lease"
        )
    return "APIError", f"cannot hold {lease}: the API server answered {error.status} {error.reason}"


class Leadership:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        # Why this replica cannot take the Lease at all (not: another replica holds it).
        self.blocked: str = ""
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

    def _report(self, error: ApiException) -> None:
        """From the election thread: the API server refused the Lease."""
        reason, message = describe_lease_error(
            error, namespace=self.settings.namespace, name=self.settings.lease_name
        )
        self.metrics.leader_election_errors.labels(reason).inc()
        if message != self.blocked:
            log.error("%s", message)  # once per distinct cause, not once per retry
        self.blocked = message

    def _set(self, leading: bool) -> None:
        if leading:
            self.blocked = ""

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
            config = electionconfig.Config(  # type: ignore[no-untyped-call]
                _ReportingLeaseLock(s.lease_name, s.namespace, s.identity, self._report),
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
