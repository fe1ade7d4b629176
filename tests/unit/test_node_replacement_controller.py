"""Failed-node replacement on the write side: the planner turns the core's replacement
into one conditional PodGroup status write (the plan, lost node -> replacement) and a
NodeReplaced event; no member is ever sent to a lost node; the binder then sends the
lost member's new pod to the replacement, and the running member is left alone."""

from __future__ import annotations

import asyncio
from typing import Any

from queue_controller.api.v1alpha1 import PodGroupStatus
from queue_controller.chaos.experiments import REPLACED_PHASES, node_loss, replaces_lost_nodes
from queue_controller.chaos.observe import GangSeen, Member, Timeline
from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.replacing import rewrite
from queue_controller.controller.state import ClusterState
from queue_controller.core import CycleResult
from queue_controller.core.model import Replacement
from tests.fakes.gateway import FakeGateway
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job, pod
from tests.unit.test_reservation_controller import node
from tests.views import seen

REPLACING = {**QUEUE, "spec": {**QUEUE["spec"], "onNodeFailure": "Replace"}}
LOST = Replacement("Job/ns/train", "main", "n1", "Deleted", "n3", 1, "b/r")


def running_gang(*pods: dict[str, Any]) -> tuple[FakeGateway, ClusterState, Applier]:
    pg = group(
        phase="Running",
        placement={"n1": 1, "n2": 1},
        admittedAt=iso(100),
        topologyDomain="b/r",
        topologyAssignment={"main": {"domain": "b/r", "slices": [{"n1": 1}, {"n2": 1}]}},
    )
    fake = FakeGateway(
        REPLACING, job(suspend=False), pg, node("n2"), node("n3"), *pods, clock=lambda: NOW
    )
    state = ClusterState()
    state.replace_all(fake.all())
    return fake, state, Applier(fake, state, None, Metrics(), clock=lambda: NOW)


def plan(state: ClusterState, *replacements: Replacement) -> list[act.Action]:
    result = CycleResult((), {}, replacements=replacements)
    return Planner(300).plan(seen(state, NOW), result, now=NOW)


def test_the_plan_is_rewritten_lost_node_to_replacement_with_a_node_replaced_event() -> None:
    fake, state, applier = running_gang(
        pod("m0", node="n2"), pod("m1", phase="Pending", gated=True)
    )
    actions = plan(state, LOST)
    replaced = [a for a in actions if isinstance(a, act.ReplaceNodes)]
    assert len(replaced) == 1
    # The gated member is not sent this cycle: not to the lost node, and not on a plan
    # whose write has not landed.
    assert not [a for a in actions if isinstance(a, act.BindMember)]
    assert asyncio.run(applier.apply_all(actions)) == 0
    status = fake.held("PodGroup", "ns", "train")["status"]  # type: ignore[index]
    assert status["placement"] == {"n2": 1, "n3": 1}
    assert status["topologyAssignment"]["main"] == {
        "domain": "b/r",
        "slices": [{"n3": 1}, {"n2": 1}],
    }
    (record,) = status["replacedNodes"]
    assert (record["node"], record["replacement"], record["reason"]) == ("n1", "n3", "Deleted")
    events = [c for c in fake.calls if c.method == "event"]
    assert any((c.body or {}).get("reason") == "NodeReplaced" for c in events)

    # The next cycle sends the new member to the replacement; the running one is untouched.
    state.upsert(fake.held("PodGroup", "ns", "train"))  # type: ignore[arg-type]
    binds = [a for a in plan(state) if isinstance(a, act.BindMember)]
    assert [(b.pod.ref.name, b.node) for b in binds] == [("m1", "n3")]


def test_no_member_is_sent_to_a_lost_node_without_a_replacement() -> None:
    _, state, _ = running_gang(pod("m0", node="n2"), pod("m1", phase="Pending", gated=True))
    actions = plan(state)
    assert not [a for a in actions if isinstance(a, (act.BindMember, act.ReplaceNodes))]


def test_a_conflicting_plan_write_changes_nothing() -> None:
    fake, state, applier = running_gang(
        pod("m0", node="n2"), pod("m1", phase="Pending", gated=True)
    )
    actions = plan(state, LOST)
    pg = fake.held("PodGroup", "ns", "train")
    assert pg is not None
    fake.update(pg)  # someone wrote it since the cycle's copy: a new version
    assert asyncio.run(applier.apply_all(actions)) >= 1
    assert fake.held("PodGroup", "ns", "train")["status"]["placement"] == {"n1": 1, "n2": 1}  # type: ignore[index]


def test_rewrite_moves_a_pod_set_plan_and_the_total() -> None:
    status = PodGroupStatus.model_validate(
        {
            "placement": {"a": 2, "b": 1},
            "podSetPlacement": {"w": {"a": 1, "b": 1}, "l": {"a": 1}},
        }
    )
    moved = rewrite(status, "l", [Replacement("k", "w", "a", "NotReady", "c", 1, "")], NOW)
    assert moved.by_set == {"w": {"b": 1, "c": 1}, "l": {"a": 1}}
    assert moved.placement == {"a": 1, "b": 1, "c": 1}
    assert moved.patch["podSetPlacement"]["w"] == {"a": None, "b": 1, "c": 1}


def test_chaos_marks_replaced_then_running_only_once_the_gang_is_whole_again() -> None:
    def seen(*members: Member, replaced: int = 0) -> GangSeen:
        status = {
            "phase": "Running",
            "replacedNodes": [{"node": "n1", "replacement": "n3"}] * replaced,
        }
        group = {"spec": {"queue": "q", "minMember": 2}, "status": status}
        return GangSeen("ns", "train", {"spec": {}}, group, members)

    line = Timeline(injected_at=100.0, requeues_before=0)
    line.track_running = line.track_replaced = True
    one = Member("train-b", "n2", "Running", True)
    assert line.observe(seen(one), 101) == []  # Running, but a member short
    marks = line.observe(seen(one, replaced=1), 140)
    assert [(m.phase, m.detail) for m in marks] == [("replaced", "n1 replaced by n3")]
    back = Member("train-c", "n3", "Running", True)
    assert [m.phase for m in line.observe(seen(one, back, replaced=1), 150)] == ["running"]


def test_chaos_knows_a_queue_that_replaces_or_its_team_quotas() -> None:
    gang = GangSeen("ns", "train", {}, {"spec": {"queue": "q"}}, ())

    def queue(**spec: str) -> dict[str, Any]:
        meta = {"name": "q", "namespace": "ns"}
        return {"kind": "Queue", "metadata": meta, "spec": {"teamQuota": "t", **spec}}

    quota = {"kind": "TeamQuota", "metadata": {"name": "t"}, "spec": {"onNodeFailure": "Replace"}}
    assert replaces_lost_nodes(gang, [queue(onNodeFailure="Replace")])
    assert not replaces_lost_nodes(gang, [queue()])
    assert replaces_lost_nodes(gang, [queue(), quota])
    assert not replaces_lost_nodes(gang, [queue(onNodeFailure="Evict"), quota])
    node = {"metadata": {"name": "n1"}}
    injection = node_loss(seen_running(), node, keep_in="ns", replaces=True)
    assert (injection.expect, injection.once) == (REPLACED_PHASES, True)


def seen_running() -> GangSeen:
    group = {"spec": {"queue": "q"}, "status": {"phase": "Running"}}
    return GangSeen("ns", "train", {"spec": {"suspend": False}}, group, ())
