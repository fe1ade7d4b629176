"""Reservation with backfill through whole cycles of the scheduling loop, in-process
against the fake Gateway, with the real core: what it writes to PodGroups (reserved
nodes and start, the wait's start, the runtime estimate), its events and its metrics.

Four nodes of 8 GPUs.  Three 1-node gangs run on n0..n2, ending (by their annotated
runtimes) in 100, 200 and 300 seconds; n3 is free.  A 4-node gang cannot fit until all
three are gone: it is reserved n0..n3 from +300s, n3 withheld meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from queue_controller.controller.loop import SchedulingLoop
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.kube.fields import epoch_seconds
from tests.fakes.gateway import FakeGateway
from tests.loops import scheduling_loop
from tests.unit.test_lifecycle import NOW, group, iso, job, pod

GPU = "nvidia.com/gpu"
RUNTIME = "queue-controller.io/expected-runtime-seconds"


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "3", "labels": {}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def queue(reservation: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"teamQuota": "team"}
    if reservation is not None:
        spec["reservation"] = reservation
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "q", "namespace": "ns", "resourceVersion": "5"},
        "spec": spec,
    }


TEAM = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "TeamQuota",
    "metadata": {"name": "team", "resourceVersion": "2"},
    "spec": {"resources": {GPU: {"nominal": 64}}},
}


def gang(
    name: str,
    *,
    members: int = 1,
    runtime: float | None = None,
    running_on: str | None = None,
    admitted_ago: float = 0,
    created_ago: float = 900,
) -> list[dict[str, Any]]:
    """A Job of ``members`` pods of 8 GPUs: running on a node since then, or pending."""
    body = job(
        name, suspend=running_on is None, parallelism=members, creationTimestamp=iso(created_ago)
    )
    template = body["spec"]["template"]
    template["spec"]["containers"][0]["resources"] = {"limits": {GPU: 8}}
    if runtime is not None:
        template["metadata"] = {"annotations": {RUNTIME: str(runtime)}}
    if running_on is None:
        return [body]
    member = pod(f"{name}-0", node=running_on, owner=name)
    member["spec"]["containers"][0]["resources"] = {"limits": {GPU: 8}}
    status = {"placement": {running_on: 1}, "admittedAt": iso(admitted_ago), "running": 1}
    return [body, group(name, phase="Running", min_member=1, **status), member]


def running() -> list[dict[str, Any]]:
    # Admitted 100s ago with runtimes 200, 300, 400: they end in 100, 200 and 300s.
    return [
        *gang("r0", runtime=200, running_on="n0", admitted_ago=100),
        *gang("r1", runtime=300, running_on="n1", admitted_ago=100),
        *gang("r2", runtime=400, running_on="n2", admitted_ago=100),
    ]


def big(*, waited: float | None = 600) -> list[dict[str, Any]]:
    """The 4-node gang, NoNodeFit for ``waited`` seconds already (None: never tried)."""
    (body,) = gang("big", members=4)
    if waited is None:
        return [body]
    status = {
        "reason": "NoNodeFit",
        "message": "0 of 4 fit",
        "noFitSince": iso(waited),
        "conditions": [
            {
                "type": "Admitted",
                "status": "False",
                "reason": "NoNodeFit",
                "message": "0 of 4 fit",
                "lastTransitionTime": iso(waited),
            }
        ],
    }
    return [body, group("big", phase="Pending", min_member=4, **status)]


class Controller:
    def __init__(self, fake: FakeGateway, now: list[float], **settings: Any) -> None:
        self.fake, self.metrics, self.state = fake, Metrics(), ClusterState()
        self.loop: SchedulingLoop = scheduling_loop(
            self.state,
            now=now[0],
            gateway=fake,
            metrics=self.metrics,
            clock=lambda: now[0],
            **settings,
        )

    def cycle(self) -> None:
        self.state.replace_all(self.fake.all())
        asyncio.run(self.loop.cycle())

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def status(fake: FakeGateway, name: str) -> dict[str, Any]:
    held = fake.held("PodGroup", "ns", name)
    assert held is not None
    found: dict[str, Any] = held["status"]
    return found


def events(fake: FakeGateway, reason: str) -> list[dict[str, Any]]:
    """The events of ``reason`` on PodGroups (each is also posted on the gang's Job)."""
    return [
        e
        for e in fake.events
        if e["reason"] == reason and e["involvedObject"]["kind"] == "PodGroup"
    ]


def cluster(*objects: dict[str, Any], reservation: dict[str, Any] | None) -> FakeGateway:
    nodes = [node(f"n{i}") for i in range(4)]
    return FakeGateway(queue(reservation), TEAM, *nodes, *running(), *objects, clock=lambda: NOW)


def finish_running(fake: FakeGateway) -> None:
    """r0..r2 end, as their estimates said."""
    for name in ("r0", "r1", "r2"):
        for kind, item in (("Pod", f"{name}-0"), ("Job", name)):
            held = fake.held(kind, "ns", item)
            assert held is not None
            if kind == "Pod":
                fake.update(held | {"status": {"phase": "Succeeded"}})
            else:
                done = {"conditions": [{"type": "Complete", "status": "True"}]}
                fake.update(held | {"status": done})


def test_a_starving_head_is_reserved_the_nodes_that_free_soonest() -> None:
    fake = cluster(*big(), reservation={"afterSeconds": 300})
    controller = Controller(fake, [NOW])
    controller.cycle()
    held = status(fake, "big")
    assert held["reason"] == "Reserved"
    assert held["reservedPlacement"] == {"main": {"n0": 1, "n1": 1, "n2": 1, "n3": 1}}
    assert epoch_seconds_of(held["reservedStart"]) == NOW + 300
    assert epoch_seconds_of(held["reservationMadeAt"]) == NOW
    assert held["noFitSince"] == iso(600)  # still counted from when the wait began
    assert held["message"].startswith("reserved 4 nodes (n0, n1, n2, n3) from ")
    (condition,) = [c for c in held["conditions"] if c["type"] == "Admitted"]
    assert condition["reason"] == "Reserved"
    (event,) = events(fake, "Reserved")
    assert event["involvedObject"]["name"] == "big"
    assert event["message"] == held["message"]
    assert controller.sample("queue_controller_reservations", queue="ns/q") == 1
    assert controller.sample("queue_controller_pending_gangs", queue="ns/q", reason="Reserved") == 1


def epoch_seconds_of(text: str) -> float:
    from datetime import datetime

    return epoch_seconds(datetime.fromisoformat(text.replace("Z", "+00:00")))


def test_the_reservation_is_kept_without_a_write_and_said_once() -> None:
    fake = cluster(*big(), reservation={"afterSeconds": 300})
    now = [NOW]
    controller = Controller(fake, now)
    controller.cycle()
    first = status(fake, "big")
    writes = len(fake.writes())
    now[0] += 1  # the next cycle, a second later: the countdown reads the same
    controller.cycle()
    assert status(fake, "big")["reservedStart"] == first["reservedStart"]
    assert status(fake, "big")["reservationMadeAt"] == first["reservationMadeAt"]
    big_writes = [w for w in fake.writes()[writes:] if w.name == "big" and w.method == "patch"]
    assert big_writes == []
    assert len(events(fake, "Reserved")) == 1


def test_a_restarted_controller_keeps_the_reservation() -> None:
    fake = cluster(*big(), reservation={"afterSeconds": 300})
    now = [NOW]
    Controller(fake, now).cycle()
    made = status(fake, "big")["reservationMadeAt"]
    now[0] += 30
    Controller(fake, now).cycle()  # a new controller: only the PodGroup remembers
    held = status(fake, "big")
    assert held["reason"] == "Reserved"
    assert held["reservationMadeAt"] == made
    assert len(events(fake, "Reserved")) == 1


def test_a_short_gang_backfills_and_a_long_one_waits() -> None:
    fake = cluster(
        *big(),
        *gang("short", runtime=60, created_ago=100),
        *gang("long", runtime=1000, created_ago=100),
        reservation={"afterSeconds": 300},
    )
    controller = Controller(fake, [NOW])
    controller.cycle()
    assert status(fake, "big")["reason"] == "Reserved"
    short = status(fake, "short")
    assert short["phase"] == "Admitted"
    assert short["placement"] == {"n3": 1}
    assert "backfilled onto nodes reserved for ns/big" in short["message"]
    assert short["runtimeEstimate"] == {
        "seconds": 60.0,
        "source": "Annotation",
        "detail": RUNTIME,
    }
    (backfilled,) = {e["message"] for e in events(fake, "Backfilled")}
    assert "ns/big" in backfilled
    assert controller.sample("queue_controller_backfilled_total", queue="ns/q") == 1
    long = status(fake, "long")
    assert long["phase"] == "Pending"
    assert long["reason"] == "NoNodeFit"
    assert "reserved for ns/big" in long["message"]


def test_reservation_off_holds_nothing() -> None:
    fake = cluster(*big(), *gang("long", runtime=1000, created_ago=100), reservation=None)
    controller = Controller(fake, [NOW])
    controller.cycle()
    held = status(fake, "big")
    assert held["reason"] == "NoNodeFit"
    assert "reservedPlacement" not in held
    assert status(fake, "long")["phase"] == "Admitted"  # n3 is free for anyone
    assert controller.sample("queue_controller_reservations", queue="ns/q") is None


def test_the_wait_is_counted_from_the_first_no_fit() -> None:
    fake = cluster(*big(waited=None), reservation={"afterSeconds": 300})
    now = [NOW]
    controller = Controller(fake, now)
    controller.cycle()  # its PodGroup is made
    controller.cycle()
    held = status(fake, "big")
    assert held["reason"] == "NoNodeFit"
    assert held["noFitSince"] == iso(0)
    now[0] += 299
    controller.cycle()
    assert status(fake, "big")["reason"] == "NoNodeFit"
    now[0] += 1
    controller.cycle()
    assert status(fake, "big")["reason"] == "Reserved"


def test_an_ended_reservation_is_cleared() -> None:
    fake = cluster(*big(), reservation={"afterSeconds": 300})
    controller = Controller(fake, [NOW])
    controller.cycle()
    assert status(fake, "big")["reason"] == "Reserved"
    # Reservation turned off on the Queue: the reservation ends, and its fields go.
    fake.update(queue(None) | {"metadata": {"name": "q", "namespace": "ns"}})
    controller.cycle()
    held = status(fake, "big")
    assert held["reason"] == "NoNodeFit"
    for name in ("reservedPlacement", "reservedStart", "reservationMadeAt"):
        assert name not in held
    assert controller.sample("queue_controller_reservations", queue="ns/q") is None


def test_admission_at_the_reserved_start_clears_the_reservation() -> None:
    fake = cluster(*big(), reservation={"afterSeconds": 300})
    now = [NOW]
    controller = Controller(fake, now)
    controller.cycle()
    assert status(fake, "big")["reason"] == "Reserved"
    finish_running(fake)
    now[0] += 300
    controller.cycle()
    held = status(fake, "big")
    assert held["phase"] == "Admitted"
    assert held["placement"] == {"n0": 1, "n1": 1, "n2": 1, "n3": 1}
    for name in ("reservedPlacement", "reservedStart", "reservationMadeAt", "noFitSince"):
        assert name not in held


@pytest.mark.parametrize("overrun", ["Wait", "Preempt"])
def test_a_backfill_that_overruns_is_waited_for_or_evicted(overrun: str) -> None:
    fake = cluster(
        *big(),
        *gang("short", runtime=60, created_ago=100),
        reservation={"afterSeconds": 300, "overrun": overrun},
    )
    now = [NOW]
    controller = Controller(fake, now)
    controller.cycle()
    assert status(fake, "big")["reason"] == "Reserved"
    assert status(fake, "short")["placement"] == {"n3": 1}
    member = pod("short-0", node="n3", owner="short")
    member["spec"]["containers"][0]["resources"] = {"limits": {GPU: 8}}
    fake.seed(member)  # the Job controller makes its pod, and it runs
    # The reserved start comes: the gangs that were running end as estimated, but the
    # backfilled one, estimated at a minute, still runs on n3.
    finish_running(fake)
    now[0] += 300
    controller.cycle()
    held = status(fake, "big")
    short = fake.held("Job", "ns", "short")
    assert short is not None
    if overrun == "Wait":
        assert held["reason"] == "Reserved"
        assert "overrun: Wait" in held["message"]
        assert short["spec"]["suspend"] is False
        return
    assert held["reason"] == "Preempting"
    assert held["nominatedPlacement"] == {"main": {"n0": 1, "n1": 1, "n2": 1, "n3": 1}}
    for name in ("reservedPlacement", "reservedStart"):
        assert name not in held
    assert short["spec"]["suspend"] is True  # evicted: the Job is suspended again
    evicted = status(fake, "short")
    assert evicted["reason"] == "Preempted"  # as every preemption's victims are
    assert "ns/big" in evicted["message"]
    assert (
        controller.sample(
            "queue_controller_preemptions_total", queue="ns/q", reason="ReservationOverrun"
        )
        == 1
    )
