"""``plan`` over a dump that holds Jobs and plain Pod gangs: one decision per gang, each
with its kind, decided as the controller decides it."""

from __future__ import annotations

from tests.plan.harness import dump, invoke, plan_json


def test_every_gang_is_decided_once_with_its_kind() -> None:
    decisions = plan_json("pod-gangs.yaml")
    got = {(d["kind"], d["workload"]): (d["decision"], d["reason"]) for d in decisions}
    assert got == {
        ("Job", "ml/ring"): ("Admit", "Admitted"),
        ("Pod", "ml/pods-ring"): ("Admit", "Admitted"),
        ("Pod", "ml/pods-mpi"): ("Admit", "Admitted"),
        ("Pod", "ml/pods-short"): ("Pending", "WaitingForMembers"),
        ("Pod", "ml/pods-solo"): ("Admit", "Admitted"),
        ("Pod", "ml/pods-odd"): ("Invalid", "InvalidSpec"),
    }
    workloads = [d["workload"] for d in decisions]
    assert len(workloads) == len(set(workloads)), "one decision per gang, never per pod"


def test_a_job_and_a_pod_group_of_one_name_never_share_a_plan() -> None:
    decisions = {d["workload"]: d for d in plan_json("pod-gangs.yaml")}
    job, pods = decisions["ml/ring"], decisions["ml/pods-ring"]
    assert set(job["placement"]).isdisjoint(pods["placement"])
    assert sum(job["placement"].values()) == sum(pods["placement"].values()) == 2


def test_a_gang_of_two_shapes_is_planned_pod_set_by_pod_set() -> None:
    (mpi,) = [d for d in plan_json("pod-gangs.yaml") if d["workload"] == "ml/pods-mpi"]
    by_set = mpi["podSets"]
    assert len(by_set) == 2
    sizes = sorted(sum(nodes.values()) for nodes in by_set.values())
    assert sizes == [1, 2]  # the launcher and its two workers
    total: dict[str, int] = {}
    for nodes in by_set.values():
        for node, count in nodes.items():
            total[node] = total.get(node, 0) + count
    assert total == mpi["placement"]


def test_a_group_short_of_members_says_how_many_exist() -> None:
    (short,) = [d for d in plan_json("pod-gangs.yaml") if d["workload"] == "ml/pods-short"]
    assert short["message"].startswith("2 of 3 members exist")


def test_members_that_disagree_on_the_count_are_named() -> None:
    (odd,) = [d for d in plan_json("pod-gangs.yaml") if d["workload"] == "ml/pods-odd"]
    assert "queue-controller.io/pod-group-total-count" in odd["message"]
    assert "odd-0" in odd["message"]
    assert "odd-1" in odd["message"]


def test_the_table_shows_the_pod_group_names() -> None:
    result = invoke("plan", "-f", dump("pod-gangs.yaml"), "--now", "2026-12-01T00:00:00Z")
    assert result.exit_code == 0
    assert "ml/pods-short" in result.stdout
    assert "WaitingForMembers" in result.stdout
