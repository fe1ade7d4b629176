"""Reservation with backfill in the core: who gets one, where, from when, and who may backfill."""

from __future__ import annotations

from dataclasses import replace

from queue_controller.core import (
    Overrun,
    Reason,
    Reservation,
    ReservationPolicy,
    RuntimeEstimate,
    RuntimeSource,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from tests.builders import gang, gpu_node, queue, snapshot

NOW = 10_000.0


def runtime(seconds: float) -> RuntimeEstimate:
    return RuntimeEstimate(seconds, RuntimeSource.ANNOTATION)


def running(name: str, node: str, gpus: int, *, ends_in: float | None, **kw: object) -> Workload:
    """A one-member gang admitted onto ``node``, ending ``ends_in`` seconds from NOW."""
    started = NOW - 100
    return gang(
        name,
        1,
        gpus,
        phase=WorkloadPhase.ADMITTED,
        placement={node: 1},
        admitted_at=kw.pop("admitted_at", started),
        runtime=runtime(ends_in + 100) if ends_in is not None else RuntimeEstimate(),
        **kw,
    )


def reserving_queue(**policy: object) -> object:
    settings = {"after_seconds": 60, **policy}
    return replace(queue(), reservation=ReservationPolicy(**settings))  # type: ignore[arg-type]


def busy_cluster() -> list[Workload]:
    """Four 8-GPU nodes, each with one 8-GPU gang: they end in 100, 200, 300 and 400 s."""
    return [running(f"r{i}", f"n{i}", 8, ends_in=100.0 * (i + 1), queue="other") for i in range(4)]


def test_a_starved_head_gets_the_nodes_that_free_soonest_and_their_start() -> None:
    big = gang("big", 2, 8, created=1.0, no_fit_since=NOW - 61)
    snap = snapshot(
        nodes=[gpu_node(f"n{i}") for i in range(4)],
        workloads=[*busy_cluster(), big],
        queues=(reserving_queue(), queue("other")),
        now=NOW,
    )
    decision = schedule(snap).decisions[0]
    assert decision.verdict is Verdict.PENDING
    assert decision.reason is Reason.RESERVED
    assert decision.reservation is not None
    assert decision.reservation.placement == {"main": {"n0": 1, "n1": 1}}
    assert decision.reservation.start == NOW + 200  # when the second of them ends
    assert decision.reservation.made == NOW
    assert "reserved 2 nodes (n0, n1)" in decision.message


def test_no_reservation_before_after_seconds_or_when_off() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    early = gang("big", 2, 8, no_fit_since=NOW - 59)
    snap = snapshot(
        nodes=nodes,
        workloads=[*busy_cluster(), early],
        queues=(reserving_queue(), queue("other")),
        now=NOW,
    )
    assert schedule(snap).decisions[0].reason is Reason.NO_NODE_FIT
    off = snapshot(
        nodes=nodes,
        workloads=[*busy_cluster(), replace(early, no_fit_since=0.0)],
        queues=(queue(), queue("other")),
        now=NOW,
    )
    assert schedule(off).decisions[0].reason is Reason.NO_NODE_FIT


def test_only_the_head_of_its_queue_is_reserved_for() -> None:
    head = gang("head", 1, 16, created=1.0, no_fit_since=0.0)  # fits no node: never reserved
    second = gang("second", 2, 8, created=2.0, no_fit_since=0.0)
    snap = snapshot(
        nodes=[gpu_node(f"n{i}") for i in range(4)],
        workloads=[*busy_cluster(), head, second],
        queues=(reserving_queue(), queue("other")),
        now=NOW,
    )
    by_name = {d.workload: d for d in schedule(snap).decisions}
    assert by_name["ns/second"].reason is Reason.NO_NODE_FIT
    assert by_name["ns/second"].reservation is None


def test_running_gangs_without_an_estimate_never_free_room() -> None:
    unknown = [running(f"r{i}", f"n{i}", 8, ends_in=None, queue="other") for i in range(4)]
    big = gang("big", 2, 8, no_fit_since=0.0)
    snap = snapshot(
        nodes=[gpu_node(f"n{i}") for i in range(4)],
        workloads=[*unknown, big],
        queues=(reserving_queue(), queue("other")),
        now=NOW,
    )
    decision = schedule(snap).decisions[0]
    assert decision.reason is Reason.NO_NODE_FIT
    assert "estimates free no room" in decision.message


def held(start: float, nodes: tuple[str, ...] = ("n0", "n1")) -> Reservation:
    return Reservation({"main": dict.fromkeys(nodes, 1)}, start, NOW - 10)


def free_cluster_with_reservation(
    *small: Workload, start: float = NOW + 300
) -> tuple[list[Workload], list[object]]:
    """n0 and n1 idle and reserved for ``big`` from ``start``; n2 and n3 busy for good."""
    busy = [running(f"r{i}", f"n{i}", 8, ends_in=None, queue="other") for i in (2, 3)]
    big = gang(
        "big", 3, 8, created=1.0, no_fit_since=0.0, reservation=held(start, ("n0", "n1", "n2"))
    )
    return [*busy, big, *small], [gpu_node(f"n{i}") for i in range(4)]


def test_a_gang_that_ends_before_the_start_backfills_and_one_that_does_not_waits() -> None:
    short = gang("short", 1, 8, queue="small", created=2.0, runtime=runtime(100))
    long = gang("long", 1, 8, queue="small", created=3.0, runtime=runtime(1000))
    workloads, nodes = free_cluster_with_reservation(short, long)
    snap = snapshot(
        nodes=nodes,
        workloads=workloads,
        queues=(reserving_queue(), queue("other"), queue("small")),
        now=NOW,
    )
    by_name = {d.workload: d for d in schedule(snap).decisions}
    assert by_name["ns/big"].reason is Reason.RESERVED
    assert by_name["ns/short"].verdict is Verdict.ADMIT
    assert by_name["ns/short"].backfilled_over == ("Job/ns/big",)
    assert by_name["ns/long"].reason is Reason.NO_NODE_FIT
    assert "reserved for ns/big" in by_name["ns/long"].message


def test_an_unknown_runtime_never_backfills_and_the_margin_counts() -> None:
    unknown = gang("unknown", 1, 8, queue="small", created=2.0)
    close = gang("close", 1, 8, queue="small", created=3.0, runtime=runtime(250))  # +60 > 300
    workloads, nodes = free_cluster_with_reservation(unknown, close)
    snap = snapshot(
        nodes=nodes,
        workloads=workloads,
        queues=(reserving_queue(), queue("other"), queue("small")),
        now=NOW,
    )
    by_name = {d.workload: d for d in schedule(snap).decisions}
    assert by_name["ns/unknown"].reason is Reason.NO_NODE_FIT
    assert by_name["ns/close"].reason is Reason.NO_NODE_FIT


def test_the_reserved_gang_is_admitted_onto_its_nodes_once_they_free() -> None:
    big = gang("big", 2, 8, no_fit_since=0.0, reservation=held(NOW - 5))
    snap = snapshot(
        nodes=[gpu_node(f"n{i}") for i in range(2)],
        workloads=[big],
        queues=(reserving_queue(),),
        now=NOW,
    )
    decision = schedule(snap).decisions[0]
    assert decision.verdict is Verdict.ADMIT
    assert decision.reservation is None  # admitted: the reservation ends
    assert decision.placement == {"n0": 1, "n1": 1}


def test_a_reservation_ends_when_its_gang_is_no_longer_the_head() -> None:
    newer_first = gang("urgent", 1, 16, created=0.5, no_fit_since=0.0)  # now the head
    workloads, nodes = free_cluster_with_reservation()
    snap = snapshot(
        nodes=nodes,
        workloads=[*workloads, newer_first],
        queues=(reserving_queue(), queue("other")),
        now=NOW,
    )
    by_name = {d.workload: d for d in schedule(snap).decisions}
    assert by_name["ns/big"].reason is Reason.NO_NODE_FIT
    assert by_name["ns/big"].reservation is None


def test_overrun_waits_by_default_and_preempts_backfilled_gangs_when_told() -> None:
    start = NOW - 30
    reservation = Reservation({"main": {"n0": 1, "n1": 1}}, start, NOW - 500)
    backfilled = running("fill", "n0", 8, ends_in=None, queue="other", admitted_at=NOW - 400)
    before = running("old", "n1", 8, ends_in=None, queue="other", admitted_at=NOW - 900)
    big = gang("big", 2, 8, no_fit_since=0.0, reservation=reservation)
    nodes = [gpu_node("n0"), gpu_node("n1")]
    waiting = snapshot(
        nodes=nodes,
        workloads=[backfilled, before, big],
        queues=(reserving_queue(), queue("other")),
        now=NOW,
    )
    decision = schedule(waiting).decisions[0]
    assert decision.reason is Reason.RESERVED
    assert "overrun: Wait" in decision.message
    preempting = replace(waiting, queues=(reserving_queue(overrun=Overrun.PREEMPT), queue("other")))
    decision = schedule(preempting).decisions[0]
    assert decision.verdict is Verdict.PREEMPT
    assert decision.reason is Reason.RESERVATION_OVERRUN
    assert decision.victims == (("Job/ns/fill", Reason.RESERVATION_OVERRUN),)
    assert decision.nominated == {"main": {"n0": 1, "n1": 1}}


def test_limits_per_team_quota_and_cluster() -> None:
    a = gang("a", 2, 8, queue="qa", created=1.0, no_fit_since=0.0)
    b = gang("b", 2, 8, queue="qb", created=2.0, no_fit_since=0.0)
    base = snapshot(
        nodes=[gpu_node(f"n{i}") for i in range(4)],
        workloads=[*busy_cluster(), a, b],
        queues=(
            replace(reserving_queue(), name="qa"),
            replace(reserving_queue(), name="qb"),
            queue("other"),
        ),
        now=NOW,
    )
    reasons = {d.workload: d.reason for d in schedule(base).decisions}
    # One per TeamQuota by default: both Queues draw from "team".
    assert reasons == {"ns/a": Reason.RESERVED, "ns/b": Reason.NO_NODE_FIT}
    two = replace(
        base,
        queues=tuple(
            replace(q, reservation=replace(q.reservation, max_per_team_quota=2))
            for q in base.queues
        ),
    )
    decisions = {d.workload: d for d in schedule(two).decisions}
    assert decisions["ns/b"].reason is Reason.RESERVED
    # Two reservations never share a node.
    assert decisions["ns/a"].reservation is not None
    assert decisions["ns/b"].reservation is not None
    assert not decisions["ns/a"].reservation.nodes & decisions["ns/b"].reservation.nodes
    capped = replace(two, reservation_limit=1)
    reasons = {d.workload: d.reason for d in schedule(capped).decisions}
    assert reasons["ns/b"] is Reason.NO_NODE_FIT


def test_a_gang_over_its_quota_is_not_reserved_for() -> None:
    from tests.builders import gpus, quota

    big = gang("big", 2, 8, no_fit_since=0.0)
    snap = snapshot(
        nodes=[gpu_node(f"n{i}") for i in range(4)],
        workloads=[*busy_cluster(), big],
        queues=(reserving_queue(), queue("other", team="others")),
        quotas=(quota("team", gpu=gpus(8)), quota("others")),
        now=NOW,
    )
    decision = schedule(snap).decisions[0]
    assert decision.reason is Reason.QUOTA_EXCEEDED
    assert decision.reservation is None
