"""The Cohort's fair-sharing preemption strategies (Kueue's
``fairSharing.preemptionStrategies``), tried in order; the default is Kueue's, both."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from queue_controller.api import v1alpha1
from queue_controller.core import (
    Cohort,
    FairStrategy,
    PriorityClass,
    Reason,
    Verdict,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.model.objects import Preemption, ReclaimPolicy, TeamQuota
from tests.builders import GPU, gang, gpu_node, gpus, queue, running_pod, snapshot, template

LE_FINAL = FairStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE
LT_INITIAL = FairStrategy.LESS_THAN_INITIAL_SHARE


def decide(*strategies: FairStrategy) -> object:
    """d lends 16 GPUs (it runs d1, 8, within its nominal, on n1); a borrows 8 (a1 on
    n0).  b asks for 4: with it b's share is 4/16; a's is 8/16 with a1 and 0 without.
    LessThanOrEqualToFinalShare refuses (4/16 > 0), LessThanInitialShare allows
    (4/16 < 8/16)."""
    a1 = gang("a1", 1, 8, queue="qa", phase=WorkloadPhase.ADMITTED, placement={"n0": 1})
    d1 = gang("d1", 1, 8, queue="qd", phase=WorkloadPhase.ADMITTED, placement={"n1": 1})
    reclaim = Preemption(reclaim_within_cohort=ReclaimPolicy.ANY)
    cohort = Cohort("c", fair_sharing=True)
    if strategies:
        cohort = Cohort("c", fair_sharing=True, preemption_strategies=strategies)
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0", 8), gpu_node("n1", 8)],
            pods=[
                running_pod("n0", 8, name="a1-0", workload=a1.key),
                running_pod("n1", 8, name="d1-0", workload=d1.key),
            ],
            workloads=[
                a1,
                d1,
                gang("p", 1, 4, queue="qb", created=5.0, pod_template=template(4)),
            ],
            quotas=[
                TeamQuota("a", {GPU: gpus(0)}, "c", reclaim),
                TeamQuota("b", {GPU: gpus(0)}, "c", reclaim),
                TeamQuota("d", {GPU: gpus(16)}, "c", reclaim),
            ],
            queues=[queue("qa", "a"), queue("qb", "b"), queue("qd", "d")],
            priority_classes=[PriorityClass("p", 0)],
            cohorts=(cohort,),
        )
    )
    (decision,) = result.decisions
    return decision


def test_by_default_both_strategies_and_the_second_allows_it() -> None:
    decision = decide()
    assert decision.verdict is Verdict.PREEMPT, decision.message
    assert decision.reason is Reason.FAIR_SHARING
    assert decision.victims == (("Job/ns/a1", Reason.FAIR_SHARING),)


def test_less_than_or_equal_to_final_share_alone_refuses() -> None:
    decision = decide(LE_FINAL)
    assert decision.verdict is Verdict.PENDING, decision.message
    assert decision.reason is Reason.QUOTA_EXCEEDED


def test_less_than_initial_share_alone_allows() -> None:
    assert decide(LT_INITIAL).verdict is Verdict.PREEMPT


def test_the_api_default_is_kueues() -> None:
    cohort = v1alpha1.Cohort.model_validate(
        {"apiVersion": "queue-controller.io/v1alpha1", "kind": "Cohort", "metadata": {"name": "c"}}
    )
    assert cohort.spec.fairSharing.preemptionStrategies == [LE_FINAL, LT_INITIAL]


@pytest.mark.parametrize(
    "strategies",
    [[], [LE_FINAL.value, LE_FINAL.value], ["LessThanFinalShare"], [LE_FINAL.value] * 3],
)
def test_the_api_refuses_bad_strategies(strategies: list[str]) -> None:
    body = {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "Cohort",
        "metadata": {"name": "c"},
        "spec": {"fairSharing": {"enabled": True, "preemptionStrategies": strategies}},
    }
    with pytest.raises(ValidationError, match="preemptionStrategies"):
        v1alpha1.Cohort.model_validate(body)
