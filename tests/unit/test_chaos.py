"""``chaos`` without a cluster: what each experiment plans, how a timeline reads a gang,
and that undo puts back exactly what a run recorded (on an in-memory gateway)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from queue_controller import chaos
from queue_controller.chaos.marks import UNDO, Marks
from queue_controller.chaos.observe import GangSeen, Member, Timeline
from queue_controller.check import Invariant, Violation
from queue_controller.cli import cli
from queue_controller.errors import InputError
from queue_controller.kube import gateway as gw


def gang(phase: str = "Running", *members: Member, **status: Any) -> GangSeen:
    group = {"spec": {"queue": "q"}, "status": {"phase": phase, **status}}
    job = {"spec": {"backoffLimit": 4, "suspend": False}}
    return GangSeen("ns", "train", job, group, members)


RUNNING = (Member("train-a", "n1", "Running", True), Member("train-b", "n2", "Running", True))


def test_partial_placement_taints_the_chosen_members_nodes_and_deletes_them() -> None:
    plan = chaos.partial_placement(
        gang("Running", *RUNNING, placement={"n1": 1, "n2": 1}), members=1
    )
    assert plan.nodes == ("n1",)
    assert plan.avoid == ("n1",)
    assert any("delete Pod ns/train-a on n1" in step for step in plan.steps)


def test_partial_placement_prefers_members_not_yet_running() -> None:
    members = (Member("train-a", "n1", "Running", True), Member("train-b", "", "Pending", True))
    plan = chaos.partial_placement(
        gang("Admitted", *members, placement={"n1": 1, "n2": 1}), members=1
    )
    assert plan.nodes == ("n2",)  # the planned node no other member holds
    assert not any("delete" in step for step in plan.steps)


@pytest.mark.parametrize("members", [0, 2, 3])
def test_partial_placement_leaves_at_least_one_member(members: int) -> None:
    with pytest.raises(InputError, match="--members"):
        chaos.partial_placement(gang("Running", *RUNNING), members=members)


def test_partial_placement_refuses_to_fail_the_job() -> None:
    seen = gang("Running", *RUNNING)
    assert seen.job is not None
    seen.job["spec"]["backoffLimit"] = 0
    with pytest.raises(InputError, match="backoffLimit is 0"):
        chaos.partial_placement(seen, members=1)


def test_nothing_is_planned_for_a_gang_not_admitted() -> None:
    with pytest.raises(InputError, match="not admitted"):
        chaos.partial_placement(gang("Pending"), members=1)


def test_the_timeline_marks_each_phase_once_in_order() -> None:
    line = Timeline(injected_at=100.0, requeues_before=0)
    assert line.observe(gang("Running", *RUNNING), 101) == []
    evicted = {"type": "Evicted", "status": "True", "reason": "MembersLost", "message": "gone"}
    after = gang("Evicted", requeueCount=1, conditions=[evicted])
    assert after.job is not None
    after.job["spec"]["suspend"] = True
    assert [m.phase for m in line.observe(after, 110)] == ["evicted", "quota back"]
    back = gang("Admitted", requeueCount=1, conditions=[evicted], placement={"n3": 2})
    assert [m.phase for m in line.observe(back, 114)] == ["requeued", "readmitted"]
    assert line.placement == {"n3": 2}
    assert [(m.phase, m.seconds) for m in line.marks] == [
        ("evicted", 10.0),
        ("quota back", 10.0),
        ("requeued", 14.0),
        ("readmitted", 14.0),
    ]


def test_an_evicted_condition_from_before_the_run_is_no_eviction() -> None:
    old = {"type": "Evicted", "status": "True", "reason": "Idle", "message": ""}
    line = Timeline(injected_at=100.0, requeues_before=1)
    assert line.observe(gang("Running", requeueCount=1, conditions=[old]), 101) == []


def test_the_scope_is_the_gang_its_nodes_and_its_quota() -> None:
    scope = chaos.Scope(frozenset({"Job ns/train", "Node n1"}))
    mine = Violation(Invariant.PARTIALLY_PLACED_TOO_LONG, ("Job ns/train",), "")
    other = Violation(Invariant.PARTIALLY_PLACED_TOO_LONG, ("Job ns/else",), "")
    assert scope.covers(mine)
    assert not scope.covers(other)


class MemoryGateway(gw.Gateway):
    """Nodes and pods in a dict: enough for marks and undo."""

    def __init__(self, nodes: dict[str, dict[str, Any]]) -> None:
        self.nodes = nodes
        self.status_patches: list[dict[str, Any]] = []

    def get(self, kind: gw.Resource, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.nodes:
            raise gw.NotFound(404, name)
        return json.loads(json.dumps(self.nodes[name]))

    def list(self, kind: gw.Resource, **_: str) -> list[dict[str, Any]]:
        return list(self.nodes.values()) if kind is gw.NODE else []

    def patch(
        self, kind: gw.Resource, namespace: str, name: str, patch: dict[str, Any], **kw: Any
    ) -> dict[str, Any]:
        if kw.get("subresource") == "status":
            self.status_patches.append(patch)
            return {}
        node = self.nodes[name]
        for section in ("labels", "annotations"):
            for key, value in patch.get("metadata", {}).get(section, {}).items():
                target = node["metadata"].setdefault(section, {})
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
        if "spec" in patch:
            node["spec"]["taints"] = patch["spec"]["taints"] or []
        return node


def test_a_taint_is_recorded_on_the_node_and_undone_by_run() -> None:
    keep = {"key": "other", "effect": "NoSchedule"}
    gateway = MemoryGateway({"n1": {"metadata": {"name": "n1"}, "spec": {"taints": [keep]}}})
    Marks(gateway, "pp-1").taint("n1")
    node = gateway.nodes["n1"]
    assert node["metadata"]["labels"][chaos.LABEL] == "pp-1"
    assert json.loads(node["metadata"]["annotations"][UNDO]) == {"taint": True}
    assert chaos.undo(gateway, run="other-run") == []
    done = chaos.undo(gateway, run="pp-1")
    assert f"remove taint {chaos.TAINT_KEY} from Node n1" in done
    assert node["spec"]["taints"] == [keep]
    assert chaos.LABEL not in node["metadata"]["labels"]


def test_a_gpu_fault_is_undone_back_to_no_report() -> None:
    gateway = MemoryGateway({"n1": {"metadata": {"name": "n1"}, "spec": {}, "status": {}}})
    meta = {"metadata": {"annotations": {"queue-controller.io/gpu-health": "{}"}}}
    Marks(gateway, "gf-1").gpu_fault("n1", meta=meta, status={"status": {"conditions": []}})
    chaos.undo(gateway, run="gf-1")
    assert "queue-controller.io/gpu-health" not in gateway.nodes["n1"]["metadata"]["annotations"]
    deleted = gateway.status_patches[-1]["status"]["conditions"][0]
    assert deleted == {"type": "GPUHealthy", "$patch": "delete"}


def test_every_chaos_command_has_help() -> None:
    runner = CliRunner()
    for command in ("partial-placement", "node-loss", "gpu-fault", "cleanup"):
        result = runner.invoke(cli, ["chaos", command, "--help"])
        assert result.exit_code == 0, result.output
        assert "--dry-run" in result.output


def test_the_fault_is_hidden_from_run_help() -> None:
    result = CliRunner().invoke(cli, ["run", "--help"])
    assert "--fault" not in result.output
