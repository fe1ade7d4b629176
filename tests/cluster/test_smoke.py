"""The local control plane behaves like a real cluster with GPU nodes.

These run against real kube-apiserver, kube-controller-manager (Job controller,
garbage collector) and kube-scheduler binaries, with kwok playing the kubelet.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from kubernetes import client

from queue_controller import nodepools
from tests.cluster.conftest import DEPLOY, ROOT, Cluster
from tests.cluster.workloads import eventually

pytestmark = pytest.mark.cluster


def gpu_job(
    name: str, *, gpus: int, parallelism: int, suspend: bool = False, runs_for: str = "2s"
) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1JobSpec(
            parallelism=parallelism,
            completions=parallelism,
            suspend=suspend,
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(
                    annotations={"pod-complete.stage.kwok.x-k8s.io/delay": runs_for}
                ),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(
                            name="train",
                            image="nvcr.io/nvidia/pytorch:25.01-py3",
                            resources=client.V1ResourceRequirements(
                                limits={"nvidia.com/gpu": str(gpus)}
                            ),
                        )
                    ],
                ),
            ),
        ),
    )


def job_pods(cluster: Cluster, namespace: str, job: str) -> list[client.V1Pod]:
    selector = f"batch.kubernetes.io/job-name={job}"
    return list(cluster.core.list_namespaced_pod(namespace, label_selector=selector).items)


def condition(conditions: list[Any] | None, kind: str) -> Any | None:
    return next((c for c in conditions or [] if c.type == kind and c.status == "True"), None)


def test_every_fake_node_is_ready_with_its_gpus(cluster: Cluster) -> None:
    expected = {n["metadata"]["name"]: n for n in nodepools.load(DEPLOY / "nodes.yaml").nodes()}
    nodes = {n.metadata.name: n for n in cluster.core.list_node().items}
    assert set(nodes) == set(expected)
    for name, node in nodes.items():
        assert condition(node.status.conditions, "Ready"), f"{name} is not Ready"
        for resource, amount in expected[name]["status"]["allocatable"].items():
            assert node.status.allocatable[resource] == amount
    assert nodes["h100-0000"].metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_gpu_job_is_placed_by_the_scheduler_runs_and_completes(
    cluster: Cluster, namespace: str
) -> None:
    cluster.batch.create_namespaced_job(namespace, gpu_job("train", gpus=2, parallelism=3))
    done = eventually(
        lambda: condition(
            cluster.batch.read_namespaced_job("train", namespace).status.conditions, "Complete"
        ),
        what="the Job to complete",
    )
    assert done.type == "Complete"
    job = cluster.batch.read_namespaced_job("train", namespace)
    assert job.status.succeeded == 3
    pods = job_pods(cluster, namespace, "train")
    assert len(pods) == 3
    gpu_nodes = {
        n.metadata.name: int(n.status.allocatable.get("nvidia.com/gpu", "0"))
        for n in cluster.core.list_node().items
    }
    for pod in pods:
        assert pod.status.phase == "Succeeded"
        assert gpu_nodes[pod.spec.node_name] >= 2, f"{pod.metadata.name} on a node without 2 GPUs"
        scheduled = condition(pod.status.conditions, "PodScheduled")
        assert scheduled is not None


def test_suspended_job_creates_no_pods_until_unsuspended(cluster: Cluster, namespace: str) -> None:
    cluster.batch.create_namespaced_job(
        namespace, gpu_job("held", gpus=1, parallelism=2, suspend=True, runs_for="1h")
    )
    # The Job controller has seen the Job once it reports it suspended.
    eventually(
        lambda: condition(
            cluster.batch.read_namespaced_job("held", namespace).status.conditions, "Suspended"
        ),
        what="the Job controller to mark the Job Suspended",
    )
    assert job_pods(cluster, namespace, "held") == []
    cluster.batch.patch_namespaced_job("held", namespace, {"spec": {"suspend": False}})
    pods = eventually(
        lambda: (
            [p for p in job_pods(cluster, namespace, "held") if p.status.phase == "Running"]
            if len(job_pods(cluster, namespace, "held")) == 2
            else None
        ),
        what="two Running pods after unsuspending",
    )
    assert len(pods) == 2


def test_job_larger_than_any_node_stays_pending_unschedulable(
    cluster: Cluster, namespace: str
) -> None:
    cluster.batch.create_namespaced_job(namespace, gpu_job("huge", gpus=64, parallelism=1))
    pod = eventually(
        lambda: next(
            (
                p
                for p in job_pods(cluster, namespace, "huge")
                if any(
                    c.type == "PodScheduled" and c.status == "False"
                    for c in p.status.conditions or []
                )
            ),
            None,
        ),
        what="the scheduler to report PodScheduled=False",
    )
    scheduled = next(c for c in pod.status.conditions if c.type == "PodScheduled")
    assert scheduled.reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in scheduled.message
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


def test_deleted_pods_go_away_without_a_kubelet(cluster: Cluster, namespace: str) -> None:
    cluster.batch.create_namespaced_job(
        namespace, gpu_job("gone", gpus=1, parallelism=2, runs_for="1h")
    )
    eventually(
        lambda: (
            len([p for p in job_pods(cluster, namespace, "gone") if p.status.phase == "Running"])
            == 2
        ),
        what="two Running pods",
    )
    cluster.batch.delete_namespaced_job("gone", namespace, propagation_policy="Foreground")
    eventually(lambda: job_pods(cluster, namespace, "gone") == [], what="the pods to be deleted")


def test_kubectl_get_nodes_shows_gpu_capacity(cluster: Cluster) -> None:
    columns = (
        "NAME:.metadata.name,GPU:.status.capacity.nvidia\\.com/gpu,"
        "MIG-3G:.status.capacity.nvidia\\.com/mig-3g\\.40gb,"
        "PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product"
    )
    rows = [
        line.split()
        for line in cluster.kubectl("get", "nodes", "-o", f"custom-columns={columns}").splitlines()
    ]
    assert rows[0] == ["NAME", "GPU", "MIG-3G", "PRODUCT"]
    by_name = {row[0]: row[1:] for row in rows[1:]}
    assert by_name["h100-0000"] == ["8", "<none>", "NVIDIA-H100-80GB-HBM3"]
    assert by_name["a100-mig-0000"] == ["<none>", "8", "NVIDIA-A100-SXM4-80GB"]
    assert by_name["l4-0000"] == ["16", "<none>", "NVIDIA-L4-SHARED"]


def test_a_second_cluster_up_says_so_and_starts_nothing(cluster: Cluster) -> None:
    local = cluster.local
    if local is None:
        pytest.skip("the session runs against a cluster it did not start")
    before = local.status()
    messages: list[str] = []
    report, local.report = local.report, messages.append
    try:
        again = local.up(nodepools.load(DEPLOY / "nodes.yaml"))
    finally:
        local.report = report
    assert messages == [
        f"a local cluster is already running (kubeconfig {local.layout.kubeconfig})"
    ]
    assert again.state is not None
    assert before.state is not None
    assert again.state.pids == before.state.pids
    command = [str(ROOT / ".venv/bin/queue-controller"), "local-cluster", "status", "-o", "json"]
    command += ["--state-dir", str(local.layout.state_dir), "--bin-dir", str(local.layout.bin_dir)]
    status = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    assert status["up"] is True
    # The control plane, and the operators if a test of this session started them.
    assert set(status["pids"]) - {"ray-operator", "training-operator"} == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    }
