"""``plan`` on the scattered-GPU trap of Kueue #5243: the preemption it shows frees room
on one node, where the gang fits, not the newest gangs wherever they are."""

from __future__ import annotations

import json
from pathlib import Path

from tests.plan.harness import DUMPS, dump, invoke, plan_json


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


def test_a_higher_priority_gang_preempts_the_newest_lower_one_of_its_team() -> None:
    (decision,) = plan_json("preemption-within-team.yaml")
    assert (decision["decision"], decision["reason"]) == ("Preempt", "WithinTeamQuota")
    assert decision["victims"] == [
        {"kind": "Job", "workload": "team/new", "reason": "WithinTeamQuota"}
    ]
    assert decision["placement"] == {"gpu-0": 1}


def test_a_borrowing_gang_preempts_a_lower_priority_borrower() -> None:
    (decision,) = plan_json("preemption-borrow.yaml")
    assert (decision["decision"], decision["reason"]) == ("Preempt", "BorrowWithinCohort")
    assert [v["workload"] for v in decision["victims"]] == ["b/b3"]
    assert decision["placement"] == {"gpu-1": 1}


def test_fair_sharing_takes_back_until_the_shares_would_cross() -> None:
    b1, b2, b3 = plan_json("fair-sharing.yaml")
    assert (b1["workload"], b1["decision"], b1["reason"]) == ("b/b1", "Preempt", "FairSharing")
    assert [v["workload"] for v in b1["victims"]] == ["a/a4"]
    assert (b2["decision"], b2["reason"]) == ("Preempt", "FairSharing")
    assert [v["workload"] for v in b2["victims"]] == ["a/a3"]
    assert (b3["decision"], b3["reason"]) == ("Pending", "QuotaExceeded")
    assert "weighted share would be 750 with it" in b3["message"]
    assert "(a 500)" in b3["message"]


def test_without_the_cohort_object_nobody_is_preempted() -> None:
    text = (DUMPS / "fair-sharing.yaml").read_text()
    without = "---".join(part for part in text.split("---") if "kind: Cohort" not in part)
    result = invoke("plan", "-f", "-", "--now", "2026-12-01T00:00:00Z", "-o", "json", stdin=without)
    assert result.exit_code == 0, result.output
    decisions = json.loads(result.stdout)["decisions"]
    # b is not within its nominal (0), so only reclaim-by-share could have taken back.
    assert [d["decision"] for d in decisions] == ["Pending", "Pending", "Pending"]


# Kueue's answers (issue 24): each dump's header says the case; the old answers were
# Pending QuotaExceeded, Preempt b2 and b1 (b left at half its nominal), and Preempt b2
# for BorrowWithinCohort.


def test_a_gang_over_its_nominal_by_its_own_gangs_reclaims_after_them() -> None:
    (decision,) = plan_json("preemption-reclaim-after-own.yaml")
    assert decision["decision"] == "Preempt"
    assert {v["workload"]: v["reason"] for v in decision["victims"]} == {
        "a/a1": "WithinTeamQuota",
        "b/b2": "ReclaimWithinCohort",
    }
    assert decision["placement"] == {"gpu-0": 2, "gpu-2": 1}


def test_a_lender_back_within_its_nominal_loses_no_second_gang() -> None:
    (decision,) = plan_json("preemption-lender-within-nominal.yaml")
    assert (decision["decision"], decision["reason"]) == ("Pending", "NoNodeFit")
    assert decision.get("victims", []) == []


def test_borrow_within_cohort_is_not_applied_in_a_fair_sharing_cohort() -> None:
    (decision,) = plan_json("preemption-fair-borrow-within-cohort.yaml")
    assert (decision["decision"], decision["reason"]) == ("Pending", "QuotaExceeded")
    assert "fair sharing" in decision["message"]


def test_fair_sharing_tries_both_strategies_by_default(tmp_path: Path) -> None:
    (decision,) = plan_json("fair-sharing-strategies.yaml")
    assert (decision["decision"], decision["reason"]) == ("Preempt", "FairSharing")
    assert [v["workload"] for v in decision["victims"]] == ["a/a1"]
    text = Path(dump("fair-sharing-strategies.yaml")).read_text()
    only = text.replace(
        "    enabled: true\n",
        "    enabled: true\n    preemptionStrategies: [LessThanOrEqualToFinalShare]\n",
    )
    assert only != text
    path = tmp_path / "one-strategy.yaml"
    path.write_text(only)
    (decision,) = plan_json(str(path))
    assert (decision["decision"], decision["reason"]) == ("Pending", "QuotaExceeded")
