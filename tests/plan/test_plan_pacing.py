"""``plan --creation-backlog``: admission paced as the controller paces it
(core/cycle/pacing.py)."""

from __future__ import annotations

from tests.plan.harness import invoke, plan_json


def _reasons(*extra: str) -> dict[str, str]:
    return {d["workload"]: d["reason"] for d in plan_json("fifo.yaml", extra=extra)}


def test_by_default_nothing_is_paced() -> None:
    # The default is no pacing: both one-pod Jobs that fit the node are admitted.
    reasons = _reasons()
    assert reasons["a/small"] == reasons["b/other"] == "Admitted"
    assert _reasons("--creation-backlog", "0") == reasons


def test_a_backlog_of_one_pod_admits_one_job_and_holds_the_next() -> None:
    reasons = _reasons("--creation-backlog", "1")
    assert sorted([reasons["a/small"], reasons["b/other"]]) == [
        "Admitted",
        "PodCreationBacklog",
    ]
    # Gangs that are not admitted add nothing to make.
    assert reasons["a/head"] == "NoNodeFit"


def test_a_negative_backlog_is_refused_naming_the_option() -> None:
    result = invoke("plan", "--creation-backlog", "-1")
    assert result.exit_code == 2
    assert "--creation-backlog" in result.output
