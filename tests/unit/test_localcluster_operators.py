"""How the local cluster runs KubeRay and the training-operator (localcluster/operators.py);
the operators themselves run in tests/cluster/test_operators.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from queue_controller import nodepools
from queue_controller.cli import cli
from queue_controller.localcluster import ClusterError, Layout, LocalCluster
from queue_controller.localcluster.operators import OPERATORS, TRAINING_OPERATOR, named

BUILD = Path(__file__).resolve().parents[2] / "deploy" / "local-cluster" / "operators"


def test_operators_are_named_in_order_once_and_an_unknown_one_is_refused() -> None:
    assert [op.name for op in named(["training-operator", "kuberay", "kuberay"])] == [
        "training-operator",
        "kuberay",
    ]
    with pytest.raises(ValueError, match=r"unknown operator volcano; one of kuberay, training"):
        named(["kuberay", "volcano"])


def test_every_flag_is_filled_in() -> None:
    for op in OPERATORS.values():
        ports = {name: 40000 + i for i, name in enumerate(op.ports)}
        args = op.arguments(Path("/state/kubeconfig"), ports)
        assert "--kubeconfig=/state/kubeconfig" in args
        assert not any("{" in arg for arg in args), args
        assert f"127.0.0.1:{ports['health']}" in " ".join(args)  # loopback only


def test_the_build_script_knows_the_same_operators_and_binaries() -> None:
    script = (BUILD / "build.sh").read_text()
    binaries = dict(
        re.findall(r"\[([a-z-]+)\]=([a-z-]+)", script.split("declare -A binary=")[1].split("\n")[0])
    )
    assert binaries == {op.name: op.binary for op in OPERATORS.values()}
    for op in OPERATORS.values():
        assert (BUILD / op.name / "go.mod").read_text().count("\ntool ") == 1


def test_the_training_operators_webhook_configuration_matches_no_request() -> None:
    # It must exist, with a webhook to take the CA, for its certificate rotation to be
    # ready; the API server must never call it (it serves on loopback outside the cluster).
    (config,) = [p for p in TRAINING_OPERATOR.prerequisites if p["kind"].endswith("Configuration")]
    (webhook,) = config["webhooks"]
    assert webhook["rules"] == []
    assert [m.namespace for m in TRAINING_OPERATOR.mounts] == ["kubeflow"]


def test_operators_not_built_are_named_with_how_to_build_them(tmp_path: Path) -> None:
    layout = Layout(bin_dir=tmp_path / "bin", state_dir=tmp_path / "state", stages=tmp_path / "s")
    cluster = LocalCluster(layout, report=lambda _: None)
    with pytest.raises(ClusterError, match=r"make cluster-build OPERATORS=kuberay"):
        cluster.up(nodepools.load(BUILD.parent / "nodes.yaml"), operators=("kuberay",))
    with pytest.raises(ClusterError, match=r"unknown operator nope"):
        cluster.start_operators(("nope",))


def test_local_cluster_up_offers_operators() -> None:
    result = CliRunner().invoke(cli, ["local-cluster", "up", "--help"])
    assert result.exit_code == 0
    assert "--operators" in result.output
    assert "training-operator" in result.output
