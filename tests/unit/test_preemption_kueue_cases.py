"""Preemption where Kueue's answer was better than ours (issue 24, "Preemption"), on nodes
placed so that placement does not change the answer.

- Reclaim after the preemptor's own victims: a gang over its nominal only through its
  own lower-priority gangs evicts them *and* takes back what others borrow (Kueue's
  attempt without borrowing).
- A lender is borrowing only while it is: once one of its gangs is taken it may be
  back within its nominal, and its other gangs run within its own quota.
- In a fair-sharing cohort ``borrowWithinCohort`` is not applied (Kueue's fair
  preemption ignores it).
"""

from __future__ import annotations

from queue_controller.core import (
    Cohort,
    PriorityClass,
    Reason,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.model.objects import (
    BorrowPolicy,
    Preemption,
    ReclaimPolicy,
    TeamQuota,
    WithinPolicy,
)
from tests.builders import GPU, gang, gpu_node, gpus, queue, running_pod, snapshot, template

PRIORITIES = [PriorityClass("high", 1000), PriorityClass("low", 10)]


def running(
    name: str, node: str, gpus_each: int, created: float, q: str, priority: str = "low"
) -> tuple[Workload, object]:
    workload = gang(
        name,
        1,
        gpus_each,
        queue=q,
        phase=WorkloadPhase.ADMITTED,
        created=created,
        placement={node: 1},
        pod_template=template(gpus_each, priority_class=priority),
    )
    return workload, running_pod(node, gpus_each, name=f"{name}-0", workload=workload.key)


def decide(
    admitted: list[tuple[Workload, object]],
    pending: Workload,
    quotas: list[TeamQuota],
    nodes: int,
    cohorts: tuple[Cohort, ...] = (),
) -> object:
    result = schedule(
        snapshot(
            nodes=[gpu_node(f"n{i}", 8) for i in range(nodes)],
            pods=[pod for _, pod in admitted],
            workloads=[*(w for w, _ in admitted), pending],
            quotas=quotas,
            queues=[queue("qa", "a"), queue("qb", "b"), queue("qd", "d")],
            priority_classes=PRIORITIES,
            cohorts=cohorts,
        )
    )
    (decision,) = [d for d in result.decisions if d.workload == pending.namespaced_name]
    return decision


def test_a_gang_over_its_nominal_by_its_own_gangs_also_reclaims_from_borrowers() -> None:
    # a (nominal 12) runs a1 (8, low) on n0; b (nominal 12) borrows 4: b1 on n1, b2 on n2.
    # p (a, high) needs 12 as three 4-GPU members: a would use 20, over its nominal, so
    # judged up front it may not reclaim; evicting a1 alone frees 8 GPUs, not 12.  Kueue
    # evicts a1 (withinClusterQueue) and b's newest gang (reclaimWithinCohort): a ends at
    # its nominal, b at its own.
    policy = Preemption(
        reclaim_within_cohort=ReclaimPolicy.ANY, within_team_quota=WithinPolicy.LOWER_PRIORITY
    )
    admitted = [
        running("a1", "n0", 8, 1.0, "qa"),
        running("b1", "n1", 8, 2.0, "qb"),
        running("b2", "n2", 8, 3.0, "qb"),
    ]
    p = gang("p", 3, 4, queue="qa", created=10.0, pod_template=template(4, priority_class="high"))
    quotas = [
        TeamQuota("a", {GPU: gpus(12)}, "c", policy),
        TeamQuota("b", {GPU: gpus(12)}, "c"),
    ]
    decision = decide(admitted, p, quotas, nodes=3)
    assert decision.verdict is Verdict.PREEMPT, decision.message
    assert dict(decision.victims) == {
        "Job/ns/a1": Reason.WITHIN_TEAM_QUOTA,
        "Job/ns/b2": Reason.RECLAIM_WITHIN_COHORT,
    }
    assert sum(decision.placement.values()) == 3
    assert set(decision.placement) <= {"n0", "n2"}


def test_without_reclaim_the_gang_over_its_nominal_takes_only_its_own() -> None:
    policy = Preemption(within_team_quota=WithinPolicy.LOWER_PRIORITY)
    admitted = [
        running("a1", "n0", 8, 1.0, "qa"),
        running("b1", "n1", 8, 2.0, "qb"),
        running("b2", "n2", 8, 3.0, "qb"),
    ]
    p = gang("p", 3, 4, queue="qa", created=10.0, pod_template=template(4, priority_class="high"))
    quotas = [
        TeamQuota("a", {GPU: gpus(12)}, "c", policy),
        TeamQuota("b", {GPU: gpus(12)}, "c"),
    ]
    decision = decide(admitted, p, quotas, nodes=3)
    assert decision.verdict is Verdict.PENDING
    assert decision.victims == ()


def lender_case() -> tuple[list[tuple[Workload, object]], list[TeamQuota]]:
    """b (nominal 8) runs three 4-GPU gangs, borrowing 4: b1 and b2 on n0, b3 on n1,
    beside d's d1 (d within its nominal).  a, with nothing running, wants 8 on one node."""
    admitted = [
        running("b1", "n0", 4, 1.0, "qb"),
        running("b2", "n0", 4, 2.0, "qb"),
        running("b3", "n1", 4, 3.0, "qb"),
        running("d1", "n1", 4, 0.5, "qd"),
    ]
    quotas = [
        TeamQuota("a", {GPU: gpus(8)}, "c", Preemption(reclaim_within_cohort=ReclaimPolicy.ANY)),
        TeamQuota("b", {GPU: gpus(8)}, "c"),
        TeamQuota("d", {GPU: gpus(8)}, "c"),
    ]
    return admitted, quotas


def test_a_lender_back_within_its_nominal_loses_no_second_gang() -> None:
    # Freeing n0 would take b1 and b2, and leave b at 4 of its 8: b2 would run within b's
    # own nominal once b1 (or b3) is gone.  Kueue takes b3, finds b within its nominal,
    # spares the rest, and the gang waits; so do we.
    admitted, quotas = lender_case()
    p = gang("p", 1, 8, queue="qa", created=10.0)
    decision = decide(admitted, p, quotas, nodes=2)
    assert decision.verdict is Verdict.PENDING, decision.message
    assert decision.reason is Reason.NO_NODE_FIT
    assert decision.victims == ()


def test_a_lender_that_still_borrows_gives_back_both_gangs_of_one_node() -> None:
    # The same, with b borrowing 8 (nominal 4): taking b1 and b2 leaves b at its nominal,
    # each taken while b still borrowed, so n0 is freed (the placement-aware answer).
    admitted, quotas = lender_case()
    quotas[1] = TeamQuota("b", {GPU: gpus(4)}, "c")
    quotas[0] = TeamQuota(
        "a", {GPU: gpus(12)}, "c", Preemption(reclaim_within_cohort=ReclaimPolicy.ANY)
    )
    p = gang("p", 1, 8, queue="qa", created=10.0)
    decision = decide(admitted, p, quotas, nodes=2)
    assert decision.verdict is Verdict.PREEMPT, decision.message
    assert {key for key, _ in decision.victims} == {"Job/ns/b1", "Job/ns/b2"}
    assert decision.placement == {"n0": 1}


def test_borrow_within_cohort_is_not_applied_in_a_fair_sharing_cohort() -> None:
    # d lends its 16 GPUs; a and b borrow 8 each (a1, a2 on n1; b1, b2 on n0; low).  a's
    # gang p (high) would borrow 4 more.  a's policy: reclaimWithinCohort LowerPriority
    # and borrowWithinCohort below priority 100 (Kueue requires the first for the
    # second).  Without fair sharing borrowWithinCohort lets p take b's newest gang.  In
    # a fair-sharing cohort Kueue does not apply borrowWithinCohort: the shares decide,
    # and with p a's share (12) would be above b's without b2 (4).
    policy = Preemption(
        reclaim_within_cohort=ReclaimPolicy.LOWER_PRIORITY,
        borrow_within_cohort=BorrowPolicy.LOWER_PRIORITY,
        borrow_max_priority=100,
    )
    admitted = [
        running("a1", "n1", 4, 0.5, "qa"),
        running("a2", "n1", 4, 0.7, "qa"),
        running("b1", "n0", 4, 1.0, "qb"),
        running("b2", "n0", 4, 2.0, "qb"),
    ]
    p = gang("p", 1, 4, queue="qa", created=10.0, pod_template=template(4, priority_class="high"))
    quotas = [
        TeamQuota("a", {GPU: gpus(0)}, "c", policy),
        TeamQuota("b", {GPU: gpus(0)}, "c"),
        TeamQuota("d", {GPU: gpus(16)}, "c"),
    ]
    plain = decide(admitted, p, quotas, nodes=2)
    assert plain.verdict is Verdict.PREEMPT, plain.message
    assert plain.reason is Reason.BORROW_WITHIN_COHORT
    assert plain.victims == (("Job/ns/b2", Reason.BORROW_WITHIN_COHORT),)
    fair = decide(admitted, p, quotas, nodes=2, cohorts=(Cohort("c", fair_sharing=True),))
    assert fair.verdict is Verdict.PENDING, fair.message
    assert fair.victims == ()
