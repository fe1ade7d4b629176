"""Preemption in the core: victims chosen by where the freed capacity lands, the fewest
and cheapest that make the whole gang fit, and never any when it would still not fit."""

from __future__ import annotations

from dataclasses import replace

from queue_controller.core import (
    PriorityClass,
    Reason,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.model.objects import (
    Preemption,
    ReclaimPolicy,
    TeamQuota,
    WithinPolicy,
)
from tests.builders import GPU, gang, gpu_node, gpus, queue, quota, running_pod, snapshot, template

RECLAIM = Preemption(reclaim_within_cohort=ReclaimPolicy.ANY)


def running(
    name: str, node: str, gpus_each: int, created: float, q: str = "more", **kw: object
) -> tuple[Workload, object]:
    workload = gang(
        name,
        1,
        gpus_each,
        queue=q,
        phase=WorkloadPhase.ADMITTED,
        created=created,
        placement={node: 1},
        **kw,
    )
    return workload, running_pod(node, gpus_each, name=f"{name}-0", workload=workload.key)


def trap(policy: Preemption = RECLAIM, need: int = 8) -> dict[str, object]:
    """Kueue #5243: the borrower's four 4-GPU gangs fill two 8-GPU nodes; the two newest
    (b3, b4) sit on different nodes."""
    gangs, pods = [], []
    for name, node, created in (
        ("b1", "n0", 1.0),
        ("b2", "n1", 2.0),
        ("b3", "n0", 3.0),
        ("b4", "n1", 4.0),
    ):
        workload, pod = running(name, node, 4, created)
        gangs.append(workload)
        pods.append(pod)
    lender = TeamQuota("lender", {GPU: gpus(8)}, "c", policy)
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0", 8), gpu_node("n1", 8)],
            pods=pods,
            workloads=[*gangs, gang("big", 1, need, queue="own", created=10.0)],
            quotas=[lender, quota("borrower", "c", gpu=gpus(8))],
            queues=[queue("own", "lender"), queue("more", "borrower")],
        )
    )
    (decision,) = result.decisions
    return {"decision": decision, "usage": result.quota_usage}


def test_reclaim_frees_one_node_not_the_two_newest_gangs() -> None:
    decision = trap()["decision"]
    assert decision.verdict is Verdict.PREEMPT
    assert decision.reason is Reason.RECLAIM_WITHIN_COHORT
    assert {key for key, _ in decision.victims} == {"Job/ns/b2", "Job/ns/b4"}
    assert decision.placement == {"n1": 1}
    assert decision.nominated == {"main": {"n1": 1}}


def test_nothing_is_preempted_by_default() -> None:
    decision = trap(Preemption())["decision"]
    assert decision.reason is Reason.QUOTA_EXCEEDED
    assert decision.victims == ()


def test_no_victim_when_the_gang_would_still_not_fit() -> None:
    # 9 GPUs in one pod fit no 8-GPU node, whoever is evicted.
    decision = trap(need=9)["decision"]
    assert decision.verdict is Verdict.PENDING
    assert decision.victims == ()


def test_a_quota_charge_after_preemption_counts_the_preemptor_not_the_victims() -> None:
    usage = trap()["usage"]
    assert usage["lender"][GPU] == 8000
    assert usage["borrower"][GPU] == 8000  # b1 and b3 still run


def within(policy: WithinPolicy, *, victim_priority: str, created: float) -> object:
    victim, pod = running(
        "low", "n0", 8, created, q="own", pod_template=template(8, priority_class=victim_priority)
    )
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0", 8)],
            pods=[pod],
            workloads=[
                victim,
                gang(
                    "urgent",
                    1,
                    8,
                    queue="own",
                    created=5.0,
                    pod_template=template(8, priority_class="high"),
                ),
            ],
            quotas=[TeamQuota("lender", {GPU: gpus(16)}, "", Preemption(within_team_quota=policy))],
            queues=[queue("own", "lender")],
            priority_classes=[PriorityClass("high", 1000), PriorityClass("low", 10)],
        )
    )
    (decision,) = result.decisions
    return decision


def test_within_team_quota_a_higher_priority_gang_preempts_a_lower_one() -> None:
    decision = within(WithinPolicy.LOWER_PRIORITY, victim_priority="low", created=1.0)
    assert decision.verdict is Verdict.PREEMPT
    assert decision.reason is Reason.WITHIN_TEAM_QUOTA
    assert decision.victims == (("Job/ns/low", Reason.WITHIN_TEAM_QUOTA),)


def test_within_team_quota_equal_priority_is_spared_unless_newer_is_allowed() -> None:
    older = within(WithinPolicy.LOWER_PRIORITY, victim_priority="high", created=1.0)
    assert older.verdict is Verdict.PENDING
    newer = within(WithinPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY, victim_priority="high", created=9.0)
    assert newer.verdict is Verdict.PREEMPT
    not_newer = within(
        WithinPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY, victim_priority="high", created=1.0
    )
    assert not_newer.verdict is Verdict.PENDING


def test_held_room_waits_for_the_victims_and_no_other_gang_takes_it() -> None:
    # The victim b4's pod is still terminating on n1; the preemptor holds n1.
    victim, pod = running("b4", "n1", 8, 1.0)
    preemptor = gang("big", 1, 8, queue="own", created=10.0, nominated={"main": {"n1": 1}})
    small = gang(
        "small",
        1,
        4,
        queue="more",
        created=11.0,
        pod_template=template(4, node_selector={"kubernetes.io/hostname": "n1"}),
    )
    base = {
        "nodes": [gpu_node("n1", 8)],
        "quotas": [
            TeamQuota("lender", {GPU: gpus(8)}, "c", RECLAIM),
            quota("borrower", "c", gpu=gpus(8)),
        ],
        "queues": [queue("own", "lender"), queue("more", "borrower")],
    }
    gone = replace(victim, phase=WorkloadPhase.FINISHED)
    waiting = schedule(snapshot(pods=[pod], workloads=[gone, preemptor, small], **base))
    by_name = {d.workload: d for d in waiting.decisions}
    assert by_name["ns/big"].reason is Reason.PREEMPTING
    assert by_name["ns/small"].verdict is Verdict.PENDING, "the held room was taken"
    freed = schedule(snapshot(pods=[], workloads=[gone, preemptor, small], **base))
    by_name = {d.workload: d for d in freed.decisions}
    assert by_name["ns/big"].verdict is Verdict.ADMIT
    assert by_name["ns/big"].placement == {"n1": 1}


def test_a_room_that_no_longer_matches_the_gang_is_not_held() -> None:
    # The gang now has 2 members but its nominated room was for 1: it is tried afresh
    # (and admitted, the node being free) instead of holding a room it cannot use.
    stale = gang("big", 2, 4, queue="own", created=10.0, nominated={"main": {"n1": 1}})
    result = schedule(
        snapshot(
            nodes=[gpu_node("n1", 8)],
            workloads=[stale],
            quotas=[TeamQuota("lender", {GPU: gpus(8)}, "c", RECLAIM)],
            queues=[queue("own", "lender")],
        )
    )
    (decision,) = result.decisions
    assert decision.verdict is Verdict.ADMIT
    assert decision.placement == {"n1": 2}
