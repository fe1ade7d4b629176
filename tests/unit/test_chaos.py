"""``chaos`` without a cluster: what each experiment plans, how a timeline reads a gang,
and that undo puts back exactly what a run recorded (on an in-memory gateway)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
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
    assert seen.head is not None
    seen.head["spec"]["backoffLimit"] = 0
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
    assert after.head is not None
    after.head["spec"]["suspend"] = True
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
    commands = ("partial-placement", "node-loss", "gpu-fault", "gpu-steal", "controller-restart")
    for command in (*commands, "cleanup"):
        result = runner.invoke(cli, ["chaos", command, "--help"])
        assert result.exit_code == 0, result.output
        assert "--dry-run" in result.output


def test_the_fault_is_hidden_from_run_help() -> None:
    result = CliRunner().invoke(cli, ["run", "--help"])
    assert "--fault" not in result.output


def node(name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}}}


def pod(name: str, on: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"nodeName": on, "containers": [{"resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }


def test_free_gpus_counts_live_pods_on_the_node_and_leaves_out_those_leaving() -> None:
    pods = [pod("a", "n1", 2), pod("b", "n1", 3), pod("c", "n1", 4, "Succeeded"), pod("d", "n2", 8)]
    assert chaos.free_gpus(node("n1", 8), pods) == 3
    assert chaos.free_gpus(node("n1", 8), pods, leaving=["ns/b"]) == 6


def test_gpu_steal_takes_every_free_gpu_once_the_members_there_are_gone() -> None:
    seen = gang("Running", *RUNNING, placement={"n1": 1, "n2": 1})
    pods = [pod("train-a", "n1", 6), pod("other", "n1", 1), pod("train-b", "n2", 6)]
    plan = chaos.gpu_steal(seen, node("n1", 8), pods, run="gs-1")
    assert plan.nodes == ("n1",)
    assert plan.avoid == ("n1",)
    assert plan.reasons == ("PodsReadyTimeout", "MembersLost")
    assert plan.steps[0].startswith("taint Node n1")
    assert "delete Pod ns/train-a on n1" in plan.steps
    assert any("placeholder Pod ns/chaos-gs-1" in s and "(7 now)" in s for s in plan.steps)
    assert plan.steps[-1].startswith("remove the taint from Node n1")


def test_gpu_steal_before_binding_deletes_nothing() -> None:
    members = (Member("train-a", "", "Pending", True), Member("train-b", "", "Pending", True))
    seen = gang("Admitted", *members, placement={"n1": 2})
    plan = chaos.gpu_steal(seen, node("n1", 8), [], run="gs-1")
    assert not any(s.startswith("delete") for s in plan.steps)
    assert any("(8 now)" in s for s in plan.steps)


def test_gpu_steal_needs_a_planned_node_with_gpus_free() -> None:
    seen = gang("Running", *RUNNING, placement={"n1": 1, "n2": 1})
    with pytest.raises(InputError, match="no member planned on Node n3"):
        chaos.gpu_steal(seen, node("n3", 8), [], run="gs-1")
    full = [pod("x", "n1", 8)]
    with pytest.raises(InputError, match="no GPU free"):
        chaos.gpu_steal(seen, node("n1", 8), [*full, pod("train-a", "n1", 0)], run="gs-1")
    with pytest.raises(InputError, match="not admitted"):
        chaos.gpu_steal(gang("Pending"), node("n1", 8), [], run="gs-1")


def test_the_placeholder_is_bound_outside_any_queue() -> None:
    body = chaos.experiments.placeholder("chaos-gs-1", "n1", 4)
    assert body["spec"]["nodeName"] == "n1"
    assert "labels" not in body["metadata"]  # Marks.pod adds only the run label
    assert body["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "4"}


class GangGateway(gw.Gateway):
    """A Job and its PodGroup, whose phase a test sets, and the pods that delete removes."""

    def __init__(self, phase: str) -> None:
        self.group: dict[str, Any] = {"spec": {"queue": "q"}, "status": {"phase": phase}}
        self.deleted: list[str] = []
        self.pods = [{"metadata": {"name": "qc-1"}}, {"metadata": {"name": "qc-2"}}]

    def get(self, kind: gw.Resource, namespace: str, name: str) -> dict[str, Any]:
        return self.group if kind is gw.POD_GROUP else {"spec": {}}

    def list(self, kind: gw.Resource, **_: str) -> list[dict[str, Any]]:
        return self.pods if _.get("label_selector") == "app=qc" else []

    def delete(self, kind: gw.Resource, namespace: str, name: str) -> None:
        self.deleted.append(name)


def test_controller_restart_refuses_a_gang_already_running_and_a_missing_process() -> None:
    target = chaos.Target(pid=2**22 + 7)
    with pytest.raises(InputError, match="already runs"):
        chaos.controller_restart(
            gang("Running"), during="admission", target=target, pods=[], wait=1
        )
    with pytest.raises(InputError, match="no process"):
        chaos.controller_restart(
            gang("Pending"), during="admission", target=target, pods=[], wait=1
        )
    selector = chaos.Target(selector="app=qc", namespace="qc")
    with pytest.raises(InputError, match="no Pod in qc matches app=qc"):
        chaos.controller_restart(
            gang("Pending"), during="eviction", target=selector, pods=[], wait=1
        )


def test_controller_restart_kills_the_pid_at_admission_and_runs_the_restart_command(
    tmp_path: Path,
) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    marker = tmp_path / "restarted"
    plan = chaos.controller_restart(
        gang("Pending"),
        during="admission",
        target=chaos.Target(pid=victim.pid),
        pods=[],
        wait=5,
        restart_command=f"touch {marker}",
    )
    assert plan.expect == ("injected", "running")
    assert plan.once
    assert plan.steps[1] == f"kill the controller, PID {victim.pid}, with SIGKILL"
    assert plan.steps[2] == f"run `touch {marker}` to start it again"
    gateway = GangGateway("Admitted")
    plan.act(Marks(gateway, "cr-1"))
    assert victim.wait(timeout=5) == -9
    assert plan.steps[0] == "caught Job ns/train Admitted: 0 members made, 0 running"
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()


def test_controller_restart_by_selector_deletes_the_pods_after_the_eviction() -> None:
    target = chaos.Target(selector="app=qc", namespace="qc")
    plan = chaos.controller_restart(
        gang("Running", requeueCount=2), during="eviction", target=target, pods=["qc-1"], wait=5
    )
    assert plan.expect == (*chaos.PHASES, "running")
    assert not plan.once
    assert "delete Pod qc/qc-1 (its Deployment creates it again)" in plan.steps
    gateway = GangGateway("Evicted")
    evicted = {"type": "Evicted", "status": "True", "reason": "MembersLost"}
    gateway.group["status"].update(requeueCount=3, conditions=[evicted])
    plan.act(Marks(gateway, "cr-1"))
    assert gateway.deleted == ["qc-1", "qc-2"]


def test_controller_restart_gives_up_when_the_moment_never_comes() -> None:
    target = chaos.Target(selector="app=qc", namespace="qc")
    plan = chaos.controller_restart(
        gang("Running"), during="eviction", target=target, pods=["qc-1"], wait=0.3
    )
    gateway = GangGateway("Running")
    with pytest.raises(InputError, match="never reached the moment"):
        plan.act(Marks(gateway, "cr-1"))
    assert gateway.deleted == []


def test_the_timeline_marks_running_only_when_asked() -> None:
    line = Timeline(injected_at=100.0, requeues_before=0)
    assert line.observe(gang("Running", *RUNNING), 101) == []
    line.track_running = True
    assert line.observe(gang("Admitted"), 102) == []
    marks = line.observe(gang("Running", *RUNNING), 104)
    assert [(m.phase, m.seconds, m.detail) for m in marks] == [
        ("running", 4.0, "2 members running")
    ]


def test_controller_restart_needs_exactly_one_controller() -> None:
    result = CliRunner().invoke(cli, ["chaos", "controller-restart", "--job", "ns/x"])
    assert "give one of --pid and --pod-selector" in str(result.exception)
    both = ["--pid", "1", "--pod-selector", "app=qc"]
    result = CliRunner().invoke(cli, ["chaos", "controller-restart", "--job", "ns/x", *both])
    assert "give one of --pid and --pod-selector" in str(result.exception)


def test_a_violation_fails_a_run_only_once_it_has_held_for_a_cycle() -> None:
    # The objects can show a loss a moment before the controller's mark of it dates it;
    # a violation seen once and gone at the next look is not the run's verdict.
    from queue_controller.chaos.runner import Runner, Scope
    from queue_controller.check import Timing, Watch
    from queue_controller.kube.fields import describe
    from queue_controller.kube.snapshot import Located
    from tests.check.test_invariants import GPU, healthy, member

    filler = member("filler", "n1", owner="nobody")
    filler["metadata"]["ownerReferences"] = []
    filler["spec"]["containers"][0]["resources"] = {"limits": {GPU: 3}}
    objects = [*healthy(), filler]

    said: list[str] = []
    runner = Runner(
        MemoryGateway({}),
        run="r",
        timing=Timing(cycle_seconds=5),
        interval=1.0,
        say=said.append,
    )
    runner.listing = lambda: [Located(describe(o), o) for o in objects]  # type: ignore[method-assign]
    watch, everything = Watch(), Scope(frozenset(), everything=True)
    assert runner._look(everything, watch, 1000.0) == []
    assert runner._look(everything, watch, 1004.0) == []
    broken = runner._look(everything, watch, 1005.0)
    assert [v.invariant for v in broken] == [Invariant.NODE_OVERCOMMITTED]
    assert said == [f"broken: NodeOvercommitted: {broken[0].message}"]

    # Healed before the cycle was out and back again: it counts afresh from its return.
    watch = Watch()
    healed = healthy()
    assert runner._look(everything, watch, 2000.0) == []
    runner.listing = lambda: [Located(describe(o), o) for o in healed]  # type: ignore[method-assign]
    assert runner._look(everything, watch, 2003.0) == []
    runner.listing = lambda: [Located(describe(o), o) for o in objects]  # type: ignore[method-assign]
    assert runner._look(everything, watch, 2004.0) == []
    assert runner._look(everything, watch, 2008.0) == []
    assert len(runner._look(everything, watch, 2009.0)) == 1
