"""Pod-set groups on the real control plane (issue 29, item 2), with the real KubeRay and
training operators: a Ray head and its workers, a PyTorchJob's master and its workers, each
grouped with Kueue's podset-group-name (or ours, queue-controller.io/topology-group) and a
rack required, run in one rack of the local cluster (deploy/local-cluster/nodes.yaml: h100
racks of 2 nodes, h100-0004/5 in rack 2 and h100-0006/7 in rack 3).

In each, the leader may use a rack its workers may not (their node affinities differ): alone
it would take the first rack by name, grouped it goes where its workers can.  A group Kueue
refuses (a head grouped alone) is refused, naming the annotation.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from queue_controller.nodepools import BLOCK_LABEL, RACK_LABEL
from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.test_kubeflow_jobs import replica
from tests.cluster.test_operators import custom
from tests.cluster.workloads import GPU, Objects, eventually, h100, only_on

pytestmark = pytest.mark.cluster
__all__ = ["custom"]  # the operators' objects go before the namespace's pods

HOST = "kubernetes.io/hostname"
OURS = "queue-controller.io/topology-group"
KUEUE = "kueue.x-k8s.io/podset-group-name"
REQUIRED = "queue-controller.io/topology-required"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def racked(objects: Objects, name: str) -> str:
    team = objects.team_quota(64)
    return objects.queue(name, team, topology=objects.topology(BLOCK_LABEL, RACK_LABEL, HOST))


def rack_of(cluster: Cluster, node: str) -> str:
    metadata = cluster.core.read_node(node).metadata
    assert metadata is not None
    assert metadata.labels is not None
    return str(metadata.labels[RACK_LABEL])


def ray_template(
    gpus: int, nodes: list[str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi", **({GPU: str(gpus)} if gpus else {})}
    return {
        "metadata": {"annotations": annotations or {}},
        "spec": {
            "affinity": only_on(nodes),
            "containers": [
                {"name": "ray", "image": "example.invalid/ray:2", "resources": {"limits": limits}}
            ],
        },
    }


def raycluster(
    name: str, queue: str, head: dict[str, Any], workers: dict[str, Any], replicas: int
) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {"queue-controller.io/queue": queue}},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": head},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": replicas,
                    "minReplicas": replicas,
                    "maxReplicas": replicas,
                    "rayStartParams": {},
                    "template": workers,
                }
            ],
        },
    }


def running_on(cluster: Cluster, namespace: str, selector: str, members: int) -> dict[str, str]:
    """Pod name -> node, once all ``members`` run."""

    def running() -> dict[str, str] | None:
        pods = cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
        bound = {p.metadata.name: p.spec.node_name for p in pods if p.status.phase == "Running"}
        return bound if len(bound) == members else None

    found: dict[str, str] = eventually(running, timeout=120, what=f"{members} members running")
    return found


def test_a_ray_head_and_its_workers_run_in_one_rack(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    custom: client.CustomObjectsApi,
) -> None:
    queue = racked(objects, "ray")
    # The head may go to rack 2 or 3, the workers only to rack 3; ours on one template,
    # Kueue's spelling on the other.
    head = ray_template(0, h100(4, 5, 6, 7), {OURS: "ray", REQUIRED: RACK_LABEL})
    workers = ray_template(8, h100(6, 7), {KUEUE: "ray", KUEUE_REQUIRED: RACK_LABEL})
    body = raycluster("grouped", queue, head, workers, 2)
    custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", body)
    group = eventually(
        lambda: objects.phase("raycluster-grouped", "Admitted", "Running"),
        timeout=90,
        what="the RayCluster's admission",
    )
    status = group["status"]
    assert status["podSetPlacement"]["head"].keys() <= {"h100-0006", "h100-0007"}, status
    assignment = status["topologyAssignment"]
    assert assignment["gpu"]["domain"] == "h100-block-1/h100-rack-3"
    assert assignment["head"]["domain"].startswith("h100-block-1/h100-rack-3")
    on = running_on(cluster, namespace, "ray.io/cluster=grouped", 3)
    assert {rack_of(cluster, node) for node in on.values()} == {"h100-rack-3"}
    pods = cluster.core.list_namespaced_pod(namespace, label_selector="ray.io/cluster=grouped")
    kinds = Counter(p.metadata.labels.get("ray.io/node-type") for p in pods.items)
    assert kinds == {"head": 1, "worker": 2}
    for pod in pods.items:
        assert pod.spec.node_selector[HOST] == pod.spec.node_name


def test_a_pytorchjob_master_and_workers_grouped_with_a_rack_required_run_in_one_rack(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    custom: client.CustomObjectsApi,
) -> None:
    queue = racked(objects, "train")
    master = replica(1, 2, h100(0, 1, 2, 3), "1h")
    workers = replica(2, 4, h100(2, 3), "1h")
    for spec in (master, workers):
        spec["template"]["metadata"]["annotations"].update({KUEUE: "ddp", REQUIRED: RACK_LABEL})
    body = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "labels": {"queue-controller.io/queue": queue}},
        "spec": {"pytorchReplicaSpecs": {"Master": master, "Worker": workers}},
    }
    custom.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", body)
    group = eventually(
        lambda: objects.phase("pytorchjob-ddp", "Admitted", "Running"),
        timeout=90,
        what="the PyTorchJob's admission",
    )
    assignment = group["status"]["topologyAssignment"]
    assert assignment["worker"]["domain"].startswith("h100-block-0/h100-rack-1")
    assert assignment["master"]["domain"].startswith("h100-block-0/h100-rack-1")
    on = running_on(cluster, namespace, "training.kubeflow.org/job-name=ddp", 3)
    assert {rack_of(cluster, node) for node in on.values()} == {"h100-rack-1"}


def test_a_head_grouped_alone_is_refused_naming_the_annotation(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    custom: client.CustomObjectsApi,
) -> None:
    queue = racked(objects, "ray")
    head = ray_template(0, h100(4, 5), {KUEUE: "serve", KUEUE_REQUIRED: RACK_LABEL})
    body = raycluster("lonely", queue, head, ray_template(1, h100(4, 5)), 1)
    custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", body)
    group = eventually(
        lambda: (
            (g := objects.pod_group("raycluster-lonely"))
            and g.get("status", {}).get("reason") == "InvalidSpec"
            and g
        ),
        timeout=60,
        what="InvalidSpec",
    )
    message = group["status"]["message"]
    assert message.startswith(f"spec.headGroupSpec.template.metadata.annotations[{KUEUE}]")
    assert "group 'serve' has 1 pod set(s)" in message
    assert cluster.core.list_namespaced_pod(namespace).items == []
