"""The training-operator's PyTorchJob queued by the controller, with the real operator on
the real local control plane (issue 25, item 3): held at creation, admitted whole with
every member on its planned node, run to Succeeded with its quota released; a gang that
fits no node waits NoNodeFit and the operator makes none of its pods."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.test_preemption import condition, preempting_quota, priorities
from tests.cluster.workloads import (
    GPU,
    GROUP,
    VERSION,
    Objects,
    create,
    eventually,
    h100,
    job,
    only_on,
)

pytestmark = pytest.mark.cluster
__all__ = ["priorities"]  # the PriorityClasses fixture, shared with test_preemption

JOB_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"


def replica(count: int, gpus: int, nodes: list[str], runs_for: str) -> dict[str, Any]:
    return {
        "replicas": count,
        "restartPolicy": "OnFailure",
        "template": {
            "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": runs_for}},
            "spec": {
                "affinity": only_on(nodes),
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "example.invalid/never-pulled:1",
                        "resources": {"limits": {GPU: str(gpus)}},
                    }
                ],
            },
        },
    }


def pytorchjob(
    name: str, *, queue: str, gpus: int, workers: int, nodes: list[str], runs_for: str = "1h"
) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {"queue-controller.io/queue": queue}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": replica(1, gpus, nodes, runs_for),
                "Worker": replica(workers, gpus, nodes, runs_for),
            }
        },
    }


def _pods(cluster: Cluster, namespace: str, name: str) -> list[Any]:
    selector = f"{JOB_LABEL}={name}"
    return list(cluster.core.list_namespaced_pod(namespace, label_selector=selector).items)


def test_a_pytorchjob_is_held_admitted_whole_placed_run_and_released(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
) -> None:
    team = objects.team_quota(8)
    objects.queue("train", team)
    custom = client.CustomObjectsApi(cluster.api)
    body = pytorchjob("ddp", queue="train", gpus=2, workers=3, nodes=h100(0, 1), runs_for="6s")
    created = custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", body
    )
    # The webhook held it: created without suspend, it was stored suspended.
    assert created["spec"]["runPolicy"]["suspend"] is True
    group = eventually(
        lambda: objects.phase("pytorchjob-ddp", "Admitted", "Running"),
        timeout=90,
        what="the PyTorchJob's admission",
    )
    assert group["spec"]["minMember"] == 4
    assert group["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    placement = group["status"]["placement"]
    assert sum(placement.values()) == 4

    def running() -> Counter[str] | None:
        pods = _pods(cluster, namespace, "ddp")
        bound = Counter(p.spec.node_name for p in pods if p.status.phase == "Running")
        return bound if sum(bound.values()) == 4 else None

    on_nodes = eventually(running, timeout=90, what="all four members running")
    assert dict(on_nodes) == placement, "members must run exactly where the core planned them"
    for pod in _pods(cluster, namespace, "ddp"):
        assert pod.spec.node_selector["kubernetes.io/hostname"] == pod.spec.node_name
        assert not pod.spec.scheduling_gates
    roles = Counter(p.metadata.labels[REPLICA_TYPE] for p in _pods(cluster, namespace, "ddp"))
    assert roles == {"master": 1, "worker": 3}

    def quota_used() -> str | None:
        quota = objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", team)
        used: str | None = quota.get("status", {}).get("used", {}).get(GPU)
        return used

    eventually(lambda: quota_used() == "8", what="the quota in use")
    eventually(
        lambda: objects.phase("pytorchjob-ddp", "Finished"),
        timeout=90,
        what="the PyTorchJob to succeed and its gang to finish",
    )
    job = custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", "ddp")
    conditions = {c["type"]: c["status"] for c in job["status"]["conditions"]}
    assert conditions.get("Succeeded") == "True"
    eventually(lambda: quota_used() == "0", what="the quota released")


def test_a_pytorchjob_that_fits_no_node_waits_and_no_pod_of_it_is_made(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
) -> None:
    team = objects.team_quota(64)
    objects.queue("train", team)
    custom = client.CustomObjectsApi(cluster.api)
    # Twelve GPUs a member: no H100 node has more than eight.
    body = pytorchjob("huge", queue="train", gpus=12, workers=1, nodes=h100(2, 3))
    custom.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", body)
    group = eventually(
        lambda: (
            (g := objects.pod_group("pytorchjob-huge"))
            and g.get("status", {}).get("reason") == "NoNodeFit"
            and g
        ),
        timeout=60,
        what="NoNodeFit",
    )
    assert group["status"]["phase"] == "Pending"
    job = custom.get_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", "huge"
    )
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert _pods(cluster, namespace, "huge") == []


def test_a_pytorchjob_preempted_by_a_job_is_suspended_requeued_and_admitted_again(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    priorities: tuple[str, str],
) -> None:
    # A victim of one kind is evicted through its own kind: the PyTorchJob is suspended
    # again (the operator deletes its pods), waits, and is admitted again once the Job
    # that preempted it has finished.
    low, high = priorities
    objects.queue("q", preempting_quota(objects, 8))
    nodes = h100(7)
    custom = client.CustomObjectsApi(cluster.api)
    body = pytorchjob("victim", queue="q", gpus=2, workers=3, nodes=nodes)
    for spec in body["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["priorityClassName"] = low
    custom.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", body)
    eventually(
        lambda: objects.phase("pytorchjob-victim", "Running"), timeout=90, what="the victim running"
    )
    create(
        cluster,
        namespace,
        job(
            "urgent", queue="q", gpus=4, pods=2, nodes=nodes, runs_for="8s", priorityClassName=high
        ),
    )
    evicted = eventually(
        lambda: (
            (g := objects.pod_group("pytorchjob-victim"))
            and condition(g, "Evicted") is not None
            and g
        ),
        timeout=60,
        what="the PyTorchJob evicted",
    )
    why = condition(evicted, "Evicted")
    assert why is not None
    assert why["reason"] == "Preempted"
    # The eviction is recorded first, then the job is suspended through its kind.
    eventually(
        lambda: (
            custom.get_namespaced_custom_object(
                "kubeflow.org", "v1", namespace, "pytorchjobs", "victim"
            )["spec"]["runPolicy"]["suspend"]
            is True
        ),
        timeout=30,
        what="the PyTorchJob suspended again",
    )
    eventually(lambda: objects.phase("urgent", "Running"), timeout=60, what="the Job running")
    eventually(lambda: objects.phase("urgent", "Finished"), timeout=60, what="the Job finished")
    readmitted = eventually(
        lambda: objects.phase("pytorchjob-victim", "Running"),
        timeout=90,
        what="the PyTorchJob admitted and running again",
    )
    assert sum(readmitted["status"]["placement"].values()) == 4
