"""Fair sharing in the core: a fair-sharing cohort's borrowing goes to the quota with
the lowest weighted share, and a quota above its share gives back to one below it,
never so far that the two would swap places."""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from queue_controller.core import (
    BoundPod,
    Cohort,
    CycleResult,
    Decision,
    PriorityClass,
    Reason,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.model.objects import Preemption, ReclaimPolicy, TeamQuota
from queue_controller.core.quota.fairshare import INFINITE, FairShares
from queue_controller.core.quota.ledger import QuotaLedger
from tests.builders import GPU, gang, gpu_node, gpus, queue, running_pod, snapshot, template

FAIR = (Cohort("c", fair_sharing=True),)
RECLAIM = Preemption(reclaim_within_cohort=ReclaimPolicy.ANY)


def team(name: str, nominal: int, *, weight: int = 1000, policy: Preemption = RECLAIM) -> TeamQuota:
    return TeamQuota(name, {GPU: gpus(nominal)}, "c", policy, fair_weight=weight)


def quotas(weight_a: int = 1000, weight_b: int = 1000) -> list[TeamQuota]:
    # The lender owns the whole cluster and lends it; a and b own nothing.
    return [team("lender", 24), team("a", 0, weight=weight_a), team("b", 0, weight=weight_b)]


QUEUES = [queue("la", "lender"), queue("qa", "a"), queue("qb", "b")]


def admitted_gpus(decisions: Iterable[Decision], prefix: str) -> int:
    return sum(
        4 for d in decisions if d.verdict is Verdict.ADMIT and d.workload.startswith(f"ns/{prefix}")
    )


def borrowing_race(cohorts: tuple[Cohort, ...], weight_a: int = 1000) -> tuple[int, int]:
    """Three 8-GPU nodes; a's eight 4-GPU gangs are all older than b's eight."""
    gangs = [gang(f"a{i}", 1, 4, queue="qa", created=i) for i in range(8)]
    gangs += [gang(f"b{i}", 1, 4, queue="qb", created=100 + i) for i in range(8)]
    result = schedule(
        snapshot(
            nodes=[gpu_node(f"n{i}", 8) for i in range(3)],
            workloads=gangs,
            quotas=quotas(weight_a),
            queues=QUEUES,
            cohorts=cohorts,
        )
    )
    return admitted_gpus(result.decisions, "a"), admitted_gpus(result.decisions, "b")


def test_without_fair_sharing_the_older_gangs_take_everything() -> None:
    assert borrowing_race(()) == (24, 0)
    assert borrowing_race((Cohort("c", fair_sharing=False),)) == (24, 0)
    assert borrowing_race((Cohort("other", fair_sharing=True),)) == (24, 0)


def test_fair_sharing_splits_the_borrowing_evenly() -> None:
    assert borrowing_race(FAIR) == (12, 12)


def test_fair_sharing_splits_by_weight() -> None:
    assert borrowing_race(FAIR, weight_a=2000) == (16, 8)


def test_priority_still_orders_gangs_within_one_quota() -> None:
    # One node's room for one 8-GPU gang: a's newer, higher-priority gang gets it,
    # though its older one asks for the same.
    urgent = gang(
        "a-late", 1, 8, queue="qa", created=500, pod_template=template(8, priority_class="high")
    )
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0", 8)],
            workloads=[gang("a-early", 1, 8, queue="qa", created=1), urgent],
            quotas=quotas(),
            queues=QUEUES,
            cohorts=FAIR,
            priority_classes=[PriorityClass("high", 100)],
        )
    )
    verdicts = {d.workload: d.verdict for d in result.decisions}
    assert verdicts == {"ns/a-late": Verdict.ADMIT, "ns/a-early": Verdict.PENDING}


def test_the_weighted_share_is_reported_as_kueue_does() -> None:
    result = schedule(
        snapshot(
            nodes=[gpu_node(f"n{i}", 8) for i in range(3)],
            workloads=[gang("a0", 1, 4, queue="qa", created=1)],
            quotas=quotas(weight_a=2000),
            queues=QUEUES,
            cohorts=FAIR,
        )
    )
    # a borrows 4 of the 24 the cohort lends, at weight 2: 4/24/2 = 0.0833 -> 83.
    assert result.weighted_shares == {"lender": 0, "a": 83, "b": 0}


def test_a_borrowing_quota_of_weight_zero_has_an_infinite_share() -> None:
    ledger = QuotaLedger([team("lender", 8), team("z", 0, weight=0)], {"z": {GPU: 1000}})
    shares = FairShares(ledger, FAIR)
    assert shares.share("z") == INFINITE
    assert shares.weighted_share("z") == 2**63 - 1
    assert shares.share("lender") == 0
    assert shares.share("z", {GPU: -1000}) == 0


def test_shares_are_exact() -> None:
    ledger = QuotaLedger(
        [team("lender", 12), team("a", 0), team("b", 0)], {"a": {GPU: 4000}, "b": {GPU: 4000}}
    )
    shares = FairShares(ledger, FAIR)
    assert shares.share("a") == shares.share("b") == Fraction(1, 3)


