"""``queue-controller chaos`` against the operators' kinds (issue 25): a RayJob and a
PyTorchJob, run by the real KubeRay and training-operator, broken by partial-placement and
node-loss.  Each must be evicted through its own kind (suspended: the operator deletes its
pods), give its quota back, and be admitted again, with every `check` invariant holding."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.test_chaos import chaos, chaos_marks
from tests.cluster.test_kubeflow_jobs import pytorchjob
from tests.cluster.test_operators import custom
from tests.cluster.test_ray_jobs import cluster_spec, rayjob
from tests.cluster.workloads import Objects, eventually, h100

pytestmark = pytest.mark.cluster
__all__ = ["custom"]  # the fixture that deletes the operators' objects first

# A member's pods must all run within this: a RayJob's submitter comes only once its
# cluster is ready, a few seconds after the rest.
TIMEOUT = 20


def _ray_job(nodes: list[str]) -> tuple[dict[str, Any], str, str, str]:
    return (
        rayjob("tune", "q", cluster_spec(nodes, small=2, big=4), nodes),
        "rayjobs",
        "ray.io",
        "RayJob",
    )


def _pytorch_job(nodes: list[str]) -> tuple[dict[str, Any], str, str, str]:
    body = pytorchjob("tune", queue="q", gpus=2, workers=2, nodes=nodes)
    return body, "pytorchjobs", "kubeflow.org", "PyTorchJob"


KINDS: dict[str, Callable[[list[str]], tuple[dict[str, Any], str, str, str]]] = {
    "RayJob": _ray_job,
    "PyTorchJob": _pytorch_job,
}


def admitted(
    cluster: Cluster, namespace: str, objects: Objects, kind: str, nodes: list[str]
) -> dict[str, Any]:
    objects.queue("q", objects.team_quota(64), timeout=TIMEOUT)
    body, plural, group, _ = KINDS[kind](nodes)
    api = client.CustomObjectsApi(cluster.api)
    api.create_namespaced_custom_object(group, "v1", namespace, plural, body)
    return eventually(
        lambda: objects.phase(f"{kind.lower()}-tune", "Running"),
        timeout=120,
        what=f"the {kind} to run",
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_partial_placement_of_an_operators_gang_recovers(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    custom: client.CustomObjectsApi,
    kind: str,
) -> None:
    admitted(cluster, namespace, objects, kind, h100(4, 5, 6))
    target = f"{kind}/{namespace}/tune"
    result = chaos(cluster, "partial-placement", "--job", target, "--members", "1", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for phase in ("injected", "evicted", "quota back", "requeued", "readmitted"):
        assert re.search(rf"^{phase}\s+\d+\.\ds", out, re.M), f"no {phase} in the timeline"
    assert f"{kind} suspended, no member left alive" in out or "by readmission" in out
    assert "every invariant held" in out
    assert chaos_marks(cluster) == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_node_loss_under_an_operators_gang_recovers(
    cluster: Cluster,
    operators: None,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    custom: client.CustomObjectsApi,
    kind: str,
) -> None:
    first = admitted(cluster, namespace, objects, kind, h100(1, 2, 3))
    node = sorted(first["status"]["placement"])[0]
    result = chaos(
        cluster, "node-loss", "--job", f"{kind}/{namespace}/tune", "--node", node, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "readmitted" in result.stdout
    assert "every invariant held" in result.stdout
    assert chaos_marks(cluster) == []
