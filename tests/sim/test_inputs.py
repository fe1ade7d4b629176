"""The simulator reads clusters and queues exactly as `plan` reads a dump."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from queue_controller.core.model.resources import GPU
from queue_controller.core.rules.nodes import is_ready
from queue_controller.dump import load_snapshot
from queue_controller.errors import InputError
from queue_controller.sim.scenario.inputs import load_cluster, load_queues

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "deploy" / "local-cluster" / "nodes.yaml"
EXAMPLES = ROOT / "examples"
GI = 2**30


def node(name: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": "x"}},
        "spec": {},
        "status": status,
    }


def write(path: Path, *documents: Any) -> Path:
    path.write_text(yaml.safe_dump_all(documents))
    return path


def plan_snapshot(*paths: Path) -> Any:
    """What `plan -f PATH...` builds from the same files."""
    snapshot, _ = load_snapshot([(str(p), p.read_text()) for p in paths], now=0.0)
    return snapshot


# --- clusters -------------------------------------------------------------------------


def test_local_cluster_node_file() -> None:
    nodes = load_cluster(NODES)
    # h100 8, a100-mig 4, l4 3, gb200 8.
    assert len(nodes) == 23
    assert len({n.name for n in nodes}) == 23
    assert all(is_ready(n) for n in nodes)  # kwok runs them all: Ready
    by_name = {n.name: n for n in nodes}
    h100 = by_name["h100-0000"]
    # Core resources are milli-units: 8 GPUs are 8000.
    assert h100.allocatable[GPU] == 8000
    assert h100.allocatable["cpu"] == 190_000
    assert h100.allocatable["memory"] == 1900 * GI * 1000
    assert h100.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    mig = by_name["a100-mig-0003"]
    assert GPU not in mig.allocatable
    assert mig.allocatable["nvidia.com/mig-1g.10gb"] == 16_000  # 8 GPUs x 2
    assert mig.allocatable["nvidia.com/mig-3g.40gb"] == 8_000
    assert by_name["l4-0002"].allocatable[GPU] == 16_000  # 4 GPUs x 4 time-slicing replicas
    pools = [n.labels["queue-controller.io/pool"] for n in nodes]
    assert pools == ["h100"] * 8 + ["a100-mig"] * 4 + ["l4"] * 3 + ["gb200"] * 8


def test_nodepools_and_node_objects_give_the_same_nodes(tmp_path: Path) -> None:
    """A NodePools file is read as the Nodes the local cluster creates, as kwok reports them."""
    from queue_controller import nodepools

    manifests = nodepools.load(NODES).nodes()
    for manifest in manifests:
        manifest["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    dumped = write(
        tmp_path / "nodes.yaml", {"apiVersion": "v1", "kind": "List", "items": manifests}
    )
    assert load_cluster(dumped) == load_cluster(NODES)


def test_a_pool_kwok_leaves_alone_is_not_ready(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "apiVersion: queue-controller.io/v1alpha1\nkind: NodePools\npools:\n"
        "- {name: up, count: 2}\n- {name: down, count: 1, ready: false}\n"
    )
    nodes = {n.name: n for n in load_cluster(path)}
    assert sorted(nodes) == ["down-0000", "up-0000", "up-0001"]
    assert is_ready(nodes["up-0001"])
    assert not is_ready(nodes["down-0000"])
    assert nodes["up-0000"].allocatable["cpu"] == 64_000  # the pool defaults


def test_node_objects_are_converted_by_plans_reader(tmp_path: Path) -> None:
    tainted = node("gpu-2", allocatable={"cpu": "8", GPU: "4"})
    tainted["spec"] = {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]}
    path = write(
        tmp_path / "cluster.yaml",
        node(
            "gpu-1",
            allocatable={"cpu": "7500m", GPU: "8"},
            conditions=[{"type": "Ready", "status": "True"}],
        ),
        {"apiVersion": "v1", "kind": "List", "items": [tainted]},
        node("cpu-only", capacity={"cpu": "2", "memory": "4Gi"}),  # no allocatable: capacity
    )
    nodes = load_cluster(path)
    assert nodes == plan_snapshot(path).nodes
    assert [n.name for n in nodes] == ["gpu-1", "gpu-2", "cpu-only"]
    assert nodes[0].allocatable == {"cpu": 7500, GPU: 8000}
    assert is_ready(nodes[0])
    assert nodes[1].unschedulable
    assert nodes[1].taints[0].key == "k"
    assert not is_ready(nodes[1])  # no Ready condition in the file: not ready
    assert nodes[2].allocatable == {"cpu": 2000, "memory": 4 * GI * 1000}


def test_a_json_node_list(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    items = [node(f"n{i}", allocatable={GPU: "2"}) for i in range(3)]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": items}))
    assert [n.allocatable[GPU] for n in load_cluster(path)] == [2000] * 3


def test_a_bad_quantity_is_reported_as_plan_reports_it(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", node("ok"), node("bad", allocatable={"cpu": "lots"}))
    with pytest.raises(InputError) as ours:
        load_cluster(path)
    with pytest.raises(InputError) as plans:
        plan_snapshot(path)
    assert (ours.value.where, ours.value.field, ours.value.detail) == (
        plans.value.where,
        plans.value.field,
        plans.value.detail,
    )
    assert ours.value.where == f"{path} document 2 (Node/bad)"
    assert ours.value.field == "status.allocatable.cpu"


def test_a_node_listed_twice_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", node("a"), node("a"))
    with pytest.raises(InputError, match="also appears at") as caught:
        load_cluster(path)
    assert caught.value.where == f"{path} document 2 (Node/a)"


def test_other_kinds_in_a_cluster_file(tmp_path: Path) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"}}
    path = write(tmp_path / "c.yaml", node("a"), pod)
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert caught.value.where == f"{path} document 2 (Pod/x/p)"
    assert caught.value.field == "kind"
    assert "v1/Pod is not a v1/Node" in caught.value.detail


@pytest.mark.parametrize("text", ["", "---\n---\n", "apiVersion: v1\nkind: List\nitems: []\n"])
def test_a_cluster_file_without_nodes(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match="no nodes") as caught:
        load_cluster(path)
    assert caught.value.where == str(path)


def test_a_nodepools_file_whose_pools_are_all_empty(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "apiVersion: queue-controller.io/v1alpha1\nkind: NodePools\npools:\n- {name: a, count: 0}\n"
    )
    with pytest.raises(InputError, match="no nodes") as caught:
        load_cluster(path)
    assert (caught.value.where, caught.value.field) == (str(path), "pools")


def test_an_invalid_nodepools_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(
        "apiVersion: queue-controller.io/v1alpha1\nkind: NodePools\npools:\n"
        "- {name: a, count: 1, cpu: ten}\n"
    )
    with pytest.raises(InputError, match="ten") as caught:
        load_cluster(path)
    assert caught.value.where == str(path)
    assert caught.value.field == "pools.0"


def test_a_missing_cluster_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file") as caught:
        load_cluster(tmp_path / "absent.yaml")
    assert caught.value.where == str(tmp_path / "absent.yaml")


# --- queues ---------------------------------------------------------------------------


def test_the_example_queues_and_quotas() -> None:
    files = [EXAMPLES / n for n in ("namespaces.yaml", "queues.yaml", "teamquotas.yaml")]
    queues, quotas, classes, cohorts = load_queues(files)
    assert [(q.namespace, q.name, q.team_quota) for q in queues] == [
        ("research", "training", "research"),
        ("prod", "batch", "prod"),
    ]
    training, batch = queues
    assert training.pods_ready_timeout_seconds == 600
    assert training.requeue.backoff_limit == 5
    assert batch.ordering == "StrictFIFO"
    assert batch.pods_ready_timeout_seconds is None
    by_name = {q.name: q for q in quotas}
    assert by_name["research"].cohort == "gpu-pool"
    assert by_name["research"].resources[GPU].nominal == 16_000
    assert by_name["research"].resources[GPU].borrowing_limit == 8_000
    assert by_name["prod"].resources[GPU].lending_limit == 8_000
    assert classes == ()
    assert cohorts == ()
    # The very objects `plan` builds from the same files (Namespaces aside).
    plans = plan_snapshot(files[1], files[2])
    assert (queues, quotas) == (plans.queues, plans.quotas)


def test_priority_classes_are_read(tmp_path: Path) -> None:
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
    }
    path = write(tmp_path / "pc.yaml", high)
    _, _, classes, _ = load_queues([EXAMPLES / "queues.yaml", EXAMPLES / "teamquotas.yaml", path])
    assert [(c.name, c.value) for c in classes] == [("high", 1000)]


def test_cohorts_are_read_and_weights_kept(tmp_path: Path) -> None:
    quotas = [dict(q) for q in yaml.safe_load_all((EXAMPLES / "teamquotas.yaml").read_text())]
    quotas[0]["spec"]["fairSharing"] = {"weight": "2"}
    path = write(tmp_path / "quotas.yaml", *quotas)
    read = load_queues([EXAMPLES / "queues.yaml", path, EXAMPLES / "cohorts.yaml"])
    assert [(c.name, c.fair_sharing) for c in read.cohorts] == [("gpu-pool", True)]
    assert {q.name: q.fair_weight for q in read.quotas} == {"research": 2000, "prod": 1000}


def test_other_kinds_in_queue_files(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        load_queues(
            [EXAMPLES / "teamquotas.yaml", EXAMPLES / "queues.yaml", EXAMPLES / "jobs.yaml"]
        )
    assert caught.value.where.startswith(f"{EXAMPLES / 'jobs.yaml'} document 1 (Job/")
    assert caught.value.field == "kind"
    assert "unsupported kind batch/v1/Job" in caught.value.detail


def test_a_queue_whose_teamquota_is_missing() -> None:
    with pytest.raises(InputError) as caught:
        load_queues([EXAMPLES / "queues.yaml"])
    assert caught.value.where == f"{EXAMPLES / 'queues.yaml'} document 1 (Queue/research/training)"
    assert caught.value.field == "spec.teamQuota"
    assert "no TeamQuota 'research'" in caught.value.detail


def test_queue_validation_speaks_as_plan_does(tmp_path: Path) -> None:
    quotas = yaml.safe_load_all((EXAMPLES / "teamquotas.yaml").read_text())
    broken = [dict(q) for q in quotas]
    broken[1]["spec"]["resources"]["cpu"]["lendingLimit"] = "1000"  # above nominal 768
    path = write(tmp_path / "quotas.yaml", *broken)
    with pytest.raises(InputError) as ours:
        load_queues([EXAMPLES / "queues.yaml", path])
    with pytest.raises(InputError) as plans:
        plan_snapshot(EXAMPLES / "queues.yaml", path)
    assert (ours.value.where, ours.value.field, ours.value.detail) == (
        plans.value.where,
        plans.value.field,
        plans.value.detail,
    )
    assert ours.value.where == f"{path} document 2 (TeamQuota/prod)"
    assert "lendingLimit cannot exceed nominal" in ours.value.detail


def test_files_without_a_queue(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no Queue objects") as caught:
        load_queues([EXAMPLES / "teamquotas.yaml", EXAMPLES / "namespaces.yaml"])
    assert str(EXAMPLES / "teamquotas.yaml") in caught.value.where
    with pytest.raises(InputError, match="no Queue files"):
        load_queues([])
