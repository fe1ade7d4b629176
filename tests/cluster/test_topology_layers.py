"""Layered slices on the real control plane: host slices inside rack slices, on the local
cluster's racks (deploy/local-cluster/nodes.yaml: h100 racks of 2 nodes, blocks of 2 racks).

The member of completion index i lands on the node of its host slice (i // 2), inside the
rack of its rack slice (i // 4); a layer written wrong is refused, naming the annotation.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from queue_controller.kube.views import COMPLETION_INDEX
from queue_controller.nodepools import BLOCK_LABEL, RACK_LABEL
from tests.cluster.conftest import Cluster
from tests.cluster.test_topology import HOST, REQUIRED, TPL, asking, judged, rack_of, racked
from tests.cluster.workloads import Objects, create, eventually, h100, job, pods_of

pytestmark = pytest.mark.cluster
LAYERS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
OURS = "queue-controller.io/topology-slices"


def test_members_land_on_their_host_slice_inside_their_rack_slice(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    queue = racked(objects)
    # Block 1 (h100-0004..0007) whole: 8 members of 4 GPUs, two per node: host slices of
    # 2 (one per node) inside rack slices of 4 (one per rack).
    layers = [{"topology": RACK_LABEL, "size": 4}, {"topology": HOST, "size": 2}]
    body = asking(
        job("layered", queue=queue, gpus=4, pods=8, nodes=h100(4, 5, 6, 7)),
        **{REQUIRED: BLOCK_LABEL, LAYERS: json.dumps(layers)},
    )
    body["spec"]["completionMode"] = "Indexed"
    create(cluster, namespace, body)
    running = eventually(lambda: objects.phase("layered", "Running"), what="layered to run")
    assignment = running["status"]["topologyAssignment"]["main"]
    assert assignment["domain"] == "h100-block-1"
    slices = assignment["slices"]
    assert [sum(s.values()) for s in slices] == [2, 2, 2, 2]
    on_node: dict[int, set[str]] = defaultdict(set)
    in_rack: dict[int, set[str]] = defaultdict(set)
    for pod in pods_of(cluster, namespace, "layered"):
        index = int(pod.metadata.labels[COMPLETION_INDEX])
        node = pod.spec.node_name
        assert node in slices[index // 2], (index, node, slices)
        on_node[index // 2].add(node)
        in_rack[index // 4].add(rack_of(cluster, node))
    assert all(len(nodes) == 1 for nodes in on_node.values()), on_node
    assert all(len(racks) == 1 for racks in in_rack.values()), in_rack
    assert len(on_node) == 4
    assert len(in_rack) == 2


def test_a_layer_written_wrong_is_refused_naming_the_annotation(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    queue = racked(objects)
    layers = [{"topology": RACK_LABEL, "size": 4}, {"topology": HOST, "size": 3}]
    body = asking(
        job("uneven", queue=queue, gpus=1, pods=4, nodes=h100(4, 5)), **{OURS: json.dumps(layers)}
    )
    body["spec"]["completionMode"] = "Indexed"
    create(cluster, namespace, body)
    status = judged(objects, "uneven")["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "InvalidSpec")
    assert status["message"].startswith(
        f"{TPL}[{OURS}][1].size: 3 does not divide the size of the layer above (4)"
    )
