"""``plan`` on the scattered-GPU trap of Kueue #5243: the preemption it shows frees room
on one node, where the gang fits, not the newest gangs wherever they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def test_fair_sharing_keeps_the_victims_that_pass_the_share_rule_one_by_one() -> None:
    # Kueue's "can preempt a combination of same CQ and highest user": one of b's gangs
    # passes the share rule and a second would not; a's own low-priority gang gives the
    # rest.  Judged on the whole set, b's two gangs broke the rule and nobody was preempted.
    (decision,) = plan_json("fair-sharing-victims-one-by-one.yaml")
    assert decision["decision"] == "Preempt", decision["message"]
    victims = {v["workload"]: v["reason"] for v in decision["victims"]}
    assert victims == {"a/a-low": "WithinTeamQuota", "b/b1": "FairSharing"}


# -- cohort trees (issue 24, item 4) and held nominal (item 3) ----------------------------


def by_workload(name: str) -> dict[str, dict[str, Any]]:
    return {d["workload"]: d for d in plan_json(name)}


def test_a_lender_reclaims_through_a_two_level_tree() -> None:
    (decision,) = plan_json("cohort-tree-reclaim.yaml")
    assert (decision["decision"], decision["reason"]) == ("Preempt", "ReclaimWithinCohort")
    assert [v["workload"] for v in decision["victims"]] == ["b1/big"]
    assert decision["placement"] == {"gpu-0": 1}


def test_borrowing_through_a_tree_names_each_cohort_it_comes_from() -> None:
    decisions = by_workload("cohort-tree-borrowing.yaml")
    assert decisions["ops/all"]["decision"] == "Admit"
    big = decisions["vision/big"]
    assert (big["decision"], big["reason"]) == ("Pending", "QuotaExceeded")
    assert "needs 12, only 8 available" in big["message"]
    mid = decisions["vision/mid"]
    assert mid["decision"] == "Admit"
    assert mid["message"].endswith(
        "(borrowing 6 nvidia.com/gpu from cohort research, 2 of it from cohort org via research)"
    )


def test_fair_preemption_takes_from_the_subtree_that_borrows_most(tmp_path: Path) -> None:
    (decision,) = plan_json("cohort-tree-fair-preemption.yaml")
    assert decision["decision"] == "Preempt"
    assert [v["workload"] for v in decision["victims"]] == ["a2/a2-2"]
    # The same quotas in one flat cohort: by the quotas' own shares, b1's newest goes.
    text = Path(dump("cohort-tree-fair-preemption.yaml")).read_text()
    flat = text.replace("cohort: dept-a\n", "cohort: org\n").replace(
        "cohort: dept-b\n", "cohort: org\n"
    )
    assert flat != text
    path = tmp_path / "flat.yaml"
    path.write_text(flat)
    (decision,) = plan_json(str(path))
    assert [v["workload"] for v in decision["victims"]] == ["b1/b1-3"]


def test_a_head_that_may_not_preempt_holds_only_its_own_idle_nominal(tmp_path: Path) -> None:
    decisions = by_workload("held-nominal-strict-fifo-head.yaml")
    assert decisions["a/head"]["reason"] == "QuotaExceeded"
    assert decisions["b/small"]["decision"] == "Admit"  # c's idle nominal is still lent
    late = decisions["d/late"]
    assert (late["decision"], late["reason"]) == ("Pending", "QuotaExceeded")
    assert late["message"].endswith("idle nominal held this cycle for a gang of a")
    # A quota that reclaims Any can always take its nominal back: it holds nothing.
    text = Path(dump("held-nominal-strict-fifo-head.yaml")).read_text()
    anyway = text.replace("reclaimWithinCohort: LowerPriority", "reclaimWithinCohort: Any")
    path = tmp_path / "reclaims-any.yaml"
    path.write_text(anyway)
    decisions = {d["workload"]: d for d in plan_json(str(path))}
    assert decisions["a/head"]["reason"] == "QuotaExceeded"
    assert decisions["d/late"]["decision"] == "Admit"  # Kueue's CanAlwaysReclaim


def test_a_foundation_team_keeps_the_nominal_it_cannot_reclaim() -> None:
    decisions = by_workload("held-nominal-foundation.yaml")
    train = decisions["foundation/train"]
    assert (train["decision"], train["reason"]) == ("Pending", "QuotaExceeded")
    batch = decisions["spare/batch"]
    assert (batch["decision"], batch["reason"]) == ("Pending", "QuotaExceeded")
    assert batch["message"].endswith("idle nominal held this cycle for a gang of foundation")
