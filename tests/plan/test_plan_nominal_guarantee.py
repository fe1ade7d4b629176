"""``plan`` keeps nominal quota a guarantee (issue 12, item 0): gangs within their own
nominal go first, idle nominal is held for a gang that fits it, and the message says
where a team's nominal went."""

from __future__ import annotations

from tests.plan.harness import plan_json


def decisions() -> dict[str, dict[str, object]]:
    return {str(d["workload"]): d for d in plan_json("nominal-guarantee.yaml")}


def test_a_gang_within_its_nominal_is_tried_before_an_older_borrower() -> None:
    order = [d["workload"] for d in plan_json("nominal-guarantee.yaml")]
    assert order.index("vision/within-nominal") < order.index("speech/older-borrower")
    got = decisions()
    assert got["vision/within-nominal"]["decision"] == "Admit"
    assert got["speech/older-borrower"]["reason"] == "QuotaExceeded"


def test_a_lenders_message_names_who_borrows_its_nominal() -> None:
    message = str(decisions()["infra/needs-2"]["message"])
    assert "needs 2, only 1 available (nominal 4, 0 in use" in message
    assert "3 of its nominal is lent to batch (3)" in message


def test_idle_nominal_held_for_the_lender_is_not_lent_again() -> None:
    small = decisions()["batch/small"]
    assert small["reason"] == "QuotaExceeded"
    assert "held this cycle for a gang of infra" in str(small["message"])
