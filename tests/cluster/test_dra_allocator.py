"""kube-scheduler allocates DRA ResourceClaims on kwok nodes from the ResourceSlices
the local cluster publishes (queue_controller/localcluster/devices.py).

No DRA driver runs here: these prove that the real allocator, given slices in
NVIDIA's shape, picks devices on the pod's node that match the claim's CEL
selectors, and that it leaves a pod Pending when no node has enough devices.
Findings in full: deploy/local-cluster/DRA.md.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from queue_controller import nodepools
from queue_controller.core.model.quantity import parse_quantity
from queue_controller.localcluster import devices
from tests.cluster.conftest import DEPLOY, Cluster
from tests.cluster.workloads import eventually

pytestmark = pytest.mark.cluster

GROUP, VERSION = "resource.k8s.io", "v1"
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'


def claim_template(
    cluster: Cluster, namespace: str, name: str, *, count: int, cel: str, device_class: str
) -> None:
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
                                "deviceClassName": device_class,
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


def pod(
    cluster: Cluster, namespace: str, name: str, template: str, *, node: str | None = None
) -> None:
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
        "containers": [
            {
                "name": "train",
                "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                "resources": {"claims": [{"name": "gpus"}]},
            }
        ],
    }
    if node is not None:
        # How the controller pins a gang's members to their planned nodes.
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    body: Any = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    cluster.core.create_namespaced_pod(namespace, body)


def read_pod(cluster: Cluster, namespace: str, name: str) -> Any:
    return cluster.core.read_namespaced_pod(name, namespace)


def claim_of(cluster: Cluster, namespace: str, pod_name: str) -> dict[str, Any]:
    """The ResourceClaim the resourceclaim controller made from the pod's template."""

    def name() -> str | None:
        got = read_pod(cluster, namespace, pod_name)
        statuses = got.status.resource_claim_statuses or []
        return next((s.resource_claim_name for s in statuses if s.name == "gpus"), None)

    claim: Any = client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "resourceclaims", eventually(name, what=f"{pod_name}'s claim")
    )
    return dict(claim)


def allocated_claim(cluster: Cluster, namespace: str, pod_name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        claim = claim_of(cluster, namespace, pod_name)
        return claim if claim.get("status", {}).get("allocation") else None

    return eventually(probe, what=f"{pod_name}'s claim to be allocated")


def running(cluster: Cluster, namespace: str, name: str) -> Any:
    def probe() -> Any:
        got = read_pod(cluster, namespace, name)
        return got if got.status.phase == "Running" else None

    return eventually(probe, what=f"{name} to run")


def published(cluster: Cluster, node: str) -> dict[str, dict[str, Any]]:
    """The devices of the node's slice, by name."""
    slice_: Any = client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
        GROUP, VERSION, "resourceslices", f"{node}-{devices.DRIVER}"
    )
    return {d["name"]: d for d in slice_["spec"]["devices"]}


