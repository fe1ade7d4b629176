"""The releaser: members of admitted gangs sent to their planned nodes as they arrive,
between cycles, against a fake gateway (controller/release.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.leader import Leadership
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.release import Releaser
from queue_controller.controller.settings import Settings
from queue_controller.kube.resources import ADMISSION_GATE, HOSTNAME_LABEL, POD
from tests.unit.test_apply import Cluster, cluster, only
from tests.unit.test_lifecycle import NOW, group, iso, job, pod


def admitted(
    *pods: str, placement: dict[str, int], suspend: bool = False, phase: str = "Admitted"
) -> Cluster:
    return cluster(
        job("bind", suspend=suspend),
        group("bind", phase=phase, placement=placement, admittedAt=iso(5)),
        *(pod(name, gated=True, phase="Pending", owner="bind") for name in pods),
    )


def releaser(
    c: Cluster,
    *,
    leading: bool = True,
    members: tuple[str, ...] = (),
    planning: asyncio.Lock | None = None,
) -> Releaser:
    """``members``: the gang's members the last cycle saw."""
    metrics = Metrics()
    settings = Settings(leader_election=False) if leading else Settings(leader_election=True)
    return Releaser(
        state=c.state,
        applier=Applier(
            c.fake, c.state, None, metrics, clock=lambda: NOW, in_flight=c.applier.in_flight
        ),
        leadership=Leadership(settings, metrics),
        members=lambda: {("Job", "ns", "bind"): members},
        planning=planning or asyncio.Lock(),
        clock=lambda: NOW,
    )


def sent_to(c: Cluster, name: str) -> str | None:
    spec: dict[str, Any] = c.held("Pod", name)["spec"]
    if any(g["name"] == ADMISSION_GATE for g in spec.get("schedulingGates") or []):
        return None
    return str((spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL))


def test_members_that_arrive_after_admission_go_to_their_planned_nodes_at_once() -> None:
    c = admitted("bind-0", "bind-1", placement={"n1": 1, "n2": 1})
    assert asyncio.run(releaser(c).release()) == 2
    assert {sent_to(c, "bind-0"), sent_to(c, "bind-1")} == {"n1", "n2"}
    # The other gate stays: only ours is the queue's to lift.
    gates = c.held("Pod", "bind-0")["spec"]["schedulingGates"]
    assert [g["name"] for g in gates] == ["other.io/gate"]
    # The state holds what the writes returned: the next cycle binds nothing again.
    assert only(c.plan(), act.BindMember) == []


def test_a_member_whose_release_is_in_flight_keeps_its_slot() -> None:
    c = admitted("bind-0", "bind-1", placement={"n1": 1, "n2": 1})
    c.applier.in_flight.add("ns/bind-0", "n1")  # a cycle's patch, not answered yet
    c.state.take_gated_arrivals()
    c.fake.update(c.held("Pod", "bind-1"))  # only bind-1 arrives, at a new version
    c.watch("Pod", "bind-1")  # (the last cycle saw both)
    assert asyncio.run(releaser(c, members=("bind-0", "bind-1")).release()) == 1
    assert sent_to(c, "bind-0") is None  # left to the write in flight
    assert sent_to(c, "bind-1") == "n2"


def test_a_cycle_counts_releases_in_flight_as_sent() -> None:
    from queue_controller.controller.binding import with_sent
    from queue_controller.controller.lifecycle import Planner
    from queue_controller.core import CycleResult
    from tests.views import seen

    c = admitted("bind-0", "bind-1", placement={"n1": 1, "n2": 1})
    view = seen(c.state, NOW)
    from dataclasses import replace

    view = replace(view, gangs=with_sent(view.gangs, {"ns/bind-1": "n1"}))
    binds = only(Planner(300).plan(view, CycleResult((), {}), now=NOW), act.BindMember)
    assert [(b.pod.ref.name, b.node) for b in binds] == [("bind-0", "n2")]


def test_a_gang_not_admitted_or_not_let_go_is_left_to_the_cycle() -> None:
    pending = admitted("bind-0", "bind-1", placement={}, phase="Pending")
    assert asyncio.run(releaser(pending).release()) == 0
    suspended = admitted("bind-0", "bind-1", placement={"n1": 2}, suspend=True)
    assert asyncio.run(releaser(suspended).release()) == 0
    assert pending.fake.writes() == []
    assert suspended.fake.writes() == []


def test_a_replica_that_does_not_lead_sends_nothing_and_forgets_the_arrivals() -> None:
    c = admitted("bind-0", "bind-1", placement={"n1": 2})
    follower = releaser(c, leading=False)
    assert asyncio.run(follower.release()) == 0
    assert c.fake.writes() == []
    assert c.state.take_gated_arrivals() == set()


def test_members_beyond_the_plan_are_left_to_the_cycle() -> None:
    c = admitted("bind-0", "bind-1", "bind-2", placement={"n1": 2})
    assert asyncio.run(releaser(c).release()) == 2
    assert sorted(filter(None, (sent_to(c, f"bind-{i}") for i in range(3)))) == ["n1", "n1"]


