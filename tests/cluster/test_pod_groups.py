"""Plain Pod gangs on the real control plane: gated as they are created, admitted whole.

The pods are applied one by one with ``kubectl apply``, as a user or an operator
(Ray, an MPI launcher) makes them; the controller's webhook gates each one, and
nothing binds until the whole group exists and fits.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.workloads import GPU, Objects, eventually, h100, only_on, table

pytestmark = pytest.mark.cluster

GATE = "queue-controller.io/admission"


def member(
    name: str,
    *,
    group: str | None,
    total: int | None,
    gpus: int,
    nodes: list[str],
    queue_label: str = "queue-controller.io/queue",
    group_label: str = "queue-controller.io/pod-group",
    total_annotation: str = "queue-controller.io/pod-group-total-count",
    image: str = "worker",
) -> dict[str, Any]:
    labels = {queue_label: "q"}
    annotations = {}
    if group is not None:
        labels[group_label] = group
    if total is not None:
        annotations[total_annotation] = str(total)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "affinity": only_on(nodes),
            "containers": [
                {"name": "main", "image": image, "resources": {"limits": {GPU: str(gpus)}}}
            ],
        },
    }


def apply(cluster: Cluster, namespace: str, body: dict[str, Any]) -> None:
    """``kubectl apply`` of one object, as a person types it."""
    path = cluster.kubeconfig.parent / f"apply-{namespace}-{body['metadata']['name']}.json"
    path.write_text(json.dumps(body))
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))


def pod(cluster: Cluster, namespace: str, name: str) -> Any:
    return cluster.core.read_namespaced_pod(name, namespace)


def gates(cluster: Cluster, namespace: str, name: str) -> list[str]:
    return [g.name for g in pod(cluster, namespace, name).spec.scheduling_gates or []]


def test_a_pod_group_applied_one_by_one_stays_gated_until_whole_then_binds_as_planned(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    objects.queue("q", objects.team_quota(16))
    nodes = h100(6, 7)
    names = ["ring-0", "ring-1", "ring-2"]
    for name in names[:2]:
        apply(cluster, namespace, member(name, group="ring", total=3, gpus=4, nodes=nodes))
        assert gates(cluster, namespace, name) == [GATE], "the webhook gates each member"

    def short() -> dict[str, Any] | None:
        found = objects.pod_group("pods-ring")
        status = (found or {}).get("status", {})
        ok = status.get("reason") == "WaitingForMembers"
        return found if ok and status.get("message", "").startswith("2 of 3") else None

    waiting = eventually(short, what="WaitingForMembers: 2 of 3 members exist")
    assert waiting["spec"]["minMember"] == 3
    assert waiting["metadata"]["labels"]["queue-controller.io/workload-kind"] == "Pod"
    for name in names[:2]:
        held = pod(cluster, namespace, name)
        assert held.spec.node_name is None, "nothing binds while the group is short"
        assert [g.name for g in held.spec.scheduling_gates] == [GATE]

    apply(cluster, namespace, member("ring-2", group="ring", total=3, gpus=4, nodes=nodes))
    running = eventually(
        lambda: objects.phase("pods-ring", "Running"), what="the whole group admitted and running"
    )
    placement = running["status"]["placement"]
    assert sum(placement.values()) == 3
    assert set(placement) <= set(nodes)
    bound = Counter(pod(cluster, namespace, name).spec.node_name for name in names)
    assert dict(bound) == placement, "every member runs on the node its PodGroup planned"
    for name in names:
        assert gates(cluster, namespace, name) == []
    (row,) = table(cluster.kubectl("get", "podgroups", "-n", namespace, "-o", "wide"))
    assert (row["NAME"], row["PHASE"], row["KIND"]) == ("pods-ring", "Running", "Pod")
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=pods-ring"
    )
    assert "Admitted" in events
    assert "WaitingForMembers" in events


def test_kueue_pod_group_labels_and_a_single_pod_queue_as_they_are(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    """A Kueue user's pods need no change: its group label, count annotation and queue label."""
    objects.queue("q", objects.team_quota(16))
    nodes = h100(4, 5)
    kueue = {
        "queue_label": "kueue.x-k8s.io/queue-name",
        "group_label": "kueue.x-k8s.io/pod-group-name",
        "total_annotation": "kueue.x-k8s.io/pod-group-total-count",
    }
    # A launcher and two workers of another shape: two pod sets in one gang.
    apply(
        cluster,
        namespace,
        member("mpi-launcher", group="mpi", total=3, gpus=1, nodes=nodes, image="l", **kueue),
    )
    for i in range(2):
        apply(
            cluster,
            namespace,
            member(f"mpi-w{i}", group="mpi", total=3, gpus=4, nodes=nodes, **kueue),
        )
    apply(cluster, namespace, member("solo", group=None, total=None, gpus=2, nodes=nodes, **kueue))

    running = eventually(lambda: objects.phase("pods-mpi", "Running"), what="the Kueue pod group")
    by_set = running["status"]["podSetPlacement"]
    assert len(by_set) == 2
    assert sorted(sum(p.values()) for p in by_set.values()) == [1, 2]
    solo = eventually(lambda: objects.phase("pods-solo", "Running"), what="a single pod")
    assert sum(solo["status"]["placement"].values()) == 1
    assert pod(cluster, namespace, "solo").spec.node_name in nodes