def assert_allocated_on(claim: dict[str, Any], node: str, *, count: int) -> list[str]:
    allocation = claim["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert len(results) == count
    assert {r["pool"] for r in results} == {node}
    assert {r["driver"] for r in results} == {devices.DRIVER}
    terms = allocation["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    ]
    return [str(r["device"]) for r in results]


def test_every_gpu_node_publishes_its_slice_and_both_device_classes(cluster: Cluster) -> None:
    pools = nodepools.load(DEPLOY / "nodes.yaml")
    expected = {
        o["metadata"]["name"]: o
        for o in devices.objects(pools.pools)
        if o["kind"] == "ResourceSlice"
    }
    custom = client.CustomObjectsApi(cluster.api)
    listed: Any = custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")
    listed = listed["items"]
    assert {s["metadata"]["name"] for s in listed} >= set(expected)
    for got in listed:
        want = expected.get(got["metadata"]["name"])
        if want is None:
            continue
        assert got["spec"]["nodeName"] == want["spec"]["nodeName"]
        assert got["spec"]["pool"] == want["spec"]["pool"]
        got_devices = {d["name"]: d for d in got["spec"]["devices"]}
        assert list(got_devices) == [d["name"] for d in want["spec"]["devices"]]
        for device in want["spec"]["devices"]:
            served = got_devices[device["name"]]
            assert served["attributes"] == device["attributes"]
            # The API server writes quantities in canonical form (10240Mi as 10Gi).
            assert parse_quantity(served["capacity"]["memory"]["value"]) == parse_quantity(
                device["capacity"]["memory"]["value"]
            )
    classes: Any = custom.list_cluster_custom_object(GROUP, VERSION, "deviceclasses")
    classes = classes["items"]
    assert {c["metadata"]["name"] for c in classes} >= {devices.GPU_CLASS, devices.MIG_CLASS}


def test_scheduler_allocates_four_h100s_on_the_pods_kwok_node(
    cluster: Cluster, namespace: str
) -> None:
    claim_template(
        cluster, namespace, "four-h100", count=4, cel=H100, device_class=devices.GPU_CLASS
    )
    pod(cluster, namespace, "train", "four-h100")
    node = running(cluster, namespace, "train").spec.node_name
    assert node is not None
    claim = eventually(
        lambda: (
            (c := claim_of(cluster, namespace, "train")).get("status", {}).get("allocation") and c
        ),
        what="the claim to be allocated",
    )
    chosen = assert_allocated_on(claim, node, count=4)
    on_node = published(cluster, node)
    for name in chosen:
        attributes = on_node[name]["attributes"]
        assert attributes["type"] == {"string": "gpu"}
        assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    uid = read_pod(cluster, namespace, "train").metadata.uid
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [uid]


def test_a_pod_pinned_to_a_node_gets_its_devices_on_that_node(
    cluster: Cluster, namespace: str
) -> None:
    claim_template(
        cluster, namespace, "four-h100", count=4, cel=H100, device_class=devices.GPU_CLASS
    )
    pod(cluster, namespace, "pinned", "four-h100", node="h100-0003")
    assert running(cluster, namespace, "pinned").spec.node_name == "h100-0003"
    claim = allocated_claim(cluster, namespace, "pinned")
    assert_allocated_on(claim, "h100-0003", count=4)


def test_mig_devices_are_allocated_by_profile_on_a_mig_node(
    cluster: Cluster, namespace: str
) -> None:
    profile = 'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'
    claim_template(
        cluster, namespace, "two-3g", count=2, cel=profile, device_class=devices.MIG_CLASS
    )
    pod(cluster, namespace, "small", "two-3g")
    node = running(cluster, namespace, "small").spec.node_name
    assert node is not None
    assert node.startswith("a100-mig-")
    chosen = assert_allocated_on(allocated_claim(cluster, namespace, "small"), node, count=2)
    on_node = published(cluster, node)
    assert {on_node[n]["attributes"]["profile"]["string"] for n in chosen} == {"3g.40gb"}


def test_a_pod_asking_more_devices_than_any_node_has_stays_pending(
    cluster: Cluster, namespace: str
) -> None:
    # No node has more than 8 GPUs.
    claim_template(
        cluster, namespace, "nine-h100", count=9, cel=H100, device_class=devices.GPU_CLASS
    )
    pod(cluster, namespace, "too-big", "nine-h100")

    def unschedulable() -> Any:
        got = read_pod(cluster, namespace, "too-big")
        return next(
            (
                c
                for c in got.status.conditions or []
                if c.type == "PodScheduled" and c.reason == "Unschedulable"
            ),
            None,
        )

    why = eventually(unschedulable, what="the scheduler to give up on too-big")
    assert "cannot allocate all claims" in why.message
    assert read_pod(cluster, namespace, "too-big").status.phase == "Pending"
    assert "allocation" not in claim_of(cluster, namespace, "too-big").get("status", {})