def test_the_releaser_waits_while_a_cycle_copies_the_state_or_reserves() -> None:
    c = admitted("bind-0", "bind-1", placement={"n1": 2})

    async def scenario() -> int:
        planning = asyncio.Lock()
        await planning.acquire()  # a cycle is planning
        task = asyncio.create_task(releaser(c, planning=planning).release())
        await asyncio.sleep(0.05)
        assert not task.done()
        assert c.fake.writes() == []
        planning.release()
        return await task

    assert asyncio.run(scenario()) == 2


def test_reserved_slots_are_freed_when_the_writes_are_done_even_failed_ones() -> None:
    c = admitted("bind-0", "bind-1", placement={"n1": 2})
    actions = only(c.plan(), act.BindMember)
    reserved = c.applier.reserve(actions)
    assert sorted(reserved) == ["ns/bind-0", "ns/bind-1"]
    assert c.applier.in_flight.copy() == {"ns/bind-0": "n1", "ns/bind-1": "n1"}
    c.fake.fail_next(Exception("a bug"), when=lambda call: call.name == "bind-1")
    with pytest.raises(Exception, match="a bug"):
        asyncio.run(c.applier.apply_all(actions, reserved=reserved))
    assert len(c.applier.in_flight) == 0


def test_no_member_is_sent_until_the_gang_is_whole() -> None:
    """The Job controller makes a big gang's members a few at a time: sent as they came,
    the first would hold their GPUs while the gang was only partly placed."""
    c = admitted("bind-0", placement={"n1": 2})
    assert asyncio.run(releaser(c).release()) == 0
    assert only(c.plan(), act.BindMember) == []
    assert c.fake.writes() == []
    c.fake.create(POD, "ns", pod("bind-1", gated=True, phase="Pending", owner="bind"))
    c.watch("Pod", "bind-1")
    assert asyncio.run(releaser(c, members=("bind-0",)).release()) == 2
    assert [sent_to(c, "bind-0"), sent_to(c, "bind-1")] == ["n1", "n1"]


def test_a_member_that_succeeded_still_counts_toward_a_whole_gang() -> None:
    c = cluster(
        job("bind", suspend=False),
        group("bind", phase="Running", placement={"n1": 2}, admittedAt=iso(50)),
        pod("bind-0", node="n1", phase="Succeeded", owner="bind"),
        pod("bind-1b", gated=True, phase="Pending", owner="bind"),  # bind-1 failed, remade
    )
    (bind,) = only(c.plan(), act.BindMember)
    assert (bind.pod.ref.name, bind.node) == ("bind-1b", "n1")


def test_the_releaser_sends_while_a_cycle_plans_and_the_cycle_drops_what_could_clash() -> None:
    """A cycle plans from its copy on its own thread; arrived members do not wait for it.
    Here the plan has one slot, on n1.  The cycle's copy holds bind-1 alone, and plans it
    there; meanwhile bind-0 arrives, and the releaser, which sees both, sends bind-0 (the
    first by name) to n1.  The cycle's binding of bind-1 to n1 would put a second pod on
    the one slot: it is dropped, and bind-1 stays gated."""
    import threading

    from tests.loops import scheduling_loop

    c = admitted("bind-1", placement={"n1": 1})
    loop = scheduling_loop(c.state, now=NOW, applier=c.applier, tick_seconds=5)
    planned, go = threading.Event(), threading.Event()
    plan = loop._plan
    binds: list[tuple[str, str | None]] = []

    def plan_then_wait(*args: Any) -> Any:
        result = plan(*args)
        binds.extend((a.pod.ref.name, a.node) for a in only(result.actions, act.BindMember))
        planned.set()
        go.wait(10)
        return result

    loop._plan = plan_then_wait  # type: ignore[method-assign]

    async def scenario() -> int:
        cycle = asyncio.create_task(loop.cycle())
        assert await asyncio.to_thread(planned.wait, 10)
        c.fake.create(POD, "ns", pod("bind-0", gated=True, phase="Pending", owner="bind"))
        c.watch("Pod", "bind-0")
        sent = await releaser(c, members=("bind-1",)).release()  # not held up by the cycle
        go.set()
        await cycle
        return sent

    assert asyncio.run(scenario()) == 1
    assert binds == [("bind-1", "n1")], "the cycle did plan the clashing binding"
    assert sent_to(c, "bind-0") == "n1"
    assert sent_to(c, "bind-1") is None
    assert len(c.applier.in_flight) == 0


def test_bindings_of_members_sent_since_the_copy_or_to_their_nodes_are_dropped() -> None:
    from queue_controller.controller.binding import InFlight, without_sent_since

    c = admitted("bind-0", "bind-1", "bind-2", placement={"n1": 1, "n2": 1, "n3": 1})
    actions = only(c.plan(), act.BindMember)
    assert [(a.pod.ref.name, a.node) for a in actions] == [
        ("bind-0", "n1"),
        ("bind-1", "n2"),
        ("bind-2", "n3"),
    ]
    in_flight = InFlight()
    in_flight.add("ns/bind-2", "n3")  # before the copy: the copy counts it already
    since = in_flight.since()
    assert without_sent_since(actions, since) == actions
    in_flight.add("ns/bind-0", "n1")  # the same member
    in_flight.add("ns/other", "n2")  # another gang's member, to bind-1's node
    assert in_flight.close(since) is since
    in_flight.add("ns/later", "n3")  # after the cycle reserved: not its business
    assert [a.pod.ref.name for a in without_sent_since(actions, since)] == ["bind-2"]
    assert since.pods == {"ns/bind-0", "ns/other"}
