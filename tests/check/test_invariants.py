"""``check`` catches each invariant broken on purpose, names it and its objects, and
passes a healthy cluster: one healthy world, and one way to break each invariant."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from queue_controller.check import Invariant, Timing, look
from queue_controller.cli import cli
from queue_controller.kube.fields import describe
from queue_controller.kube.snapshot import Located
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job, pod

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
TIMING = Timing(cycle_seconds=5, pods_ready_timeout_seconds=300)


def node(name: str, gpus: int = 4) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def team(nominal: int, *, cohort: str = "", lending: int | None = None, name: str = "team") -> Obj:
    limits: dict[str, Any] = {"nominal": nominal}
    if lending is not None:
        limits["lendingLimit"] = lending
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": {"name": name},
        "spec": {"cohort": cohort, "resources": {GPU: limits}},
    }


def member(name: str, node_name: str, owner: str = "train", **kw: Any) -> Obj:
    found = pod(name, node=node_name, owner=owner, **kw)
    found["spec"]["containers"][0]["resources"] = {"limits": {GPU: 1}}
    found["metadata"]["creationTimestamp"] = iso(100)
    return found


def admitted(
    name: str = "train", placement: dict[str, int] | None = None, **status: Any
) -> list[Obj]:
    """A 2-member Job, released, with its PodGroup and both members running where planned."""
    plan = placement or {"n1": 2}
    body = job(name, suspend=False)
    body["status"] = {"startTime": iso(100)}
    members = [
        member(f"{name}-{i}", node_name)
        for i, node_name in enumerate(n for n, c in plan.items() for _ in range(c))
    ]
    for m in members:
        m["metadata"]["ownerReferences"][0]["name"] = name
    return [body, group(name, phase="Running", placement=plan, running=2, **status), *members]


def healthy() -> list[Obj]:
    return [QUEUE, team(4), node("n1"), node("n2"), *admitted()]


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def violations(objects: list[Obj], now: float = NOW) -> list[tuple[str, tuple[str, ...]]]:
    result = look([Located(describe(o), o) for o in objects], now=now, timing=TIMING)
    assert result.unreadable == ()
    return [(v.invariant.value, v.objects) for v in result.violations]


def test_a_healthy_cluster_breaks_nothing() -> None:
    assert violations(healthy()) == []


def test_a_filler_pod_bound_past_a_node_s_allocatable() -> None:
    filler = member("filler", "n1", owner="nobody")
    filler["metadata"]["ownerReferences"] = []
    filler["spec"]["containers"][0]["resources"] = {"limits": {GPU: 3}}
    found = violations([*healthy(), filler])
    assert found == [
        (
            "NodeOvercommitted",
            ("Node n1", "Pod ns/filler", "Pod ns/train-0", "Pod ns/train-1"),
        )
    ]


def test_a_quota_used_past_its_nominal() -> None:
    # Two released 2-GPU gangs on a 2-GPU quota (no cohort to borrow from).
    objects = [QUEUE, team(2), node("n1"), node("n2"), *admitted(), *admitted("more", {"n2": 2})]
    found = violations(objects)
    assert found == [("QuotaOverdrawn", ("TeamQuota team",))]


def test_a_cohort_borrowing_what_a_lender_keeps_back() -> None:
    # team (nominal 0) borrows 2 from lender, who keeps all 4 back (lendingLimit 0).
    objects = [
        QUEUE,
        team(0, cohort="pool"),
        team(4, cohort="pool", lending=0, name="lender"),
        node("n1"),
        *admitted(),
    ]
    found = violations(objects)
    assert found == [("LendingLimitExceeded", ("TeamQuota lender", "TeamQuota team"))]


def cohort(name: str, parent: str = "", **limits: int) -> Obj:
    spec: dict[str, Any] = {"parentName": parent}
    if limits:
        spec["resources"] = {GPU: limits}
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "Cohort",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_a_cohort_lending_past_its_lending_limit_two_levels_up() -> None:
    # team (nominal 0, under dept-b) runs 2 GPUs that can only come from dept-a,
    # which lends org none of its 4 (lendingLimit 0): the lender at the root is dept-a.
    objects = [
        QUEUE,
        team(0, cohort="dept-b"),
        team(4, cohort="dept-a", name="lender"),
        cohort("org"),
        cohort("dept-a", "org", nominal=0, lendingLimit=0),
        cohort("dept-b", "org"),
        node("n1"),
        *admitted(),
    ]
    found = violations(objects)
    assert found == [("LendingLimitExceeded", ("TeamQuota lender", "TeamQuota team"))]
    # Without the limit, dept-a lends lender's idle 4 through org: nothing is broken.
    unlimited = [
        o for o in objects if o["metadata"].get("name") != "dept-a" or o["kind"] != "Cohort"
    ]
    assert violations([*unlimited, cohort("dept-a", "org")]) == []


def test_a_cohort_drawing_past_its_borrowing_limit() -> None:
    objects = [
        QUEUE,
        team(0, cohort="dept-b"),
        team(4, cohort="dept-a", name="lender"),
        cohort("org"),
        cohort("dept-a", "org"),
        cohort("dept-b", "org", nominal=0, borrowingLimit=1),
        node("n1"),
        *admitted(),
    ]
    found = violations(objects)
    assert found == [("QuotaOverdrawn", ("Cohort dept-b", "TeamQuota team"))]


def test_two_pod_groups_for_one_job() -> None:
    twin = group("train-copy", phase="Running", placement={"n1": 2})
    twin["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "train", "uid": "uid-train"}]
    found = violations([*healthy(), twin])
    assert ("AdmittedTwice", ("PodGroup ns/train", "PodGroup ns/train-copy")) in found


def test_members_beyond_the_gang_s_size() -> None:
    extra = member("train-2", "n2")
    found = violations([*healthy(), extra])
    assert ("AdmittedTwice", ("Job ns/train",)) in found


def test_a_gang_partly_placed_past_its_timeout() -> None:
    objects = healthy()
    late = find(objects, "Pod", "train-1")
    late["status"]["phase"] = "Pending"  # one member never started
    late["spec"].pop("nodeName")
    # The Queue's timeout is 60s; the gang started 100s ago.
    assert violations(objects) == [("PartiallyPlacedTooLong", ("Job ns/train",))]
    # Within its timeout plus a cycle, it is not yet broken.
    assert violations(objects, now=NOW - 36) == []


def test_a_member_replaced_long_after_the_start_counts_from_its_replacement() -> None:
    objects = healthy()
    late = find(objects, "Pod", "train-1")
    late["status"]["phase"] = "Pending"  # made again 10s ago, after a loss
    late["spec"].pop("nodeName")
    late["metadata"]["creationTimestamp"] = iso(10)
    assert violations(objects) == []
    assert violations(objects, now=NOW + 56) == [("PartiallyPlacedTooLong", ("Job ns/train",))]


def test_a_member_lost_counts_from_the_controller_s_members_lost_mark() -> None:
    objects = [o for o in healthy() if o["metadata"]["name"] != "train-1"]  # gone, not yet made
    status = find(objects, "PodGroup", "train")["status"]
    lost = {"type": "PodsReady", "status": "False", "reason": "MembersLost"}
    status["conditions"] = [{**lost, "lastTransitionTime": iso(10)}]
    assert violations(objects) == []
    status["conditions"] = []  # a controller that never noticed: judged from the start
    assert violations(objects) == [("PartiallyPlacedTooLong", ("Job ns/train",))]


def test_an_evicted_gang_that_still_runs() -> None:
    objects = healthy()
    status = find(objects, "PodGroup", "train")["status"]
    status["phase"] = "Evicted"
    status["conditions"] = [
        {"type": "Evicted", "status": "True", "reason": "PodsReadyTimeout"},
        {"type": "Admitted", "status": "False", "reason": "Evicted"},
    ]
    for condition in status["conditions"]:
        condition["lastTransitionTime"] = iso(30)
    found = violations(objects)
    assert found == [("EvictedStillHolding", ("Job ns/train", "Pod ns/train-0", "Pod ns/train-1"))]
    # Suspended, and its pods going: it holds nothing.
    find(objects, "Job", "train")["spec"]["suspend"] = True
    for name in ("train-0", "train-1"):
        find(objects, "Pod", name)["metadata"]["deletionTimestamp"] = iso(1)
    assert violations(objects) == []


def test_an_eviction_within_the_cycle_is_not_yet_broken() -> None:
    objects = healthy()
    find(objects, "PodGroup", "train")["status"]["conditions"] = [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "lastTransitionTime": iso(2)},
    ]
    assert violations(objects) == []


def test_a_member_bound_off_its_plan() -> None:
    objects = [QUEUE, team(4), node("n1"), node("n2"), *admitted(placement={"n1": 2})]
    find(objects, "Pod", "train-1")["spec"]["nodeName"] = "n2"
    assert violations(objects) == [("MemberOffPlan", ("Job ns/train",))]


def test_a_hand_edited_placement_is_caught_as_off_plan() -> None:
    # The PodGroup's status says n2, but the members run on n1.
    objects = healthy()
    find(objects, "PodGroup", "train")["status"]["placement"] = {"n2": 2}
    assert violations(objects) == [("MemberOffPlan", ("Job ns/train",))]


def sliced(nodes: tuple[str, str], slices: list[dict[str, int]]) -> list[Obj]:
    """An Indexed 2-member Job in slices of 1: member i on nodes[i]."""
    objects = [QUEUE, team(4), node("n1"), node("n2")]
    placement = {"n1": 1, "n2": 1}
    assignment = {"main": {"domain": "b", "slices": slices}}
    for thing in admitted(placement=placement, topologyAssignment=assignment):
        objects.append(thing)
    for i, where in enumerate(nodes):
        found = find(objects, "Pod", f"train-{i}")
        found["spec"]["nodeName"] = where
        found["metadata"]["labels"] = {"batch.kubernetes.io/job-completion-index": str(i)}
    return objects


def test_members_on_their_slices_break_nothing() -> None:
    assert violations(sliced(("n1", "n2"), [{"n1": 1}, {"n2": 1}])) == []


def test_members_swapped_between_slices_are_off_slice_though_on_plan() -> None:
    found = violations(sliced(("n2", "n1"), [{"n1": 1}, {"n2": 1}]))
    assert found == [("MemberOffSlice", ("Job ns/train",))]


def test_a_running_gang_is_counted_whatever_its_pod_group_says() -> None:
    # The PodGroup claims Pending, but the Job runs: its quota is counted all the same.
    objects = [QUEUE, team(2), node("n1"), node("n2"), *admitted(), *admitted("more", {"n2": 2})]
    find(objects, "PodGroup", "more")["status"] = {"phase": "Pending"}
    expected = ("QuotaOverdrawn", ("TeamQuota team",))
    assert expected in violations(objects)


# -- the command -----------------------------------------------------------------------


@pytest.fixture
def stdin_dump(tmp_path: Any) -> Any:
    def write(objects: list[Obj]) -> str:
        path = tmp_path / "dump.yaml"
        path.write_text(yaml.safe_dump_all(objects))
        return str(path)

    return write


def test_the_command_exits_0_on_a_healthy_dump(stdin_dump: Any) -> None:
    result = CliRunner().invoke(cli, ["check", "-f", stdin_dump(healthy()), "--now", iso(0)])
    assert result.exit_code == 0, result.output
    assert "all invariants hold" in result.output


def test_the_command_exits_1_and_names_the_invariant(stdin_dump: Any) -> None:
    objects = healthy()
    find(objects, "Pod", "train-1")["spec"]["nodeName"] = "n2"
    path = stdin_dump(objects)
    table = CliRunner().invoke(cli, ["check", "-f", path, "--now", iso(0)])
    assert table.exit_code == 1
    assert "MemberOffPlan" in table.output
    out = CliRunner().invoke(cli, ["check", "-f", path, "--now", iso(0), "-o", "json"])
    assert out.exit_code == 1
    (violation,) = json.loads(out.output)["violations"]
    assert violation["invariant"] == Invariant.MEMBER_OFF_PLAN.value
    assert violation["objects"] == ["Job ns/train"]


def test_a_bad_duration_names_the_option(stdin_dump: Any) -> None:
    result = CliRunner().invoke(cli, ["check", "-f", stdin_dump(healthy()), "--cycle", "soon"])
    assert result.exit_code != 0
    assert "--cycle" in str(result.exception) or "--cycle" in result.output


def test_every_invariant_is_tested_here() -> None:
    with open(__file__) as own:
        source = own.read()
    for invariant in Invariant:
        assert f'"{invariant.value}"' in source, invariant


def test_a_watch_reports_each_violation_once_and_exits_1(stdin_dump: Any) -> None:
    objects = healthy()
    find(objects, "Pod", "train-1")["spec"]["nodeName"] = "n2"
    args = ["check", "-f", stdin_dump(objects), "--now", iso(0), "--watch", "--for", "0.5s"]
    result = CliRunner().invoke(cli, [*args, "--interval", "0.1s", "-o", "json"])
    assert result.exit_code == 1
    events = [json.loads(line) for line in result.output.splitlines()]
    assert [e["event"] for e in events] == ["violated", "summary"]
    assert events[0]["invariant"] == "MemberOffPlan"
    assert events[-1]["looks"] >= 2


def test_a_watch_of_a_healthy_dump_exits_0(stdin_dump: Any) -> None:
    args = ["check", "-f", stdin_dump(healthy()), "--now", iso(0), "--watch", "--for", "0.3s"]
    result = CliRunner().invoke(cli, [*args, "--interval", "0.1s"])
    assert result.exit_code == 0, result.output
    assert "all invariants held over" in result.output
