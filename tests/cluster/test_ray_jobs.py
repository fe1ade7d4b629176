"""KubeRay's RayJob and RayCluster queued by the controller, with the real ray-operator on
the real local control plane (issue 25, item 2): held at creation; admitted whole, the
head, every worker and the submitter on its planned node; a gang that fits no node waits
NoNodeFit and KubeRay makes nothing of it; a RayJob preempted by a higher-priority
PyTorchJob of its team is suspended (KubeRay deletes its cluster), requeued and admitted
again.  What kwok cannot give a RayJob (its job's status) is in docs/local-cluster.md."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.people import kubectl
from tests.cluster.test_kubeflow_jobs import pytorchjob
from tests.cluster.test_operators import custom
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
# Fixtures shared with test_preemption (PriorityClasses) and test_operators (the operators'
# objects deleted before the namespace's pods, which they would make again).
__all__ = ["custom", "priorities"]

RAY_JOB_LABEL = "queue-controller.io/ray-job"


def _template(gpus: int, nodes: list[str], priority: str = "") -> dict[str, Any]:
    limits = {"cpu": "1", "memory": "1Gi", **({GPU: str(gpus)} if gpus else {})}
    spec: dict[str, Any] = {
        "affinity": only_on(nodes),
        "containers": [
            {"name": "ray", "image": "example.invalid/ray:2", "resources": {"limits": limits}}
        ],
    }
    if priority:
        spec["priorityClassName"] = priority
    return {"spec": spec}


def cluster_spec(nodes: list[str], *, small: int, big: int, priority: str = "") -> dict[str, Any]:
    """A CPU-only head and two GPU worker groups: two pods of ``small`` GPUs, one of ``big``."""

    def group(name: str, replicas: int, gpus: int) -> dict[str, Any]:
        return {
            "groupName": name,
            "replicas": replicas,
            "minReplicas": replicas,
            "maxReplicas": replicas,
            "rayStartParams": {},
            "template": _template(gpus, nodes, priority),
        }

    return {
        "headGroupSpec": {"rayStartParams": {}, "template": _template(0, nodes, priority)},
        "workerGroupSpecs": [group("small", 2, small), group("big", 1, big)],
    }


def rayjob(name: str, queue: str, spec: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    submitter = _template(0, nodes)
    submitter["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": spec,
            "submitterPodTemplate": submitter,
        },
    }


def _pods(cluster: Cluster, namespace: str, selector: str) -> list[Any]:
    return list(cluster.core.list_namespaced_pod(namespace, label_selector=selector).items)


def _running_as_planned(
    cluster: Cluster, namespace: str, selector: str, placement: dict[str, int]
) -> None:
    """Every member runs, on exactly the nodes the core planned, pinned there and ungated."""
    members = sum(placement.values())

    def running() -> Counter[str] | None:
        pods = _pods(cluster, namespace, selector)
        bound = Counter(p.spec.node_name for p in pods if p.status.phase == "Running")
        return bound if sum(bound.values()) == members else None

    on_nodes = eventually(running, timeout=90, what=f"all {members} members running")
    assert dict(on_nodes) == placement, "members must run exactly where the core planned them"
    for pod in _pods(cluster, namespace, selector):
        assert pod.spec.node_selector["kubernetes.io/hostname"] == pod.spec.node_name
        assert not pod.spec.scheduling_gates


def _quota_used(objects: Objects, team: str) -> str:
    quota = objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", team)
    return str(quota.get("status", {}).get("used", {}).get(GPU, "0"))


def test_a_rayjob_is_held_then_admitted_whole_with_every_member_where_planned(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    custom: client.CustomObjectsApi,
) -> None:
    team = objects.team_quota(8)
    objects.queue("ray", team)
    nodes = h100(0, 1)
    body = rayjob("tune", "ray", cluster_spec(nodes, small=2, big=4), nodes)
    created = custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", body)
    # The webhook held it (Kueue's label is ours too): created running, stored suspended.
    assert created["spec"]["suspend"] is True
    group = eventually(
        lambda: objects.phase("rayjob-tune", "Admitted", "Running"),
        timeout=90,
        what="the RayJob's admission",
    )
    # The head, two small workers, one big worker and the submitter.
    assert group["spec"]["minMember"] == 5
    assert group["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    placement = group["status"]["placement"]
    assert sum(placement.values()) == 5
    selector = f"{RAY_JOB_LABEL}=tune"
    _running_as_planned(cluster, namespace, selector, placement)
    pods = _pods(cluster, namespace, selector)
    owners = Counter(p.metadata.owner_references[0].kind for p in pods)
    assert owners == {"RayCluster": 4, "Job": 1}
    groups = Counter(p.metadata.labels.get("ray.io/group", "submitter") for p in pods)
    assert groups == {"headgroup": 1, "small": 2, "big": 1, "submitter": 1}
    eventually(lambda: _quota_used(objects, team) == "8", what="the quota in use")
    # kubectl get -o wide names its kind.
    wide = kubectl(cluster, "get", "podgroup", "rayjob-tune", "-n", namespace, "-o", "wide")
    header, row = wide.stdout.splitlines()[:2]
    assert row[header.index("KIND") :].split()[0] == "RayJob"  # columns are aligned
    # Deleted, it gives its quota back.
    custom.delete_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "tune")
    eventually(lambda: _quota_used(objects, team) == "0", timeout=60, what="the quota released")


@pytest.mark.parametrize("kind", ["RayJob", "RayCluster"])
def test_a_ray_gang_that_fits_no_node_waits_and_kuberay_makes_nothing_of_it(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    custom: client.CustomObjectsApi,
    kind: str,
) -> None:
    team = objects.team_quota(64)
    objects.queue("ray", team)
    nodes = h100(2, 3)
    # Twelve GPUs for the big worker: no H100 node has more than eight.
    spec = cluster_spec(nodes, small=1, big=12)
    if kind == "RayJob":
        body = rayjob("huge", "ray", spec, nodes)
    else:
        body = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "huge", "labels": {"queue-controller.io/queue": "ray"}},
            "spec": spec,
        }
    plural = f"{kind.lower()}s"
    custom.create_namespaced_custom_object("ray.io", "v1", namespace, plural, body)
    group = eventually(
        lambda: (
            (g := objects.pod_group(f"{kind.lower()}-huge"))
            and g.get("status", {}).get("reason") == "NoNodeFit"
            and g
        ),
        timeout=60,
        what="NoNodeFit",
    )
    assert group["status"]["phase"] == "Pending"
    held = custom.get_namespaced_custom_object("ray.io", "v1", namespace, plural, "huge")
    assert held["spec"]["suspend"] is True
    if kind == "RayJob":
        clusters = custom.list_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters")
        assert clusters["items"] == []
    assert cluster.core.list_namespaced_pod(namespace).items == []


def test_a_raycluster_is_held_admitted_whole_and_evicted_by_suspending_it(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    priorities: tuple[str, str],
    custom: client.CustomObjectsApi,
) -> None:
    low, high = priorities
    team = preempting_quota(objects, 8)
    objects.queue("ray", team)
    nodes = h100(4)
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "serve", "labels": {"queue-controller.io/queue": "ray"}},
        "spec": cluster_spec(nodes, small=1, big=2, priority=low),
    }
    created = custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters", body)
    assert created["spec"]["suspend"] is True
    group = eventually(
        lambda: objects.phase("raycluster-serve", "Admitted", "Running"),
        timeout=90,
        what="the RayCluster's admission",
    )
    assert group["spec"]["minMember"] == 4
    _running_as_planned(cluster, namespace, "ray.io/cluster=serve", group["status"]["placement"])
    eventually(lambda: _quota_used(objects, team) == "4", what="the quota in use")
    # A Job of higher priority needs the whole node: the cluster is evicted by suspending
    # it, KubeRay deletes its pods, and it waits until the Job is done.
    create(
        cluster,
        namespace,
        job(
            "urgent",
            queue="ray",
            gpus=4,
            pods=2,
            nodes=nodes,
            runs_for="8s",
            priorityClassName=high,
        ),
    )

    def suspended() -> bool:
        found = custom.get_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayclusters", "serve"
        )
        return found["spec"]["suspend"] is True

    eventually(suspended, timeout=60, what="the RayCluster suspended")
    eventually(lambda: objects.phase("urgent", "Running", "Finished"), timeout=90, what="the Job")
    eventually(lambda: objects.phase("urgent", "Finished"), timeout=60, what="the Job finished")
    again = eventually(
        lambda: objects.phase("raycluster-serve", "Running"),
        timeout=120,
        what="the RayCluster admitted and running again",
    )
    _running_as_planned(cluster, namespace, "ray.io/cluster=serve", again["status"]["placement"])


def test_a_rayjob_preempted_by_a_pytorchjob_of_its_team_is_suspended_and_admitted_again(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    priorities: tuple[str, str],
    custom: client.CustomObjectsApi,
) -> None:
    low, high = priorities
    objects.queue("q", preempting_quota(objects, 8))
    nodes = h100(7)
    spec = cluster_spec(nodes, small=2, big=4, priority=low)
    custom.create_namespaced_custom_object(
        "ray.io", "v1", namespace, "rayjobs", rayjob("victim", "q", spec, nodes)
    )
    eventually(
        lambda: objects.phase("rayjob-victim", "Running"), timeout=90, what="the RayJob running"
    )
    urgent = pytorchjob("urgent", queue="q", gpus=2, workers=3, nodes=nodes, runs_for="8s")
    for replica in urgent["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["priorityClassName"] = high
    custom.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", urgent)
    evicted = eventually(
        lambda: (
            (g := objects.pod_group("rayjob-victim")) and condition(g, "Evicted") is not None and g
        ),
        timeout=60,
        what="the RayJob evicted",
    )
    why = condition(evicted, "Evicted")
    assert why is not None
    assert why["reason"] == "Preempted"
    # Evicted through its own kind: suspended again, and KubeRay deletes its cluster.
    eventually(
        lambda: (
            custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "victim")[
                "spec"
            ]["suspend"]
            is True
        ),
        timeout=30,
        what="the RayJob suspended again",
    )
    eventually(
        lambda: (
            not custom.list_namespaced_custom_object("ray.io", "v1", namespace, "rayclusters")[
                "items"
            ]
        ),
        timeout=60,
        what="KubeRay deleting the RayJob's cluster",
    )
    eventually(
        lambda: objects.phase("pytorchjob-urgent", "Running", "Finished"),
        timeout=90,
        what="the PyTorchJob admitted",
    )
    eventually(
        lambda: objects.phase("pytorchjob-urgent", "Finished"), timeout=90, what="it finished"
    )
    again = eventually(
        lambda: objects.phase("rayjob-victim", "Running"),
        timeout=120,
        what="the RayJob admitted and running again",
    )
    assert sum(again["status"]["placement"].values()) == 5
