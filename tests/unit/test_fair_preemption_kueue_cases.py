"""Fair-sharing preemption on cases translated from Kueue's ``TestFairPreemptions``
(``pkg/scheduler/preemption/preemption_fair_test.go``), on one node large enough that
placement cannot change the answer: the answer must be Kueue's, or a difference the
docs explain (docs/sharing-and-preemption.md, "Where we differ from Kueue").

The translation: ClusterQueues ``a``, ``b`` and ``c`` are TeamQuotas of 3 CPUs each in
one fair-sharing cohort, with ``withinClusterQueue: LowerPriority`` and
``reclaimWithinCohort: Any`` (and ``borrowWithinCohort``, which fair sharing ignores);
``preemptible`` has nothing of its own.  One CPU is two GPUs here (Kueue's cases use
halves).  Kueue breaks ties between workloads of one priority admitted at the same
time by UID, the name; ours prefers the newest, so each admitted gang is created a
little later than the next one listed, which gives the same order.  Kueue's reasons
are ours: ``InClusterQueue`` is ``WithinTeamQuota``, ``InCohortReclamation`` is
``ReclaimWithinCohort`` and ``InCohortFairSharing`` is ``FairSharing``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from queue_controller.core import Cohort, PriorityClass, Reason, Verdict, WorkloadPhase, schedule
from queue_controller.core.model.objects import (
    BorrowPolicy,
    FairStrategy,
    Preemption,
    ReclaimPolicy,
    TeamQuota,
    WithinPolicy,
)
from tests.builders import GPU, gang, gpu_node, gpus, queue, running_pod, snapshot, template

POLICY = Preemption(
    within_team_quota=WithinPolicy.LOWER_PRIORITY,
    reclaim_within_cohort=ReclaimPolicy.ANY,
    borrow_within_cohort=BorrowPolicy.LOWER_PRIORITY,
    borrow_max_priority=-3,
)
PRIORITIES = [PriorityClass(f"p{value}", value) for value in (-3, -1, 0, 1)]
RECLAIM = Reason.RECLAIM_WITHIN_COHORT
FAIR = Reason.FAIR_SHARING
OWN = Reason.WITHIN_TEAM_QUOTA
BOTH = (FairStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, FairStrategy.LESS_THAN_INITIAL_SHARE)


@dataclass(frozen=True)
class Case:
    # (name, quota, GPUs, priority) of each admitted gang, in Kueue's order of the names.
    admitted: tuple[tuple[str, str, int, int], ...]
    incoming: tuple[str, int]  # (quota, GPUs)
    want: dict[str, Reason] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)  # thousandths
    strategies: tuple[FairStrategy, ...] = BOTH
    quotas: tuple[str, ...] = ("a", "b", "c", "preemptible")  # the case's ClusterQueues


def units(
    quota: str, count: int, gpus_each: int = 2, priority: int = 0
) -> tuple[tuple[str, str, int, int], ...]:
    return tuple((f"{quota}{i}", quota, gpus_each, priority) for i in range(1, count + 1))


CASES = {
    "reclaim nominal from user using the most": Case(
        units("a", 3) + units("b", 5) + units("c", 1), ("c", 2), {"b1": RECLAIM}
    ),
    "can reclaim from queue using less, if taking the latest workload from user using "
    "the most isn't enough": Case(
        (("a1", "a", 6, 0), ("a2", "a", 2, 0), ("b1", "b", 4, 0), ("b2", "b", 6, 0)),
        ("c", 6),
        {"a1": RECLAIM},
    ),
    "reclaim borrowable quota from user using the most": Case(
        units("a", 3) + units("b", 5) + units("c", 1), ("a", 2), {"b1": FAIR}
    ),
    "preempt one from each CQ borrowing": Case(
        (
            ("a1", "a", 1, 0),
            ("a2", "a", 1, 0),
            ("a3", "a", 6, 0),
            ("b1", "b", 1, 0),
            ("b2", "b", 1, 0),
            ("b3", "b", 6, 0),
        ),
        ("c", 4),
        {"a1": RECLAIM, "b1": RECLAIM},
    ),
    "can't preempt when everyone under nominal": Case(
        units("a", 3) + units("b", 3) + units("c", 3), ("c", 2)
    ),
    "can't preempt when it would switch the imbalance": Case(
        units("a", 3) + units("b", 5), ("a", 4)
    ),
    "can preempt lower priority workloads from same CQ": Case(
        (
            ("a1_low", "a", 2, -1),
            ("a2_low", "a", 2, -1),
            ("a3", "a", 2, 0),
            ("a4", "a", 2, 0),
            *units("b", 5),
        ),
        ("a", 4),
        {"a1_low": OWN, "a2_low": OWN},
    ),
    "can preempt a combination of same CQ and highest user": Case(
        (("a_low", "a", 2, -1), ("a2", "a", 2, 0), ("a3", "a", 2, 0), *units("b", 6)),
        ("a", 4),
        {"a_low": OWN, "b1": FAIR},
    ),
    "preempt huge workload if there is no other option, as long as the target CQ gets a "
    "lower share": Case((("b1", "b", 18, 0),), ("a", 4), {"b1": RECLAIM}),
    "can't preempt huge workload if the incoming is also huge": Case(
        (("a1", "a", 4, 0), ("b1", "b", 14, 0)), ("a", 10)
    ),
    "can't preempt 2 smaller workloads if the incoming is huge": Case(
        (("b1", "b", 4, 0), ("b2", "b", 4, 0), ("b3", "b", 6, 0)), ("a", 12)
    ),
    "preempt from target and others even if over nominal": Case(
        (("a1_low", "a", 4, -1), ("a2_low", "a", 2, -1), ("b1", "b", 6, 0), ("b2", "b", 6, 0)),
        ("a", 8),
        {"a1_low": OWN, "b1": FAIR},
    ),
    "prefer to preempt workloads that don't make the target CQ have the biggest share": Case(
        (("b1", "b", 4, 0), ("b2", "b", 2, 0), ("b3", "b", 4, 0), ("c1", "c", 2, 0)),
        ("a", 7),
        {"b2": FAIR},
    ),
    "preempt from different cluster queues if the end result has a smaller max share": Case(
        (("b1", "b", 4, 0), ("b2", "b", 5, 0), ("c1", "c", 4, 0), ("c2", "c", 5, 0)),
        ("a", 7),
        {"b1": FAIR, "c1": FAIR},
    ),
    "scenario above does not flap": Case(
        (("a1", "a", 7, 0), ("b2", "b", 5, 0), ("c2", "c", 5, 0)), ("b", 4)
    ),
    "cannot preempt if it would make the candidate CQ go under nominal after preempting "
    "one element": Case((("b1", "b", 6, 0), ("b2", "b", 6, 0), ("c1", "c", 6, 0)), ("a", 8)),
    "workloads under priority threshold not capriciously preempted": Case(
        units("a", 3) + units("b", 3) + units("preemptible", 3, priority=-3), ("a", 4)
    ),
    "preempt lower priority first, even if big": Case(
        (("a1", "a", 6, 0), ("b_low", "b", 10, 0), ("b_high", "b", 2, 1)),
        ("a", 2),
        {"b_low": FAIR},
        strategies=(FairStrategy.LESS_THAN_INITIAL_SHARE,),
    ),
    "preempt workload that doesn't transfer the imbalance, even if high priority": Case(
        (("a1", "a", 6, 0), ("b_low", "b", 10, 0), ("b_high", "b", 2, 1)),
        ("a", 2),
        {"b_high": FAIR},
        strategies=(FairStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    ),
    "CQ with higher weight can preempt more": Case(
        units("a", 3) + units("b", 6), ("a", 4), {"b1": FAIR, "b2": FAIR}, {"a": 2000}
    ),
    "can't preempt nominal from CQ with 0 weight": Case(
        units("a", 3) + units("b", 3), ("a", 2), weights={"b": 0}, quotas=("a", "b")
    ),
}


def decide(case: Case) -> dict[str, Reason] | None:
    """The victims of the incoming gang (name -> reason), or None if it is admitted."""
    admitted, pods = [], []
    for index, (name, quota, amount, priority) in enumerate(case.admitted):
        workload = gang(
            name,
            1,
            amount,
            queue=f"q{quota}",
            phase=WorkloadPhase.ADMITTED,
            created=100.0 - index,  # the first listed is the newest: Kueue's order by name
            placement={"big": 1},
            pod_template=template(amount, priority_class=f"p{priority}"),
        )
        admitted.append(workload)
        pods.append(running_pod("big", amount, name=f"{name}-0", workload=workload.key))
    quota, amount = case.incoming
    incoming = gang(
        "incoming",
        1,
        amount,
        queue=f"q{quota}",
        created=1000.0,
        pod_template=template(amount, priority_class="p0"),
    )
    names = case.quotas
    quotas = [
        TeamQuota(
            name,
            {GPU: gpus(0 if name == "preemptible" else 6)},
            "all",
            POLICY if name != "preemptible" else Preemption(),
            fair_weight=case.weights.get(name, 1000),
        )
        for name in names
    ]
    result = schedule(
        snapshot(
            nodes=[gpu_node("big", 64)],
            pods=pods,
            workloads=[*admitted, incoming],
            quotas=quotas,
            queues=[queue(f"q{name}", name) for name in names],
            priority_classes=PRIORITIES,
            cohorts=(Cohort("all", fair_sharing=True, preemption_strategies=case.strategies),),
        )
    )
    (decision,) = [d for d in result.decisions if d.workload == incoming.namespaced_name]
    if decision.verdict is Verdict.ADMIT:
        return None
    return {key.rsplit("/", 1)[1]: reason for key, reason in decision.victims}


@pytest.mark.parametrize("name", list(CASES))
def test_kueues_answer(name: str) -> None:
    assert decide(CASES[name]) == CASES[name].want


def test_a_borrowing_quota_of_weight_zero_is_taken_back_only_while_it_borrows() -> None:
    # Kueue's "can preempt anything borrowing from CQ with 0 weight" preempts b1, b2 and
    # b3, taking b back to its nominal by LessThanInitialShare against b's infinite
    # share.  We do not apply that strategy against a weight of 0 (the docs say why: the
    # ping-pong our property found), and LessThanOrEqualToFinalShare stops once b no
    # longer borrows, so the gang that needs all three preempts nobody.
    case = Case(units("a", 3) + units("b", 6), ("a", 6), weights={"b": 0})
    assert decide(case) == {}
    # What LessThanOrEqualToFinalShare takes back of it, it takes: b1 and b2 leave b
    # borrowing, with its infinite share, and so they go.
    smaller = Case(units("a", 3) + units("b", 6), ("a", 4), {"b1": FAIR, "b2": FAIR}, {"b": 0})
    assert decide(smaller) == smaller.want