def holding(name: str, q: str, node: str, created: float) -> tuple[Workload, BoundPod]:
    workload = gang(
        name, 1, 4, queue=q, phase=WorkloadPhase.ADMITTED, created=created, placement={node: 1}
    )
    return workload, running_pod(node, 4, name=f"{name}-0", workload=workload.key)


def a_holds_everything(
    pending: list[Workload], quotas: list[TeamQuota] | None = None
) -> CycleResult:
    """a borrows all 16 GPUs of two nodes (four 4-GPU gangs); b asks."""
    held = [holding(f"a{i}", "qa", f"n{i % 2}", float(i)) for i in range(4)]
    return schedule(
        snapshot(
            nodes=[gpu_node("n0", 8), gpu_node("n1", 8)],
            pods=[pod for _, pod in held],
            workloads=[w for w, _ in held] + pending,
            quotas=quotas or [team("lender", 16), team("a", 0), team("b", 0)],
            queues=QUEUES,
            cohorts=FAIR,
        )
    )


def decision_of(result: CycleResult, workload: str) -> Decision:
    (decision,) = [d for d in result.decisions if d.workload == workload]
    return decision


B0 = gang("b0", 1, 4, queue="qb", created=100)


def test_a_quota_above_its_share_gives_back_to_one_below_it() -> None:
    pending = [gang(f"b{i}", 1, 4, queue="qb", created=100 + i) for i in range(3)]
    result = a_holds_everything(pending)
    by_name = {d.workload: d for d in result.decisions}
    # b's first gang: 4/16 after, a's 12/16 without its newest: taken.  b's second:
    # 8/16 against a's 8/16: at or above, taken.  b's third: 12/16 against 4/16: no.
    assert by_name["ns/b0"].verdict is Verdict.PREEMPT
    assert by_name["ns/b0"].reason is Reason.FAIR_SHARING
    assert by_name["ns/b0"].victims == (("Job/ns/a3", Reason.FAIR_SHARING),)
    assert by_name["ns/b1"].verdict is Verdict.PREEMPT
    assert by_name["ns/b1"].victims == (("Job/ns/a2", Reason.FAIR_SHARING),)
    assert by_name["ns/b2"].verdict is Verdict.PENDING
    assert by_name["ns/b2"].reason is Reason.QUOTA_EXCEEDED


def test_no_preemption_without_a_reclaim_policy() -> None:
    quiet = [team("lender", 16), team("a", 0), team("b", 0, policy=Preemption())]
    decision = decision_of(a_holds_everything([B0], quiet), "ns/b0")
    assert decision.verdict is Verdict.PENDING


def test_a_gang_that_would_overtake_its_victim_preempts_nothing() -> None:
    # b's 12-GPU gang would leave b at 12/16 and a at 4/16: it waits.
    big = gang("b-big", 3, 4, queue="qb", created=100)
    (decision,) = [d for d in a_holds_everything([big]).decisions if d.workload == "ns/b-big"]
    assert decision.verdict is Verdict.PENDING
    assert decision.victims == ()


def test_the_lender_reclaims_by_its_nominal_whatever_the_shares() -> None:
    # The lender is within its nominal (share 0 with its gang): it always may.
    gang8 = gang("l0", 1, 8, queue="la", created=100)
    (decision,) = [d for d in a_holds_everything([gang8]).decisions if d.workload == "ns/l0"]
    assert decision.verdict is Verdict.PREEMPT
    assert decision.reason is Reason.RECLAIM_WITHIN_COHORT
    assert len(decision.victims) == 2
    assert len(decision.placement) == 1  # both victims on one node


def test_victims_come_from_the_quota_furthest_above_its_share() -> None:
    # a holds 12, b holds 4 of the lender's 16; c (nothing) asks for 4: a gives.
    held = [holding(f"a{i}", "qa", f"n{i % 2}", float(i)) for i in range(3)]
    held.append(holding("b0", "qb", "n1", 10.0))
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0", 8), gpu_node("n1", 8)],
            pods=[pod for _, pod in held],
            workloads=[w for w, _ in held] + [gang("c0", 1, 4, queue="qc", created=100)],
            quotas=[team("lender", 16), team("a", 0), team("b", 0), team("c", 0)],
            queues=[*QUEUES, queue("qc", "c")],
            cohorts=FAIR,
        )
    )
    (decision,) = [d for d in result.decisions if d.workload == "ns/c0"]
    assert decision.verdict is Verdict.PREEMPT
    ((victim, _),) = decision.victims
    assert victim.startswith("Job/ns/a")


def test_a_quota_of_weight_zero_borrows_from_nobody() -> None:
    # Both borrowers weigh 0: b's share with its gang is infinite, a's too; b does not
    # take from a (the two would take the same GPUs in turns).
    weightless = [team("lender", 16), team("a", 0, weight=0), team("b", 0, weight=0)]
    decision = decision_of(a_holds_everything([B0], weightless), "ns/b0")
    assert decision.verdict is Verdict.PENDING


def test_a_quota_of_weight_zero_gives_way_to_one_that_weighs() -> None:
    quotas = [team("lender", 16), team("a", 0, weight=0), team("b", 0)]
    decision = decision_of(a_holds_everything([B0], quotas), "ns/b0")
    assert decision.verdict is Verdict.PREEMPT
