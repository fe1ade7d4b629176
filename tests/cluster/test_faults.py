"""Faults on the real control plane, each with ``check`` in the background (conftest):
the controller says what is wrong, keeps going, and loses nothing."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
from kubernetes import client

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster


def test_a_controller_that_cannot_hold_its_lease_says_so_and_retries(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    journal_url: str,
    tmp_path: Path,
) -> None:
    missing = f"qc-lease-{secrets.token_hex(3)}"
    lonely = ControllerProcess(
        kubeconfig=cluster.kubeconfig,
        journal=journal_url,
        logs=tmp_path,
        identity="qc-lonely",
        webhook="off",
        extra_args=("--namespace", missing),  # the last --namespace wins
    )
    # The session's controller stands down, so that only the lonely one could admit.
    controller.stop()
    try:
        lonely.start(ready=False)
        objects.queue("q", objects.team_quota(8))
        create(cluster, namespace, job("waits", queue="q", gpus=1, pods=1, nodes=h100(4)))
        answer = eventually(
            lambda: (r := lonely.readyz()) and r.get("leaderElection") and r,
            timeout=30,
            what="/readyz saying why it cannot lead",
        )
        assert answer["ready"] is False
        assert f"namespace {missing} does not exist" in answer["leaderElection"]
        assert (
            lonely.metric(
                "queue_controller_leader_election_errors_total", reason="NamespaceNotFound"
            )
            >= 1
        )
        assert f"namespace {missing} does not exist" in lonely.log_tail(200)
        time.sleep(3)
        assert objects.phase("waits", "Admitted", "Running") is None, "nothing admitted meanwhile"
        # It goes on retrying: once the namespace exists it leads, and admits.
        cluster.core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=missing))
        )
        eventually(lambda: (r := lonely.readyz()) and r.get("leader"), timeout=30, what="leading")
        ready = lonely.readyz()
        assert ready is not None
        assert ready["ready"] is True
        assert "leaderElection" not in ready
        eventually(lambda: objects.phase("waits", "Running"), timeout=60, what="admitted")
    finally:
        lonely.stop()
        cluster.core.delete_namespace(missing)
        controller.start()


def test_a_job_created_while_no_controller_runs_is_queued_once_it_is_back(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    """Run locally, the webhook is registered with failurePolicy Ignore: the Job is
    created as written, unsuspended.  The controller, once back, holds it (suspends
    it, its pods go) and queues it like any other; it is then admitted whole."""
    objects.queue("q", objects.team_quota(8))
    controller.stop()
    try:
        body = job("early", queue="q", gpus=2, pods=2, nodes=h100(5))
        created = create(cluster, namespace, body)
        assert created["spec"].get("suspend") in (None, False), "no webhook answered"
    finally:
        controller.start()
    group = eventually(lambda: objects.pod_group("early"), timeout=30, what="its PodGroup")
    assert group["spec"]["minMember"] == 2
    eventually(lambda: objects.phase("early", "Running"), timeout=60, what="admitted whole")
    # It was held first (suspended as found running unadmitted), then admitted.
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=early"
    )
    assert "Suspended" in events
    assert "Admitted" in events
    released = cluster.batch.read_namespaced_job("early", namespace)
    assert released.spec.suspend is False
