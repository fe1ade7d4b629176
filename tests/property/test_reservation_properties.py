"""Reservation over random clusters, with exact estimates: a reserved gang is admitted at
its reserved start, and nothing but a gang that ends before that start is placed on its
nodes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core import (
    Reason,
    ReservationPolicy,
    RuntimeEstimate,
    RuntimeSource,
    Snapshot,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from tests.builders import gang, gpu_node, queue, snapshot

NOW = 50_000.0
MARGIN = 30


def estimate(seconds: float) -> RuntimeEstimate:
    return RuntimeEstimate(seconds, RuntimeSource.ANNOTATION)


@st.composite
def busy_clusters(draw: st.DrawFn) -> Snapshot:
    """Nodes filled by one-member gangs of known runtimes, a starved big head, and small
    gangs of random runtimes (some unknown) behind it in another Queue."""
    nodes = [gpu_node(f"n{i}", 8) for i in range(draw(st.integers(2, 5)))]
    workloads: list[Workload] = []
    for node in nodes:
        left = 8
        while left > 0:
            size = draw(st.sampled_from([1, 2, 4, 8]))
            if size > left:
                break
            left -= size
            workloads.append(
                gang(
                    f"run{len(workloads)}",
                    1,
                    size,
                    queue="other",
                    phase=WorkloadPhase.ADMITTED,
                    placement={node.name: 1},
                    admitted_at=NOW - 10,
                    runtime=estimate(draw(st.integers(20, 500))),
                )
            )
    members = draw(st.integers(1, min(3, len(nodes))))
    workloads.append(gang("big", members, 8, queue="big", created=0.0, no_fit_since=0.0))
    for i in range(draw(st.integers(0, 4))):
        seconds = draw(st.one_of(st.none(), st.integers(10, 600)))
        workloads.append(
            gang(
                f"small{i}",
                1,
                draw(st.sampled_from([1, 2, 4, 8])),
                queue="small",
                created=10.0 + i,
                runtime=RuntimeEstimate() if seconds is None else estimate(seconds),
            )
        )
    policy = ReservationPolicy(after_seconds=0, backfill_margin_seconds=MARGIN)
    return snapshot(
        nodes=nodes,
        workloads=workloads,
        queues=(replace(queue("big"), reservation=policy), queue("other"), queue("small")),
        now=NOW,
    )


def ends_at(workload: Workload, now: float) -> float:
    assert workload.runtime.seconds is not None
    start = workload.admitted_at if workload.admitted_at is not None else now
    return max(now, start + workload.runtime.seconds)


@settings(max_examples=150, deadline=None)
@given(busy_clusters())
def test_the_reserved_gang_starts_at_its_start_and_only_backfills_precede_it(
    snap: Snapshot,
) -> None:
    first = {d.key: d for d in schedule(snap).decisions}
    big = first["Job/ns/big"]
    if big.reason is not Reason.RESERVED:
        return  # admitted at once, or nothing frees room for it: nothing reserved
    reservation = big.reservation
    assert reservation is not None
    assert reservation.start >= NOW
    by_key = {w.key: w for w in snap.workloads}
    admitted_now: list[Workload] = []
    for key, decision in first.items():
        if decision.verdict is not Verdict.ADMIT:
            continue
        workload = by_key[key]
        if decision.placement.keys() & reservation.nodes:
            # Only a backfill goes on reserved nodes: known runtime, ends a margin before.
            assert decision.backfilled_over == ("Job/ns/big",)
            assert workload.runtime.seconds is not None
            assert NOW + workload.runtime.seconds + MARGIN <= reservation.start
        admitted_now.append(
            replace(
                workload,
                phase=WorkloadPhase.ADMITTED,
                placement=dict(decision.placement),
                admitted_at=NOW,
            )
        )
    # Time passes to the reserved start, every estimate exact: what ends by then is gone.
    at = reservation.start
    still_running = [
        w
        for w in (*(w for w in snap.workloads if w.phase is WorkloadPhase.ADMITTED), *admitted_now)
        if w.runtime.seconds is None or ends_at(w, NOW) > at
    ]
    waiting = replace(by_key["Job/ns/big"], reservation=reservation)
    later = replace(snap, workloads=(*still_running, waiting), now=at)
    second = {d.key: d for d in schedule(later).decisions}
    assert second["Job/ns/big"].verdict is Verdict.ADMIT, second["Job/ns/big"].message
