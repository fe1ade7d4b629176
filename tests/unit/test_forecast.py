"""The forecast: the live state run forward with the same core, each pending gang's start."""

from __future__ import annotations

from dataclasses import replace

import pytest

from queue_controller.core import (
    Ordering,
    Queue,
    Reason,
    ReservationPolicy,
    RuntimeEstimate,
    RuntimeSource,
    Snapshot,
    WorkloadPhase,
)
from queue_controller.sim.forecast import EtaReason, forecast
from tests.builders import gang, gpu_node, gpus, queue, quota, snapshot

NOW = 1_000_000.0
ADMITTED = WorkloadPhase.ADMITTED


def est(seconds: float | None) -> RuntimeEstimate:
    if seconds is None:
        return RuntimeEstimate()
    return RuntimeEstimate(seconds, RuntimeSource.ANNOTATION, "annotated")


def running(name: str, node: str, members: int, *, started: float, runtime: float | None):
    return gang(
        name,
        members,
        1,
        phase=ADMITTED,
        placement={node: members},
        admitted_at=started,
        runtime=est(runtime),
        created=started - 10,
    )


def waiting(name: str, members: int, *, created: float, runtime: float | None = 600.0, **kw):
    return gang(name, members, 1, created=created, runtime=est(runtime), **kw)


def two_nodes(**kwargs: object) -> Snapshot:
    kwargs.setdefault("nodes", [gpu_node("n1", 8), gpu_node("n2", 8)])
    return snapshot(now=NOW, **kwargs)


def start_of(result, name: str) -> float | None:
    eta = result.of(f"Job/ns/{name}")
    assert eta is not None, name
    return eta.start


def test_pending_gangs_start_in_order_as_running_gangs_end() -> None:
    state = two_nodes(
        workloads=[
            # n1 frees at NOW+100, n2 at NOW+300.
            running("a", "n1", 8, started=NOW - 500, runtime=600),
            running("b", "n2", 8, started=NOW - 100, runtime=400),
            # Both fit one node each: big waits for n1, next for n2.
            waiting("big", 8, created=NOW - 50, runtime=1000),
            waiting("next", 8, created=NOW - 40, runtime=50),
            # Then once n2 frees again (next ends at NOW+350).
            waiting("last", 4, created=NOW - 30),
        ]
    )
    result = forecast(state)
    assert start_of(result, "big") == NOW + 100
    assert start_of(result, "next") == NOW + 300
    assert start_of(result, "last") == NOW + 350
    big = result.of("Job/ns/big")
    assert big is not None
    assert big.reason is EtaReason.ESTIMATED
    assert big.after == ("Job/ns/a",)
    assert big.waits_for is not None
    assert big.waits_for.reason is Reason.NO_NODE_FIT
    last = result.of("Job/ns/last")
    assert last is not None
    assert last.ahead == ("Job/ns/big", "Job/ns/next")
    assert last.after == ("Job/ns/next",)
    assert result.stopped == "done"


def test_a_gang_admitted_now_starts_now() -> None:
    state = two_nodes(workloads=[waiting("free", 4, created=NOW - 5)])
    result = forecast(state)
    assert start_of(result, "free") == NOW
    eta = result.of("Job/ns/free")
    assert eta is not None
    assert "starts now" in eta.message


def test_an_overdue_gang_ends_now() -> None:
    state = two_nodes(
        nodes=[gpu_node("n1", 8)],
        workloads=[
            running("late", "n1", 8, started=NOW - 1000, runtime=100),
            waiting("w", 8, created=NOW - 5),
        ],
    )
    assert start_of(forecast(state), "w") == NOW


def test_behind_a_gang_without_an_estimate_it_is_unknown() -> None:
    state = two_nodes(
        nodes=[gpu_node("n1", 8)],
        workloads=[
            running("mystery", "n1", 8, started=NOW - 100, runtime=None),
            waiting("w", 4, created=NOW - 5),
        ],
    )
    eta = forecast(state).of("Job/ns/w")
    assert eta is not None
    assert eta.start is None
    assert eta.reason is EtaReason.NO_RUNTIME_ESTIMATES
    assert eta.after == ("Job/ns/mystery",)
    assert "mystery" in eta.message


def test_a_gang_admitted_in_the_forecast_without_an_estimate_never_ends() -> None:
    state = two_nodes(
        nodes=[gpu_node("n1", 8)],
        workloads=[
            running("a", "n1", 8, started=NOW - 100, runtime=200),
            waiting("first", 8, created=NOW - 50, runtime=None),
            waiting("second", 8, created=NOW - 40),
        ],
    )
    result = forecast(state)
    assert start_of(result, "first") == NOW + 100
    second = result.of("Job/ns/second")
    assert second is not None
    assert second.reason is EtaReason.NO_RUNTIME_ESTIMATES
    assert second.after == ("Job/ns/first",)


def test_a_gang_its_quota_never_holds_is_blocked_by_quota() -> None:
    state = two_nodes(
        quotas=[quota(gpu=gpus(8))],
        workloads=[waiting("huge", 12, created=NOW - 5)],
    )
    eta = forecast(state).of("Job/ns/huge")
    assert eta is not None
    assert eta.reason is EtaReason.BLOCKED_BY_QUOTA
    assert eta.waits_for is not None
    assert eta.waits_for.reason is Reason.QUOTA_EXCEEDED


