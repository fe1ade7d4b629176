"""Queueing enforced in managed namespaces, on the real control plane (issue 22).

A controller started with ``--managed-namespace-selector`` (its local webhook, as the
chart's would in a cluster): in a namespace the selector picks, an unlabelled Job that
asks for a GPU is queued in the namespace's Queue ``default`` as it is created, and
waits ``QueueNotFound`` where there is none; CPU-only Jobs, and every Job of an
unmanaged namespace, run untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import Objects, create, eventually, h100, job, pods_of

pytestmark = pytest.mark.cluster

MANAGED_LABEL = "queue-controller.io/managed-test"
QUEUE_LABEL = "queue-controller.io/queue"
GATE = "queue-controller.io/admission"


@pytest.fixture
def managing(
    cluster: Cluster, controller: ControllerProcess, journal_url: str, tmp_path: Path
) -> Iterator[ControllerProcess]:
    """The session's controller, stood down for one that manages namespaces."""
    controller.stop()
    managing = ControllerProcess(
        kubeconfig=cluster.kubeconfig,
        journal=journal_url,
        logs=tmp_path,
        identity="qc-managing",
        extra_args=("--managed-namespace-selector", f"{MANAGED_LABEL}=true"),
    )
    try:
        managing.start()
        yield managing
    finally:
        managing.stop()
        controller.start()


def managed(cluster: Cluster, namespace: str) -> None:
    cluster.core.patch_namespace(namespace, {"metadata": {"labels": {MANAGED_LABEL: "true"}}})


def unlabelled(name: str, *, gpus: int, node: int) -> dict[str, Any]:
    body = job(name, queue="", gpus=gpus, pods=1, nodes=h100(node), runs_for="1h")
    del body["metadata"]["labels"]
    if not gpus:
        limits = body["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        limits.clear()
        limits["cpu"] = "100m"
    return body


def runs_untouched(cluster: Cluster, namespace: str, name: str, created: dict[str, Any]) -> None:
    assert QUEUE_LABEL not in (created["metadata"].get("labels") or {})
    assert not created["spec"].get("suspend")
    pods = eventually(lambda: pods_of(cluster, namespace, name), timeout=60, what="its pod")
    assert all(GATE not in [g.name for g in (p.spec.scheduling_gates or [])] for p in pods), (
        "an untouched Job's pods carry no admission gate"
    )
    assert eventually(
        lambda: any(p.status.phase == "Running" for p in pods_of(cluster, namespace, name)),
        timeout=60,
        what="its pod running",
    )


def test_an_unlabelled_gpu_job_in_a_managed_namespace_is_admitted_through_default(
    cluster: Cluster, namespace: str, objects: Objects, managing: ControllerProcess
) -> None:
    managed(cluster, namespace)
    objects.queue("default", objects.team_quota(8))
    created = create(cluster, namespace, unlabelled("train", gpus=2, node=4))
    # Held from creation, by the webhook: labelled for `default`, suspended.
    assert created["metadata"]["labels"] == {QUEUE_LABEL: "default"}
    assert created["spec"]["suspend"] is True
    group = eventually(lambda: objects.phase("train", "Running"), timeout=60, what="admitted")
    assert group["spec"]["queue"] == "default"
    (pod,) = pods_of(cluster, namespace, "train")
    # The Job's own pod is no gang of its own: no queue label, bound to the planned node.
    assert QUEUE_LABEL not in (pod.metadata.labels or {})
    assert pod.spec.node_name == h100(4)[0]


def test_an_unlabelled_gpu_job_in_a_managed_namespace_without_default_waits_queue_not_found(
    cluster: Cluster, namespace: str, objects: Objects, managing: ControllerProcess
) -> None:
    managed(cluster, namespace)
    created = create(cluster, namespace, unlabelled("waits", gpus=1, node=5))
    assert created["metadata"]["labels"] == {QUEUE_LABEL: "default"}
    assert created["spec"]["suspend"] is True
    group = eventually(
        lambda: (
            (g := objects.pod_group("waits"))
            and g.get("status", {}).get("reason") == "QueueNotFound"
            and g
        ),
        timeout=60,
        what="QueueNotFound",
    )
    assert "default" in group["status"]["message"]
    assert pods_of(cluster, namespace, "waits") == []


def test_an_unlabelled_gpu_job_in_an_unmanaged_namespace_runs_untouched(
    cluster: Cluster, namespace: str, objects: Objects, managing: ControllerProcess
) -> None:
    objects.queue("default", objects.team_quota(8))  # a default Queue changes nothing here
    created = create(cluster, namespace, unlabelled("free", gpus=1, node=6))
    runs_untouched(cluster, namespace, "free", created)
    assert objects.pod_group("free") is None


def test_an_unlabelled_cpu_job_in_a_managed_namespace_runs_untouched(
    cluster: Cluster, namespace: str, objects: Objects, managing: ControllerProcess
) -> None:
    managed(cluster, namespace)
    objects.queue("default", objects.team_quota(8))
    created = create(cluster, namespace, unlabelled("build", gpus=0, node=7))
    runs_untouched(cluster, namespace, "build", created)
    assert objects.pod_group("build") is None


def test_an_unlabelled_gpu_pod_in_a_managed_namespace_is_gated_and_admitted_through_default(
    cluster: Cluster, namespace: str, objects: Objects, managing: ControllerProcess
) -> None:
    managed(cluster, namespace)
    objects.queue("default", objects.team_quota(8))
    body = unlabelled("solo", gpus=1, node=5)["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo"}, "spec": body["spec"]}
    created = cluster.core.create_namespaced_pod(namespace, pod)
    assert created.metadata.labels == {QUEUE_LABEL: "default"}
    assert GATE in [g.name for g in created.spec.scheduling_gates or []]
    eventually(
        lambda: (
            (p := cluster.core.read_namespaced_pod("solo", namespace)).spec.node_name == h100(5)[0]
            and p
        ),
        timeout=60,
        what="admitted onto its planned node",
    )


def test_a_gpu_job_that_ran_before_its_namespace_was_managed_is_queued_at_its_next_change(
    cluster: Cluster, namespace: str, objects: Objects, managing: ControllerProcess
) -> None:
    # Made while the namespace was not managed, it runs untouched ...
    created = create(cluster, namespace, unlabelled("early", gpus=1, node=6))
    runs_untouched(cluster, namespace, "early", created)
    # ... until the namespace is managed and the Job changes: then, as Kueue's
    # reconciler does with manageJobsWithoutQueueName, it is suspended and queued.
    managed(cluster, namespace)
    objects.queue("default", objects.team_quota(8))
    cluster.batch.patch_namespaced_job(
        "early", namespace, {"metadata": {"annotations": {"touched": "yes"}}}
    )
    eventually(
        lambda: (
            (j := cluster.batch.read_namespaced_job("early", namespace)).metadata.labels
            and j.metadata.labels.get(QUEUE_LABEL) == "default"
        ),
        timeout=30,
        what="queued in default",
    )
    eventually(lambda: objects.phase("early", "Running"), timeout=90, what="admitted")
    (pod,) = [p for p in pods_of(cluster, namespace, "early") if p.status.phase == "Running"]
    assert pod.spec.node_selector == {"kubernetes.io/hostname": h100(6)[0]}
