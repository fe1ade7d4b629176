"""Our CRDs on a real API server: the same corpus the unit tests hold to the pydantic
models, now accepted or refused by kube-apiserver itself (schema, CEL rules,
strict field validation), plus the printer columns as kubectl shows them.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import ROOT, Cluster
from tests.unit.test_crds import CEL_ONLY, INVALID, VALID

pytestmark = pytest.mark.cluster
GROUP, VERSION = "queue-controller.io", "v1alpha1"
PLURALS = {
    "TeamQuota": "teamquotas",
    "Cohort": "cohorts",
    "Topology": "topologies",
    "Queue": "queues",
    "PodGroup": "podgroups",
}


def submit(cluster: Cluster, namespace: str, original: dict[str, Any]) -> ApiException | None:
    """Create the object (status through the status subresource); the API's refusal, if any."""
    obj = copy.deepcopy(original)
    status = obj.pop("status", None)
    kind, api = obj["kind"], client.CustomObjectsApi(cluster.api)
    plural = PLURALS[kind]
    group, version = obj["apiVersion"].split("/")
    name = f"{obj['metadata']['name']}-{secrets.token_hex(3)}"
    spec = obj.get("spec") or {}
    if kind == "Cohort" and spec.get("parentName") == obj["metadata"]["name"]:
        spec["parentName"] = name  # a cohort naming itself still does, renamed
    obj["metadata"] = {**obj["metadata"], "name": name}
    scoped = kind not in ("TeamQuota", "Cohort", "Topology")
    if scoped:
        obj["metadata"]["namespace"] = namespace
    try:
        if scoped:
            api.create_namespaced_custom_object(
                group, version, namespace, plural, obj, field_validation="Strict"
            )
            if status is not None:
                api.patch_namespaced_custom_object_status(
                    group, version, namespace, plural, name, {"status": status}
                )
        else:
            api.create_cluster_custom_object(group, version, plural, obj, field_validation="Strict")
            try:
                if status is not None:
                    api.patch_cluster_custom_object_status(
                        group, version, plural, name, {"status": status}
                    )
            finally:
                api.delete_cluster_custom_object(group, version, plural, name)
    except ApiException as refused:
        return refused
    return None


@pytest.mark.parametrize("obj", [pytest.param(o, id=i) for i, o in VALID.items()])
def test_api_server_accepts_valid_objects(
    cluster: Cluster, crds: None, namespace: str, obj: dict[str, Any]
) -> None:
    refused = submit(cluster, namespace, obj)
    assert refused is None, refused and refused.body


@pytest.mark.parametrize("obj", [pytest.param(o, id=i) for i, o in INVALID.items()])
def test_api_server_refuses_invalid_objects(
    cluster: Cluster, crds: None, namespace: str, obj: dict[str, Any]
) -> None:
    refused = submit(cluster, namespace, obj)
    assert refused is not None, "the API server accepted it"
    assert refused.status in (400, 404, 422)


@pytest.mark.parametrize("case", [pytest.param(c, id=i) for i, c in CEL_ONLY.items()])
def test_cel_rules_refuse_with_their_message(
    cluster: Cluster, crds: None, namespace: str, case: Any
) -> None:
    refused = submit(cluster, namespace, case.obj)
    assert refused is not None, "the API server accepted it"
    assert refused.status == 422
    assert case.message in refused.body


def test_printer_columns_tell_the_story(cluster: Cluster, crds: None, namespace: str) -> None:
    cluster.kubectl("apply", "-f", str(ROOT / "examples" / "teamquotas.yaml"))
    try:
        client.CustomObjectsApi(cluster.api).create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "queues",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Queue",
                "metadata": {"name": "training"},
                "spec": {"teamQuota": "research", "ordering": "StrictFIFO"},
            },
        )
        header, *rows = cluster.kubectl("get", "teamquotas").splitlines()
        assert header.split() == [
            "NAME",
            "COHORT",
            "GPU",
            "NOMINAL",
            "GPU",
            "USED",
            "BORROWED",
            "ADMITTED",
            "PENDING",
            "AGE",
        ]
        research = next(r.split() for r in rows if r.startswith("research"))
        assert research[1:3] == ["gpu-pool", "16"]
        header, row = cluster.kubectl("get", "qq", "-n", namespace).splitlines()
        assert header.split() == [
            "NAME",
            "TEAMQUOTA",
            "ORDERING",
            "PENDING",
            "ADMITTED",
            "RUNNING",
            "AFS",  # AFS Usage: admission fair sharing's decayed usage, when it is on
            "USAGE",
            "AGE",
        ]
        assert row.split()[:3] == ["training", "research", "StrictFIFO"]
        names = cluster.kubectl("get", "queue-controller", "-A", "-o", "name").split()
        assert "teamquota.queue-controller.io/research" in names
        assert "queue.queue-controller.io/training" in names
    finally:
        cluster.kubectl(
            "delete", "-f", str(ROOT / "examples" / "teamquotas.yaml"), "--ignore-not-found"
        )


def test_topology_levels_are_immutable_and_listed(cluster: Cluster, crds: None) -> None:
    api = client.CustomObjectsApi(cluster.api)
    name = f"racks-{secrets.token_hex(3)}"
    levels = [
        {"nodeLabel": "topology.queue-controller.io/block"},
        {"nodeLabel": "topology.queue-controller.io/rack"},
        {"nodeLabel": "kubernetes.io/hostname"},
    ]
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": levels},
    }
    api.create_cluster_custom_object(GROUP, VERSION, "topologies", body, field_validation="Strict")
    try:
        with pytest.raises(ApiException) as refused:
            api.patch_cluster_custom_object(
                GROUP, VERSION, "topologies", name, {"spec": {"levels": levels[1:]}}
            )
        assert refused.value.status == 422
        assert "levels are immutable" in refused.value.body
        header, *rows = cluster.kubectl("get", "topo").splitlines()
        assert header.split() == ["NAME", "BROADEST", "NARROWEST", "AGE"]
        row = next(r for r in rows if r.startswith(name))
        assert row.split()[1:3] == ["topology.queue-controller.io/block", "kubernetes.io/hostname"]
    finally:
        api.delete_cluster_custom_object(GROUP, VERSION, "topologies", name)
