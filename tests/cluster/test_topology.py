"""Topology-aware gangs on the real control plane: the local cluster's racks and blocks
(deploy/local-cluster/nodes.yaml: h100 racks of 2 nodes, blocks of 2 racks).

A gang that asks for a rack runs inside one, or waits saying why; a preferred one lands
in one rack when one can hold it; slices keep consecutive completion indexes together;
requests written wrong are refused, naming the annotation.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from queue_controller.kube.views import COMPLETION_INDEX
from queue_controller.nodepools import BLOCK_LABEL, RACK_LABEL
from tests.cluster.conftest import Cluster
from tests.cluster.workloads import (
    Objects,
    create,
    eventually,
    h100,
    job,
    pods_of,
)

pytestmark = pytest.mark.cluster
HOST = "kubernetes.io/hostname"
TPL = "spec.template.metadata.annotations"
REQUIRED = "queue-controller.io/topology-required"
SLICE_LEVEL = "queue-controller.io/topology-slice-required"
SLICE_SIZE = "queue-controller.io/topology-slice-size"


def racked(objects: Objects) -> str:
    """A Queue whose gangs may ask for the local cluster's block, rack and host levels."""
    team = objects.team_quota(64)
    return objects.queue("q", team, topology=objects.topology(BLOCK_LABEL, RACK_LABEL, HOST))


def asking(body: dict[str, Any], **annotations: str) -> dict[str, Any]:
    body["spec"]["template"]["metadata"]["annotations"].update(annotations)
    return body


def judged(objects: Objects, name: str) -> dict[str, Any]:
    return eventually(
        lambda: (g := objects.pod_group(name)) and g.get("status", {}).get("reason") and g,
        what=f"{name} to be judged",
    )


