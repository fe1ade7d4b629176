"""Gangs whose members take GPUs through DRA claims, admitted by the real controller.

The local cluster publishes one ResourceSlice of 8 H100s for each h100 node
(queue_controller/localcluster/devices.py) and kube-scheduler allocates claims
from them (deploy/local-cluster/DRA.md).  The controller reads the slices, the
classes, the claims and the claim templates, and admits a gang only where each
member's claim can be allocated on its planned node:

* a 2x4-H100 gang runs, each member's claim allocated on the member's node,
  which is the node the PodGroup planned, with devices its selector matches;
* when other pods' claims leave fewer than 4 free H100s on every node (but
  enough in total), the gang waits with NoNodeFit naming its template and request;
* a template whose selector does not parse is refused by the API server itself, so
  the controller never sees one (plan's dumps can hold one: tests/plan/test_plan_dra.py).
"""

from __future__ import annotations

import secrets
from collections import Counter
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queue_controller.localcluster import devices
from tests.cluster.conftest import Cluster
from tests.cluster.workloads import Objects, create, eventually, h100, job, pods_of

pytestmark = pytest.mark.cluster

GROUP, VERSION = "resource.k8s.io", "v1"
PRODUCT = "NVIDIA H100 80GB HBM3"
H100 = f'device.attributes["gpu.nvidia.com"].productName == "{PRODUCT}"'
BROKEN = 'device.attributes["gpu.nvidia.com"].productName =='
HOST = "kubernetes.io/hostname"


def claim_template(cluster: Cluster, namespace: str, name: str, *, count: int, cel: str) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {
                                "deviceClassName": devices.GPU_CLASS,
                                "count": count,
                                "selectors": [{"cel": {"expression": cel}}],
                            },
                        }
                    ]
                }
            }
        },
    }
    client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaimtemplates", body
    )


def dra_quota(objects: Objects, gpus: int) -> str:
    """A TeamQuota of ``gpus`` devices of the class gpu.nvidia.com (its quota resource)."""
    name = f"{objects.namespace[:40]}-{secrets.token_hex(2)}"
    objects.api.create_cluster_custom_object(
        "queue-controller.io",
        "v1alpha1",
        "teamquotas",
        {
            "apiVersion": "queue-controller.io/v1alpha1",
            "kind": "TeamQuota",
            "metadata": {"name": name},
            "spec": {"resources": {devices.GPU_CLASS: {"nominal": gpus}}},
        },
    )
    objects.quotas.append(name)
    return name


def dra_job(name: str, *, queue: str, template: str, pods: int, nodes: list[str]) -> dict[str, Any]:
    """A queued Job whose every pod takes its GPUs from a claim made from ``template``."""
    body = job(name, queue=queue, gpus=0, pods=pods, nodes=nodes)
    spec = body["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    body["spec"]["completionMode"] = "Indexed"
    return body


def filler(cluster: Cluster, namespace: str, node: str, template: str) -> str:
    """A pod outside any queue, pinned to ``node``, holding devices there through a claim."""
    name = f"filler-{node}"
    body: Any = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {HOST: node},
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [
                {"name": "c", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}
            ],
        },
    }
    cluster.core.create_namespaced_pod(namespace, body)
    return name


def claim_of_pod(cluster: Cluster, namespace: str, pod: Any) -> dict[str, Any]:
    statuses = pod.status.resource_claim_statuses or []
    claim_name = next(s.resource_claim_name for s in statuses if s.name == "gpus")
    got: Any = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", claim_name
    )
    return dict(got)


def slice_devices(cluster: Cluster, node: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """The pool of the node's ResourceSlice and its devices by name."""
    slices: Any = client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        GROUP, VERSION, "resourceslices"
    )
    (found,) = [s for s in slices["items"] if s["spec"].get("nodeName") == node]
    return found["spec"]["pool"]["name"], {d["name"]: d for d in found["spec"]["devices"]}


