"""Failed-node replacement on the real control plane (onNodeFailure: Replace).

The local cluster's gb200 racks hold 4 nodes of 4 GPUs (deploy/local-cluster/nodes.yaml;
tainted, so only gangs that tolerate it go there).  A rack-required gang of two 4-GPU
members takes two nodes of one rack; `queue-controller chaos node-loss` deletes one of
them, and a spare node of the same rack takes the lost member's replacement while the
other member runs on, never restarted.  The h100 racks hold 2 nodes of 8 GPUs: a
rack-required gang of two 8-GPU members fills one, so losing a node leaves no room in
the rack, and the gang is evicted whole (MembersLost), as without replacement; its Queue
sets nothing there, since Replace is the default.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queue_controller.nodepools import BLOCK_LABEL, RACK_LABEL
from tests.cluster.conftest import Cluster
from tests.cluster.test_chaos import chaos, chaos_marks
from tests.cluster.workloads import Objects, create, eventually, h100, job, pods_of

pytestmark = pytest.mark.cluster
HOST = "kubernetes.io/hostname"
REQUIRED = "queue-controller.io/topology-required"


def replacing_queue(objects: Objects, timeout: int) -> str:
    team = objects.team_quota(64)
    topology = objects.topology(BLOCK_LABEL, RACK_LABEL, HOST)
    return objects.queue("q", team, topology=topology, timeout=timeout, on_node_failure="Replace")


def rack_job(
    name: str, queue: str, *, gpus: int, pods: int, nodes: list[str], **pod_spec: Any
) -> dict[str, Any]:
    body = job(name, queue=queue, gpus=gpus, pods=pods, nodes=nodes, backoff_limit=4, **pod_spec)
    body["spec"]["template"]["metadata"]["annotations"][REQUIRED] = RACK_LABEL
    return body


def gb200(*indices: int) -> list[str]:
    return [f"gb200-{i:04d}" for i in indices]


GB200 = [{"key": "queue-controller.io/gb200", "operator": "Exists", "effect": "NoSchedule"}]


def ready(cluster: Cluster, node: str) -> bool | None:
    try:
        found = cluster.core.read_node(node)
    except ApiException:
        return None
    conditions = found.status.conditions or []  # none yet on a Node just created again
    return any(c.type == "Ready" and c.status == "True" for c in conditions) or None


def test_chaos_node_loss_replaces_one_member_inside_the_rack_and_the_others_never_restart(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    queue = replacing_queue(objects, timeout=240)
    rack = gb200(0, 1, 2, 3)  # gb200-rack-0
    create(
        cluster, namespace, rack_job("gang", queue, gpus=4, pods=2, nodes=rack, tolerations=GB200)
    )
    running = eventually(lambda: objects.phase("gang", "Running"), what="the gang to run")
    placement: dict[str, int] = running["status"]["placement"]
    assert sorted(placement.values()) == [1, 1], placement
    lost, other = sorted(placement)
    kept = {
        p.metadata.uid for p in pods_of(cluster, namespace, "gang") if p.spec.node_name == other
    }
    assert len(kept) == 1

    result = chaos(cluster, "node-loss", "--job", f"{namespace}/gang", "--node", lost, timeout=420)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    found = re.search(rf"^replaced\s+\S+\s+{lost} replaced by (\S+)", out, re.M)
    assert found is not None, out
    spare = found.group(1)
    assert spare in rack
    assert spare not in (lost, other)
    assert not re.search(r"^evicted\s", out, re.M)
    assert "every invariant held" in out

    group = objects.pod_group("gang")
    assert group is not None
    status = group["status"]
    assert status["phase"] == "Running"
    assert status.get("requeueCount", 0) == 0
    assert status["placement"] == {other: 1, spare: 1}
    (record,) = status["replacedNodes"]
    assert (record["node"], record["replacement"]) == (lost, spare)
    pods = pods_of(cluster, namespace, "gang")
    assert sorted(p.spec.node_name for p in pods if p.status.phase == "Running") == sorted(
        [other, spare]
    )
    still = [p for p in pods if p.metadata.uid in kept]
    assert len(still) == 1, "the member that kept running was restarted"
    assert all(c.restart_count == 0 for c in still[0].status.container_statuses or [])
    events = client.CoreV1Api(cluster.api).list_namespaced_event(namespace).items
    assert any(e.reason == "NodeReplaced" for e in events)
    eventually(lambda: ready(cluster, lost), timeout=90, what="the node to come back Ready")
    assert chaos_marks(cluster) == []


def test_chaos_node_loss_on_a_full_rack_evicts_the_gang_whole_and_judges_that_right(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    """The Queue and TeamQuota say nothing: Replace is the default, as Kueue's.  The rack
    is full, so nothing replaces the lost node: the gang is evicted whole (MembersLost),
    the eviction says why, and chaos judges it as a loss without replacement (evicted,
    requeued, readmitted in the other rack), not as a broken promise to replace."""
    team = objects.team_quota(64)
    topology = objects.topology(BLOCK_LABEL, RACK_LABEL, HOST)
    queue = objects.queue("q", team, topology=topology, timeout=10)
    nodes = h100(2, 3, 4, 5)  # h100-rack-1 and h100-rack-2, two 8-GPU nodes each
    create(cluster, namespace, rack_job("full", queue, gpus=8, pods=2, nodes=nodes))
    running = eventually(lambda: objects.phase("full", "Running"), what="the gang to run")
    first = sorted(running["status"]["placement"])
    assert first in (h100(2, 3), h100(4, 5)), first
    lost = first[0]

    result = chaos(cluster, "node-loss", "--job", f"{namespace}/full", "--node", lost, timeout=420)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "judged as an eviction" in out
    assert re.search(r"^evicted\s+\S+\s+MembersLost", out, re.M), out
    assert "not replaced: no node of rack" in out
    assert not re.search(r"^replaced\s", out, re.M)
    for phase in ("requeued", "readmitted"):
        assert re.search(rf"^{phase}\s", out, re.M), out
    assert "every invariant held" in out

    group = objects.pod_group("full")
    assert group is not None
    status = group["status"]
    assert status.get("requeueCount", 0) >= 1
    assert not status.get("replacedNodes")
    assert lost not in status.get("placement", {})
    eventually(lambda: ready(cluster, lost), timeout=90, what="the node to come back Ready")
    assert chaos_marks(cluster) == []
