"""Queues, quotas and Jobs for the controller's tests on the real local control plane."""

from __future__ import annotations

import re
import secrets
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:  # conftest imports this module for its fixtures
    from tests.cluster.conftest import Cluster

T = TypeVar("T")
GROUP, VERSION = "queue-controller.io", "v1alpha1"
GPU = "nvidia.com/gpu"


def eventually(probe: Callable[[], T | None], *, timeout: float = 60, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.25)


class Objects:
    """Our custom objects for one test, removed at the end."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.api = client.CustomObjectsApi(cluster.api)
        self.cluster, self.namespace = cluster, namespace
        self.quotas: list[str] = []
        self.topologies: list[str] = []
        self.cohorts: list[str] = []

    def team_quota(
        self,
        gpus: int | str,
        *,
        cohort: str = "",
        borrowing: int | None = None,
        lending: int | None = None,
    ) -> str:
        name = f"{self.namespace[:40]}-{secrets.token_hex(2)}"
        limits: dict[str, Any] = {"nominal": gpus}
        if borrowing is not None:
            limits["borrowingLimit"] = borrowing
        if lending is not None:
            limits["lendingLimit"] = lending
        spec: dict[str, Any] = {"resources": {GPU: limits}}
        if cohort:
            spec["cohort"] = cohort
        self.api.create_cluster_custom_object(
            GROUP,
            VERSION,
            "teamquotas",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TeamQuota",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        self.quotas.append(name)
        return name

    def queue(
        self,
        name: str,
        team: str,
        *,
        ordering: str = "BestEffortFIFO",
        timeout: int | None = None,
        backoff_limit: int | None = None,
        topology: str = "",
        on_node_failure: str = "",
    ) -> str:
        spec: dict[str, Any] = {
            "teamQuota": team,
            "ordering": ordering,
            "requeue": {"backoffBaseSeconds": 1, "backoffMaxSeconds": 4},
        }
        if topology:
            spec["topologyName"] = topology
        if on_node_failure:
            spec["onNodeFailure"] = on_node_failure
        if timeout is not None:
            spec["podsReadyTimeoutSeconds"] = timeout
        if backoff_limit is not None:
            spec["requeue"]["backoffLimit"] = backoff_limit
        self.api.create_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            "queues",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        return name

    def topology(self, *labels: str, placement: str = "") -> str:
        """A Topology of these node labels, broadest first (``placement``: its
        spec.placement, BestFit or Balanced; absent when empty)."""
        name = f"{self.namespace[:40]}-{secrets.token_hex(2)}"
        spec: dict[str, Any] = {"levels": [{"nodeLabel": label} for label in labels]}
        if placement:
            spec["placement"] = placement
        self.api.create_cluster_custom_object(
            GROUP,
            VERSION,
            "topologies",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Topology",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        self.topologies.append(name)
        return name

    def cohort(self, prefix: str, **spec: Any) -> str:
        """A Cohort named ``prefix`` and a suffix of this test's own, with ``spec``."""
        name = f"{prefix}-{secrets.token_hex(3)}"
        self.api.create_cluster_custom_object(
            GROUP,
            VERSION,
            "cohorts",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "Cohort",
                "metadata": {"name": name},
                "spec": spec,
            },
        )
        self.cohorts.append(name)
        return name

    def pod_group(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.api.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, "podgroups", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def phase(self, name: str, *phases: str) -> dict[str, Any] | None:
        group = self.pod_group(name)
        if group is not None and group.get("status", {}).get("phase") in phases:
            return group
        return None

    def reason(self, name: str) -> str | None:
        """The PodGroup's reason, or None until the controller has written a status:
        the PodGroup is created first, and its status follows in a later write."""
        group = self.pod_group(name)
        return None if group is None else group.get("status", {}).get("reason")

    def cleanup(self) -> None:
        for name in self.quotas:
            self.api.delete_cluster_custom_object(GROUP, VERSION, "teamquotas", name)
        for name in self.topologies:
            self.api.delete_cluster_custom_object(GROUP, VERSION, "topologies", name)
        for name in self.cohorts:
            self.api.delete_cluster_custom_object(GROUP, VERSION, "cohorts", name)


def h100(*indices: int) -> list[str]:
    return [f"h100-{i:04d}" for i in indices]


def only_on(nodes: list[str]) -> dict[str, Any]:
    """A required node affinity to these nodes: tests keep their gangs apart this way."""
    term = {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [term]}]
            }
        }
    }


def job(
    name: str,
    *,
    queue: str,
    gpus: int,
    pods: int,
    nodes: list[str],
    runs_for: str | None = "1h",
    backoff_limit: int = 0,
    label: str = "queue-controller.io/queue",
    suspend: bool | None = None,
    **pod_spec: Any,
) -> dict[str, Any]:
    annotations = {"pod-complete.stage.kwok.x-k8s.io/delay": runs_for} if runs_for else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {label: queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": backoff_limit,
            **({"suspend": suspend} if suspend is not None else {}),
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "affinity": only_on(nodes),
                    "containers": [
                        {
                            "name": "train",
                            "image": "trainer",
                            "resources": {"limits": {GPU: str(gpus)}},
                        }
                    ],
                    **pod_spec,
                },
            },
        },
    }


def create(cluster: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    created = client.BatchV1Api(cluster.api).create_namespaced_job(namespace, body)
    return cluster.api.sanitize_for_serialization(created)  # type: ignore[no-any-return]


def pods_of(cluster: Cluster, namespace: str, job_name: str) -> list[Any]:
    selector = f"batch.kubernetes.io/job-name={job_name}"
    return [
        p
        for p in cluster.core.list_namespaced_pod(namespace, label_selector=selector).items
        if p.metadata.deletion_timestamp is None
    ]


def running_on(cluster: Cluster, namespace: str, job_name: str) -> Counter[str]:
    return Counter(
        p.spec.node_name
        for p in pods_of(cluster, namespace, job_name)
        if p.status.phase == "Running"
    )


def table(text: str) -> list[dict[str, str]]:
    """kubectl's aligned table, cut at the header's column starts (cells may be empty)."""
    header, *lines = text.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return [
        {
            name: line[a:b].strip()
            for name, a, b in zip(names, starts, [*starts[1:], None], strict=True)
        }
        for line in lines
    ]


def filler(cluster: Cluster, namespace: str, node: str, gpus: int) -> None:
    """A pod outside any queue, bound straight to a node: capacity the gangs must work around."""
    cluster.core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"filler-{node}"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}
                ],
            },
        },
    )
