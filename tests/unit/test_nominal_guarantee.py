"""Nominal quota is a guarantee, even before any preemption (issue 12, item 0).

(a) Gangs that fit within their own TeamQuota's nominal are tried before gangs that
would borrow, as Kueue's scheduler orders its heads.
(b) When a gang fits within its quota's nominal but the cohort lent that nominal out,
what is still idle of it is held for the rest of the cycle, not lent again
(Kueue's reserveCapacityForUnreclaimablePreempt).
Pending messages say when a team's nominal is lent out, and to whom.
"""

from __future__ import annotations

from queue_controller.core import Ordering, Reason, Verdict, WorkloadPhase, schedule
from queue_controller.core.quota.ledger import QuotaLedger
from tests.builders import GPU, gang, gpu_node, gpus, queue, quota, snapshot


def decide(workloads: list[object], *, ordering: Ordering = Ordering.BEST_EFFORT_FIFO) -> dict:
    result = schedule(
        snapshot(
            nodes=[gpu_node(f"n{i}", 8) for i in range(4)],
            workloads=workloads,
            quotas=[quota("lender", "c", gpu=gpus(2)), quota("borrower", "c", gpu=gpus(0))],
            queues=[
                queue("own", "lender", ordering=ordering),
                queue("more", "borrower", ordering=ordering),
            ],
        )
    )
    return {d.workload: d for d in result.decisions}


def test_a_gang_within_its_nominal_goes_before_an_older_borrower() -> None:
    # Kueue's scheduler test "borrowing ... workload within nominal goes first": the
    # borrower is older, but the lender's gang fits the lender's own nominal.
    decisions = decide(
        [
            gang("borrows", 1, 2, queue="more", created=1.0),
            gang("owns", 1, 2, queue="own", created=2.0),
        ]
    )
    assert decisions["ns/owns"].verdict is Verdict.ADMIT
    assert decisions["ns/borrows"].reason is Reason.QUOTA_EXCEEDED
    # The older order was the cause of the odd "needs 2, only 0 available (nominal 2,
    # 0 in use)" that plan said of the lender's gang.


def test_within_nominal_first_keeps_a_strict_fifo_queue_in_its_order() -> None:
    # In one StrictFIFO queue an older borrowing gang stays the head: the newer gang
    # that would fit within nominal does not pass it.
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0", 8)],
            workloads=[
                gang("head", 1, 4, queue="own", created=1.0),
                gang("small", 1, 1, queue="own", created=2.0),
            ],
            quotas=[quota("lender", "c", gpu=gpus(2)), quota("other", "c", gpu=gpus(0))],
            queues=[queue("own", "lender", ordering=Ordering.STRICT_FIFO)],
        )
    )
    order = [d.workload for d in result.decisions]
    assert order == ["ns/head", "ns/small"]
    by_name = {d.workload: d for d in result.decisions}
    assert by_name["ns/small"].reason is Reason.WAITING_FOR_HEAD


def lent_out(*workloads: object) -> dict:
    """The lender (nominal 4) and the borrower, which already runs 3 of the lender's GPUs."""
    running = gang("running", 3, 1, queue="more", phase=WorkloadPhase.ADMITTED, created=0.0)
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0", 8)],
            workloads=[running, *workloads],
            quotas=[quota("lender", "c", gpu=gpus(4)), quota("borrower", "c", gpu=gpus(0))],
            queues=[queue("own", "lender"), queue("more", "borrower")],
        )
    )
    return {d.workload: d for d in result.decisions}


def test_idle_nominal_is_held_for_a_gang_that_fits_it_and_is_not_lent_again() -> None:
    by_name = lent_out(
        gang("lenders-gang", 1, 2, queue="own", created=1.0),
        gang("small-borrower", 1, 1, queue="more", created=2.0),
    )
    lender = by_name["ns/lenders-gang"]
    assert lender.reason is Reason.QUOTA_EXCEEDED
    assert "needs 2, only 1 available (nominal 4, 0 in use" in lender.message
    assert "3 of its nominal is lent to borrower (3)" in lender.message
    borrower = by_name["ns/small-borrower"]
    assert borrower.reason is Reason.QUOTA_EXCEEDED, "the lender's last idle GPU was lent again"
    assert "held this cycle for a gang of lender" in borrower.message


def test_without_a_gang_that_fits_its_nominal_the_idle_nominal_is_lent() -> None:
    # The lender's gang needs more than its whole nominal: it borrows, so nothing is held.
    by_name = lent_out(
        gang("too-big", 1, 6, queue="own", created=1.0),
        gang("small-borrower", 1, 1, queue="more", created=2.0),
    )
    assert by_name["ns/too-big"].reason is Reason.QUOTA_EXCEEDED
    assert by_name["ns/small-borrower"].verdict is Verdict.ADMIT


def test_the_holder_itself_may_still_use_what_it_holds() -> None:
    ledger = QuotaLedger(
        [quota("lender", "c", gpu=gpus(4)), quota("borrower", "c", gpu=gpus(0))],
        {"borrower": {GPU: 3000}},
    )
    ledger.hold_idle_nominal("lender", {GPU: 2000})
    assert ledger.available("borrower", GPU) == 0
    assert ledger.available("lender", GPU) == 1000
    ledger.reserve("lender", {GPU: 1000})
    assert ledger.available("lender", GPU) == 0
    assert ledger.available("borrower", GPU) == 0


def test_a_hold_is_what_the_gang_needs_and_no_more() -> None:
    # The lender uses 1 of its 4 and the borrower 2; the third lends 2 more.
    ledger = QuotaLedger(
        [
            quota("lender", "c", gpu=gpus(4)),
            quota("borrower", "c", gpu=gpus(0)),
            quota("third", "c", gpu=gpus(2)),
        ],
        {"lender": {GPU: 1000}, "borrower": {GPU: 2000}},
    )
    assert ledger.available("borrower", GPU) == 3000
    ledger.hold_idle_nominal("lender", {GPU: 1000})
    assert ledger.available("borrower", GPU) == 2000
    ledger.hold_idle_nominal("lender", {GPU: 3000})  # a bigger gang of the lender
    assert ledger.available("borrower", GPU) == 0
    assert ledger.holders("borrower", GPU) == ("lender",)