def test_a_topology_request_written_wrong_names_its_annotation(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    queue = racked(objects)
    not_a_size = asking(
        job("not-a-size", queue=queue, gpus=8, pods=2, nodes=h100(0, 1)),
        **{SLICE_LEVEL: RACK_LABEL, SLICE_SIZE: "x"},
    )
    not_indexed = asking(
        job("not-indexed", queue=queue, gpus=8, pods=2, nodes=h100(0, 1)),
        **{SLICE_LEVEL: RACK_LABEL, SLICE_SIZE: "1"},
    )
    both_spellings = asking(
        job("both-spellings", queue=queue, gpus=8, pods=2, nodes=h100(0, 1)),
        **{REQUIRED: RACK_LABEL, "kueue.x-k8s.io/podset-required-topology": BLOCK_LABEL},
    )
    for body in (not_a_size, not_indexed, both_spellings):
        create(cluster, namespace, body)
    expected = {
        "not-a-size": f'{TPL}[{SLICE_SIZE}]: "x" is not a positive whole number',
        "not-indexed": "the Job needs spec.completionMode: Indexed",
        "both-spellings": "disagree",
    }
    for name, words in expected.items():
        status = judged(objects, name)["status"]
        assert (status["phase"], status["reason"]) == ("Pending", "InvalidSpec")
        assert words in status["message"]


def rack_of(cluster: Cluster, node: str) -> str:
    metadata = cluster.core.read_node(node).metadata
    assert metadata is not None
    assert metadata.labels is not None
    labels = metadata.labels
    return f"{labels[BLOCK_LABEL]}/{labels[RACK_LABEL]}"


def test_a_gang_that_asks_for_a_rack_waits_for_one_and_runs_within_it(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    queue = racked(objects)
    # h100-0000..0003 are two racks of 16 GPUs: 32 free, but 24 in one rack never.
    create(
        cluster,
        namespace,
        asking(
            job("too-big", queue=queue, gpus=8, pods=3, nodes=h100(0, 1, 2, 3)),
            **{REQUIRED: RACK_LABEL},
        ),
    )
    status = judged(objects, "too-big")["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "NoNodeFit")
    assert "32 nvidia.com/gpu free in total" in status["message"], status["message"]
    assert "at most 16 in any one rack" in status["message"]
    assert "the gang needs 24 in one rack" in status["message"]
    assert "topologyDomain" not in status
    create(
        cluster,
        namespace,
        asking(
            job("one-rack", queue=queue, gpus=8, pods=2, nodes=h100(0, 1, 2, 3)),
            **{REQUIRED: RACK_LABEL},
        ),
    )
    running = eventually(lambda: objects.phase("one-rack", "Running"), what="one-rack to run")
    domain = running["status"]["topologyDomain"]
    assert domain in ("h100-block-0/h100-rack-0", "h100-block-0/h100-rack-1")
    assert running["status"]["topologyAssignment"]["main"]["domain"] == domain
    nodes = {p.spec.node_name for p in pods_of(cluster, namespace, "one-rack")}
    assert {rack_of(cluster, n) for n in nodes} == {domain}
    waiting = objects.pod_group("too-big")
    assert waiting is not None
    assert waiting["status"]["phase"] == "Pending"
    assert not any(p.spec.node_name for p in pods_of(cluster, namespace, "too-big")), (
        "a pending gang has no member on a node"
    )


def test_a_preferred_rack_is_one_rack_when_one_can_hold_the_gang(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    queue = racked(objects)
    body = asking(
        job("preferred", queue=queue, gpus=8, pods=2, nodes=h100(4, 5, 6, 7)),
        **{"kueue.x-k8s.io/podset-preferred-topology": RACK_LABEL},
    )
    create(cluster, namespace, body)
    running = eventually(lambda: objects.phase("preferred", "Running"), what="preferred to run")
    nodes = {p.spec.node_name for p in pods_of(cluster, namespace, "preferred")}
    assert len({rack_of(cluster, n) for n in nodes}) == 1
    assert running["status"]["topologyDomain"] == rack_of(cluster, next(iter(nodes)))


def test_a_balanced_topology_splits_a_preferred_gang_evenly_over_two_racks(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    """24 one-GPU members preferring a rack, where a rack holds 16 (two 8-GPU nodes): they
    need two racks of the block, and three nodes.  Balanced evens out the level below the
    preferred one, the nodes (as Kueue's TASBalancedPlacement): 8 on each of the fewest
    nodes that hold them, and the decision says so."""
    team = objects.team_quota(64)
    topology = objects.topology(BLOCK_LABEL, RACK_LABEL, HOST, placement="Balanced")
    queue = objects.queue("q", team, topology=topology)
    body = asking(
        job("even", queue=queue, gpus=1, pods=24, nodes=h100(0, 1, 2, 3)),
        **{"kueue.x-k8s.io/podset-preferred-topology": RACK_LABEL},
    )
    create(cluster, namespace, body)
    running = eventually(lambda: objects.phase("even", "Running"), what="even to run")
    pods = pods_of(cluster, namespace, "even")
    per_node = Counter(p.spec.node_name for p in pods)
    assert sorted(per_node.values()) == [8, 8, 8], per_node
    assert len({rack_of(cluster, node) for node in per_node}) == 2
    admitted = {c["type"]: c for c in running["status"]["conditions"]}["Admitted"]
    assert "balanced: 8 + 8 + 8 over 3 nodes in 2 racks" in admitted["message"], admitted


def test_slices_keep_consecutive_indexes_in_one_rack(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    queue = racked(objects)
    # Block 1 (h100-0004..0007) whole: 4 members of 8 GPUs, in slices of 2 per rack.
    body = asking(
        job("sliced", queue=queue, gpus=8, pods=4, nodes=h100(4, 5, 6, 7)),
        **{REQUIRED: BLOCK_LABEL, SLICE_LEVEL: RACK_LABEL, SLICE_SIZE: "2"},
    )
    body["spec"]["completionMode"] = "Indexed"
    create(cluster, namespace, body)
    running = eventually(lambda: objects.phase("sliced", "Running"), what="sliced to run")
    assignment = running["status"]["topologyAssignment"]["main"]
    assert assignment["domain"] == "h100-block-1"
    assert [sum(s.values()) for s in assignment["slices"]] == [2, 2]
    racks: Counter[tuple[int, str]] = Counter()
    for pod in pods_of(cluster, namespace, "sliced"):
        index = int(pod.metadata.labels[COMPLETION_INDEX])
        racks[(index // 2, rack_of(cluster, pod.spec.node_name))] += 1
    assert sorted(racks.values()) == [2, 2], f"a slice split over racks: {racks}"
