"""Leader election that cannot even start says why, once, in the log, /readyz and a metric."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from aiohttp import ClientSession
from kubernetes.client.exceptions import ApiException

from queue_controller.controller.leader import Leadership, describe_lease_error
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.server import Health, HealthServer
from queue_controller.controller.settings import Settings


def refused(status: int, reason: str) -> ApiException:
    return ApiException(status=status, reason=reason)


def test_a_missing_namespace_is_named_with_what_to_do() -> None:
    reason, message = describe_lease_error(
        refused(404, "Not Found"), namespace="qc-system", name="queue-controller"
    )
    assert reason == "NamespaceNotFound"
    assert "namespace qc-system does not exist" in message
    assert "kubectl create namespace qc-system" in message


def test_a_forbidden_lease_names_the_rbac_to_grant() -> None:
    reason, message = describe_lease_error(
        refused(403, "Forbidden"), namespace="qc-system", name="queue-controller"
    )
    assert reason == "Forbidden"
    assert "leases.coordination.k8s.io in qc-system" in message


def test_each_cause_is_logged_once_and_counted_every_time(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    leadership = Leadership(Settings(namespace="qc-system"), metrics)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            leadership._report(refused(404, "Not Found"))
    assert len([r for r in caplog.records if "does not exist" in r.getMessage()]) == 1
    sample = metrics.registry.get_sample_value(
        "queue_controller_leader_election_errors_total", {"reason": "NamespaceNotFound"}
    )
    assert sample == 3
    assert "does not exist" in leadership.blocked
    leadership._set(True)  # it took the Lease after all
    assert leadership.blocked == ""


def test_readyz_is_503_while_the_lease_is_refused() -> None:
    async def ask(details: dict[str, object]) -> tuple[int, dict[str, object]]:
        server = HealthServer(
            host="127.0.0.1",
            port=0,
            metrics=Metrics(),
            health=Health(ready=True),
            details=lambda: details,
        )
        await server.start()
        try:
            url = f"http://127.0.0.1:{server.port}/readyz"
            async with ClientSession() as session, session.get(url) as answer:
                return answer.status, json.loads(await answer.text())
        finally:
            await server.stop()

    status, body = asyncio.run(ask({"leader": False, "leaderElection": "cannot hold ..."}))
    assert (status, body["ready"]) == (503, False)
    status, body = asyncio.run(ask({"leader": False}))  # a standby: ready
    assert (status, body["ready"]) == (200, True)
