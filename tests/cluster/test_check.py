"""``queue-controller check`` on the real control plane: it passes a healthy cluster, and
it catches an invariant broken on purpose, naming it and the objects involved."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.conftest import ROOT, Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import (
    GPU,
    GROUP,
    VERSION,
    Objects,
    create,
    eventually,
    h100,
    job,
    running_on,
)

pytestmark = pytest.mark.cluster


def check(cluster: Cluster, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [
            str(ROOT / ".venv/bin/queue-controller"),
            "check",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "-o",
            "json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout)


def admitted_gang(cluster: Cluster, namespace: str, objects: Objects, node: str) -> None:
    objects.queue("q", objects.team_quota(gpus=16))
    create(cluster, namespace, job("gang", queue="q", gpus=2, pods=2, nodes=[node]))
    eventually(lambda: objects.phase("gang", "Running"), what="the gang running")


def test_check_passes_a_cluster_running_a_gang(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    admitted_gang(cluster, namespace, objects, h100(0)[0])
    code, report = check(cluster)
    assert (code, report["violations"]) == (0, [])
    assert report["objects"] > 10


@pytest.mark.breaks_invariants("a filler pod bound past the node's GPUs")
def test_check_catches_a_node_over_committed_by_a_filler_pod(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    (node,) = h100(1)
    admitted_gang(cluster, namespace, objects, node)
    # Bound by name, past the scheduler: 8 more GPUs on a node with 8, 4 already held.
    filler = client.V1Pod(
        metadata=client.V1ObjectMeta(name="filler"),
        spec=client.V1PodSpec(
            node_name=node,
            containers=[
                client.V1Container(
                    name="main",
                    image="filler",
                    resources=client.V1ResourceRequirements(limits={GPU: "8"}),
                )
            ],
        ),
    )
    cluster.core.create_namespaced_pod(namespace, filler)
    code, report = check(cluster)
    assert code == 1
    (violation,) = [v for v in report["violations"] if v["invariant"] == "NodeOvercommitted"]
    assert f"Node {node}" in violation["objects"]
    assert f"Pod {namespace}/filler" in violation["objects"]
    assert "12 nvidia.com/gpu" in violation["message"]


@pytest.mark.breaks_invariants("a PodGroup's planned placement edited by hand")
def test_check_catches_a_pod_group_status_edited_by_hand(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    (node,) = h100(2)
    admitted_gang(cluster, namespace, objects, node)
    assert dict(running_on(cluster, namespace, "gang")) == {node: 2}
    (elsewhere,) = h100(3)
    api = client.CustomObjectsApi(cluster.api)
    api.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "podgroups",
        "gang",
        {"status": {"placement": {node: None, elsewhere: 2}}},
    )
    code, report = check(cluster)
    assert code == 1
    (violation,) = [v for v in report["violations"] if v["invariant"] == "MemberOffPlan"]
    assert violation["objects"] == [f"Job {namespace}/gang"]