def test_quota_frees_as_the_team_s_gangs_end() -> None:
    state = two_nodes(
        quotas=[quota(gpu=gpus(8))],
        workloads=[
            running("mine", "n1", 8, started=NOW - 100, runtime=300),
            waiting("w", 8, created=NOW - 5),
        ],
    )
    result = forecast(state)
    eta = result.of("Job/ns/w")
    assert eta is not None
    assert eta.start == NOW + 200
    assert eta.waits_for is not None
    assert eta.waits_for.reason is Reason.QUOTA_EXCEEDED
    assert eta.after == ("Job/ns/mine",)


def test_quota_held_by_a_gang_without_an_estimate() -> None:
    state = two_nodes(
        quotas=[quota(gpu=gpus(8))],
        workloads=[
            running("mine", "n1", 8, started=NOW - 100, runtime=None),
            waiting("w", 8, created=NOW - 5),
        ],
    )
    eta = forecast(state).of("Job/ns/w")
    assert eta is not None
    assert eta.reason is EtaReason.NO_RUNTIME_ESTIMATES
    assert eta.after == ("Job/ns/mine",)


def test_a_gang_no_node_holds_never_fits() -> None:
    # One pod of 16 GPUs: no node has more than 8.
    state = two_nodes(workloads=[gang("wide", 1, 16, created=NOW - 5, runtime=est(60))])
    eta = forecast(state).of("Job/ns/wide")
    assert eta is not None
    assert eta.reason is EtaReason.NEVER_FITS


def test_past_the_horizon_it_is_unknown() -> None:
    state = two_nodes(
        nodes=[gpu_node("n1", 8)],
        workloads=[
            running("long", "n1", 8, started=NOW, runtime=10 * 86400),
            waiting("w", 8, created=NOW - 5),
        ],
    )
    eta = forecast(state).of("Job/ns/w")
    assert eta is not None
    assert eta.reason is EtaReason.BEYOND_HORIZON
    longer = forecast(state, horizon_seconds=11 * 86400)
    assert start_of(longer, "w") == NOW + 10 * 86400


def test_the_bound_on_cycles_is_kept() -> None:
    ends = [running(f"r{i}", "n1", 1, started=NOW, runtime=10.0 * (i + 1)) for i in range(8)]
    state = two_nodes(
        nodes=[gpu_node("n1", 8)],
        workloads=[*ends, waiting("w", 8, created=NOW - 5)],
    )
    bounded = forecast(state, max_cycles=3)
    assert bounded.cycles == 3
    eta = bounded.of("Job/ns/w")
    assert eta is not None
    assert eta.reason is EtaReason.FORECAST_BOUND
    full = forecast(state)
    assert start_of(full, "w") == NOW + 80
    with pytest.raises(ValueError, match="max_cycles"):
        forecast(state, max_cycles=0)


def test_an_invalid_gang_says_so() -> None:
    state = two_nodes(workloads=[waiting("bad", 1, created=NOW - 5, spec_error="broken field")])
    eta = forecast(state).of("Job/ns/bad")
    assert eta is not None
    assert eta.reason is EtaReason.INVALID
    assert eta.start is None


def test_a_requeued_gang_starts_when_its_backoff_is_up() -> None:
    state = two_nodes(
        workloads=[waiting("back", 1, created=NOW - 5, requeue_at=NOW + 90, requeue_count=1)]
    )
    eta = forecast(state).of("Job/ns/back")
    assert eta is not None
    assert eta.start == NOW + 90
    assert eta.waits_for is not None
    assert eta.waits_for.reason is Reason.BACKOFF


def test_strict_fifo_followers_wait_for_their_head() -> None:
    strict = Queue(namespace="ns", name="q", team_quota="team", ordering=Ordering.STRICT_FIFO)
    state = two_nodes(
        nodes=[gpu_node("n1", 8)],
        queues=[strict],
        workloads=[
            running("mystery", "n1", 4, started=NOW, runtime=None),
            waiting("head", 8, created=NOW - 10),
            waiting("follower", 1, created=NOW - 5),
        ],
    )
    follower = forecast(state).of("Job/ns/follower")
    assert follower is not None
    assert follower.reason is EtaReason.NO_RUNTIME_ESTIMATES
    assert follower.after[0] == "Job/ns/head"
    assert follower.waits_for is not None
    assert follower.waits_for.reason is Reason.WAITING_FOR_HEAD


def test_a_reservation_keeps_the_head_s_start_and_backfill_goes_first() -> None:
    """With reservation on, a short gang backfills before the head's start; a long one
    waits until after the head."""
    reserving = replace(
        queue(), reservation=ReservationPolicy(after_seconds=0, backfill_margin_seconds=0)
    )
    state = two_nodes(
        queues=[reserving],
        workloads=[
            running("a", "n1", 8, started=NOW - 100, runtime=200),  # n1 frees at +100
            running("b", "n2", 4, started=NOW - 100, runtime=400),  # n2 half frees at +300
            # Needs 16 GPUs: both nodes whole, so from +300.
            waiting("head", 16, created=NOW - 60, no_fit_since=NOW - 60),
            waiting("short", 8, created=NOW - 50, runtime=150),  # n1 at +100, ends +250
            waiting("long", 8, created=NOW - 40, runtime=5000),  # would delay the head
        ],
    )
    result = forecast(state)
    head = result.of("Job/ns/head")
    assert head is not None
    assert head.waits_for is not None
    assert head.waits_for.reason is Reason.RESERVED
    assert head.start == NOW + 300
    assert start_of(result, "short") == NOW + 100
    assert start_of(result, "long") == NOW + 300 + 600
