"""The real workload operators on the local cluster (issue 25, item 1): KubeRay and
Kubeflow's training-operator, built from their pinned Go modules, run out of cluster
against the local API server; their pods run on the kwok nodes like any other.

What kwok does not give them is written down in docs/workload-kinds.md; what can be
observed of it is tested here, with nothing queued (no queue label): this is the
ground the queued kinds stand on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import Cluster
from tests.cluster.workloads import GPU, eventually

pytestmark = pytest.mark.cluster

RUNS = {"pod-complete.stage.kwok.x-k8s.io/delay": "3s"}  # kwok completes such a pod


def _template(container: str, gpus: int, annotations: dict[str, str] | None = None) -> Any:
    return {
        "metadata": {"annotations": annotations or {}},
        "spec": {
            "containers": [
                {
                    "name": container,
                    "image": "example.invalid/never-pulled:1",
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)}},
                }
            ]
        },
    }


@pytest.fixture
def custom(cluster: Cluster, namespace: str) -> Iterator[client.CustomObjectsApi]:
    api = client.CustomObjectsApi(cluster.api)
    yield api
    # Before the namespace fixture deletes pods: the operators would make them again.
    for group, plural in (
        ("kubeflow.org", "pytorchjobs"),
        ("ray.io", "rayjobs"),
        ("ray.io", "rayclusters"),
    ):
        for item in api.list_namespaced_custom_object(group, "v1", namespace, plural)["items"]:
            try:
                api.delete_namespaced_custom_object(
                    group, "v1", namespace, plural, item["metadata"]["name"]
                )
            except ApiException as error:
                if error.status != 404:
                    raise


def _pods(cluster: Cluster, namespace: str, selector: str) -> list[Any]:
    return list(cluster.core.list_namespaced_pod(namespace, label_selector=selector).items)


def test_a_pytorchjob_runs_to_succeeded_on_kwok(
    cluster: Cluster, operators: None, namespace: str, custom: client.CustomObjectsApi
) -> None:
    # Master plus three workers, one GPU each; kwok completes pods that declare how long
    # they run, and the training-operator then marks the job Succeeded.
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": _template("pytorch", 1, RUNS),
                },
                "Worker": {
                    "replicas": 3,
                    "restartPolicy": "OnFailure",
                    "template": _template("pytorch", 1, RUNS),
                },
            }
        },
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", body)
    selector = "training.kubeflow.org/job-name=train"
    pods = eventually(
        lambda: (p := _pods(cluster, namespace, selector)) and len(p) == 4 and p,
        what="the PyTorchJob's four pods",
    )
    kinds = {p.metadata.labels["training.kubeflow.org/replica-type"] for p in pods}
    assert kinds == {"master", "worker"}
    assert {ref.kind for p in pods for ref in p.metadata.owner_references} == {"PyTorchJob"}

    def succeeded() -> bool:
        job = custom.get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs", "train"
        )
        conditions = job.get("status", {}).get("conditions", [])
        return any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)

    eventually(succeeded, timeout=90, what="the PyTorchJob to succeed")
    nodes = {p.spec.node_name for p in _pods(cluster, namespace, selector)}
    assert all(node and node.startswith(("h100", "a100", "l4")) for node in nodes), nodes


def test_a_rayjob_makes_its_cluster_and_submitter_but_never_learns_its_job(
    cluster: Cluster, operators: None, namespace: str, custom: client.CustomObjectsApi
) -> None:
    # A head and two groups of GPU workers.  KubeRay makes the RayCluster, its pods
    # run on kwok nodes and it is ready; in K8sJobMode it then makes the submitter Job.
    # The Ray dashboard it asks for the job's state does not exist on kwok, so the
    # RayJob stays Running with no job status (docs/workload-kinds.md).
    head = _template("ray-head", 0)
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "infer"},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": head},
                "workerGroupSpecs": [
                    {
                        "groupName": name,
                        "replicas": count,
                        "minReplicas": count,
                        "maxReplicas": count,
                        "rayStartParams": {},
                        "template": _template("ray-worker", gpus),
                    }
                    for name, count, gpus in (("small", 2, 1), ("large", 1, 2))
                ],
            },
        },
    }
    custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", body)

    def cluster_name() -> str:
        job = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "infer")
        return str(job.get("status", {}).get("rayClusterName", ""))

    name = eventually(cluster_name, what="the RayJob's RayCluster")

    def ready() -> bool:
        ray = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", name)
        return ray.get("status", {}).get("state") == "ready"

    eventually(ready, timeout=90, what=f"RayCluster {name} to be ready")
    pods = _pods(cluster, namespace, f"ray.io/cluster={name}")
    groups = sorted(p.metadata.labels["ray.io/group"] for p in pods)
    assert groups == ["headgroup", "large", "small", "small"]
    assert all(p.status.phase == "Running" and p.spec.node_name for p in pods)
    submitter = eventually(
        lambda: cluster.batch.list_namespaced_job(namespace).items,
        what="the RayJob's submitter Job",
    )
    assert [j.metadata.owner_references[0].kind for j in submitter] == ["RayJob"]
    job = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "infer")
    assert job["status"]["jobDeploymentStatus"] == "Running"
    assert not job["status"].get("jobStatus")  # the dashboard never answered