def replica_set(nodes: list[str]) -> dict[str, Any]:
    """A ReplicaSet whose two pods are one gang (group rs), on ``nodes``."""
    template = member("x", group="rs", total=2, gpus=4, nodes=nodes)
    template["spec"]["restartPolicy"] = "Always"
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "rs"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "rs"}},
            "template": {
                "metadata": {
                    "labels": {**template["metadata"]["labels"], "app": "rs"},
                    "annotations": template["metadata"]["annotations"],
                },
                "spec": template["spec"],
            },
        },
    }


def replicas(cluster: Cluster, namespace: str) -> list[Any]:
    """The ReplicaSet's pods that are not being deleted."""
    return [
        p
        for p in cluster.core.list_namespaced_pod(namespace, label_selector="app=rs").items
        if p.metadata.deletion_timestamp is None
    ]


def test_a_member_deleted_and_made_again_by_its_replicaset_is_bound_into_the_plan(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    """Pods an owner makes again are gated again and bound back into the gang's plan."""
    objects.queue("q", objects.team_quota(16), timeout=120)
    apply(cluster, namespace, replica_set(h100(2, 3)))
    running = eventually(lambda: objects.phase("pods-rs", "Running"), what="the ReplicaSet's gang")
    owners = running["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("ReplicaSet", "rs")]
    placement = running["status"]["placement"]

    def members() -> list[Any]:
        return replicas(cluster, namespace)

    victim = members()[0].metadata.name
    cluster.core.delete_namespaced_pod(victim, namespace, grace_period_seconds=0)

    def rebound() -> Counter[str] | None:
        now = members()
        if victim in {p.metadata.name for p in now} or len(now) != 2:
            return None
        if any(p.status.phase != "Running" for p in now):
            return None
        return Counter(p.spec.node_name for p in now)

    assert dict(eventually(rebound, what="the new member bound where the plan had room")) == (
        placement
    )
    group = objects.pod_group("pods-rs")
    assert group is not None
    assert group["status"]["phase"] == "Running"
    assert group["status"].get("requeueCount", 0) == 0, "a member made again is no eviction"


def test_an_evicted_pod_gang_is_made_again_by_its_owner_requeued_and_readmitted(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    """Eviction deletes the members; the ReplicaSet makes them again, the webhook gates
    them, and the gang queues anew and is admitted elsewhere."""
    objects.queue("q", objects.team_quota(16), timeout=5)
    nodes = h100(1, 2, 3)
    apply(cluster, namespace, replica_set(nodes))
    first = eventually(lambda: objects.phase("pods-rs", "Running"), what="the gang running")
    # One member's node is cordoned and the member lost: its replacement is bound to the
    # planned node, cannot be scheduled there, and the gang is short past its timeout.
    before = replicas(cluster, namespace)
    member_pod = before[0]
    lost_on = member_pod.spec.node_name
    cluster.kubectl("cordon", lost_on)
    try:
        cluster.core.delete_namespaced_pod(
            member_pod.metadata.name, namespace, grace_period_seconds=0
        )

        def readmitted() -> dict[str, Any] | None:
            group = objects.pod_group("pods-rs")
            status = (group or {}).get("status", {})
            if status.get("phase") != "Running" or status.get("requeueCount", 0) < 1:
                return None
            return group

        again = eventually(readmitted, timeout=90, what="evicted, requeued and running again")
        evicted = next(c for c in again["status"]["conditions"] if c["type"] == "Evicted")
        assert evicted["reason"] == "MembersLost"
        assert lost_on not in again["status"]["placement"], "the new plan avoids the cordoned node"
        now = replicas(cluster, namespace)
        assert len(now) == 2
        assert {p.metadata.uid for p in now}.isdisjoint({p.metadata.uid for p in [member_pod]})
        assert Counter(p.spec.node_name for p in now) == Counter(again["status"]["placement"])
        assert all(p.status.phase == "Running" for p in now)
        assert first["metadata"]["uid"] == again["metadata"]["uid"], "one PodGroup throughout"
    finally:
        cluster.kubectl("uncordon", lost_on)
