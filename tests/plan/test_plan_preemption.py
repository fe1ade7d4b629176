"""``plan`` on the scattered-GPU trap of Kueue #5243: the preemption it shows frees room
on one node, where the gang fits, not the newest gangs wherever they are."""

from __future__ import annotations

from tests.plan.harness import dump, invoke, plan_json


def test_the_trap_preempts_the_two_gangs_on_one_node() -> None:
    (decision,) = plan_json("preemption-trap.yaml")
    assert (decision["decision"], decision["reason"]) == ("Preempt", "ReclaimWithinCohort")
    victims = {v["workload"] for v in decision["victims"]}
    assert victims == {"borrower/b2", "borrower/b4"}  # both on gpu-1; b3 (newer) is spared
    assert all(v["kind"] == "Job" for v in decision["victims"])
    assert decision["placement"] == {"gpu-1": 1}


def test_the_table_says_whom_it_evicts() -> None:
    result = invoke("plan", "-f", dump("preemption-trap.yaml"), "--now", "2026-12-01T00:00:00Z")
    assert result.exit_code == 0
    assert "Preempt" in result.stdout
    assert "borrower/b4" in result.stdout
    assert "1 preempt" in result.stdout