def running_pods(cluster: Cluster, namespace: str, name: str, count: int) -> list[Any]:
    def probe() -> list[Any] | None:
        pods = pods_of(cluster, namespace, name)
        running = [p for p in pods if p.status.phase == "Running"]
        return running if len(running) == count else None

    return eventually(probe, what=f"{count} pods of {name} to run")


def judged(objects: Objects, name: str) -> dict[str, Any]:
    return eventually(
        lambda: (g := objects.pod_group(name)) and g.get("status", {}).get("reason") and g,
        what=f"{name} to be judged",
    )


def test_a_gang_of_dra_claims_runs_on_its_planned_nodes_with_matching_devices(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    queue = objects.queue("q", dra_quota(objects, 64))
    claim_template(cluster, namespace, "h100-x4", count=4, cel=H100)
    create(
        cluster,
        namespace,
        dra_job("fits", queue=queue, template="h100-x4", pods=2, nodes=h100(4, 5, 6, 7)),
    )
    group = eventually(lambda: objects.phase("fits", "Admitted", "Running"), what="admission")
    pods = running_pods(cluster, namespace, "fits", 2)
    placement = group["status"]["placement"]
    assert sum(placement.values()) == 2, placement
    assert Counter(p.spec.node_name for p in pods) == Counter(placement), (placement, pods)
    for pod in pods:
        node = pod.spec.node_name

        def allocated(p: Any = pod) -> dict[str, Any] | None:
            claim = claim_of_pod(cluster, namespace, p)
            return claim if claim.get("status", {}).get("allocation") else None

        claim = eventually(allocated, what=f"{pod.metadata.name}'s claim to be allocated")
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 4
        pool, on_node = slice_devices(cluster, node)
        for result in results:
            assert (result["driver"], result["pool"], result["request"]) == (
                devices.DRIVER,
                pool,
                "gpus",
            )
            assert result["device"] in on_node
            attributes = on_node[result["device"]]["attributes"]
            assert attributes["productName"] == {"string": PRODUCT}
        reserved = [r["name"] for r in claim["status"]["reservedFor"]]
        assert reserved == [pod.metadata.name]


def test_a_gang_waits_when_no_node_has_its_devices_free_though_the_total_would_do(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    nodes = h100(4, 5, 6)
    claim_template(cluster, namespace, "h100-x5", count=5, cel=H100)
    for node in nodes:
        filler(cluster, namespace, node, "h100-x5")
    # 5 of 8 taken on each node: 9 free on the three, 3 at most on any one.
    for node in nodes:

        def runs(n: str = node) -> bool:
            got: Any = cluster.core.read_namespaced_pod(f"filler-{n}", namespace)
            return bool(got.status.phase == "Running")

        eventually(runs, what=f"filler-{node} to run")
    queue = objects.queue("q", dra_quota(objects, 64))
    claim_template(cluster, namespace, "h100-x4", count=4, cel=H100)
    create(
        cluster,
        namespace,
        dra_job("trapped", queue=queue, template="h100-x4", pods=2, nodes=nodes),
    )
    status = judged(objects, "trapped")["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "NoNodeFit"), status
    message = status["message"]
    assert "ResourceClaimTemplate" in message, message
    assert "h100-x4" in message, message
    assert "request gpus" in message, message
    trapped: Any = cluster.batch.read_namespaced_job("trapped", namespace)
    assert trapped.spec.suspend is True
    assert not any(p.spec.node_name for p in pods_of(cluster, namespace, "trapped"))


def test_the_api_server_refuses_a_template_whose_selector_does_not_parse(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    """A broken selector never reaches the controller: the API server compiles DRA selectors
    when a template is written and refuses it, naming the field.  (A broken selector that
    does reach it, as in a dump, makes the gang Invalid: tests/plan/test_plan_dra.py.)"""
    with pytest.raises(ApiException) as refused:
        claim_template(cluster, namespace, "h100-broken", count=4, cel=BROKEN)
    assert refused.value.status == 422
    body = str(refused.value.body)
    assert "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression" in body, body
    templates: Any = client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaimtemplates"
    )
    assert templates["items"] == []
