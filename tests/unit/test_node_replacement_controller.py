"""Failed-node replacement on the write side: the planner turns the core's replacement
into one conditional PodGroup status write (the plan, lost node -> replacement) and a
NodeReplaced event; no member is ever sent to a lost node; the binder then sends the
lost member's new pod to the replacement, and the running member is left alone."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

from queue_controller.api.v1alpha1 import PodGroupStatus
from queue_controller.chaos.experiments import REPLACED_PHASES, node_loss, replaces_lost_nodes
from queue_controller.chaos.observe import PHASES, GangSeen, Member, Timeline
from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.replacing import narrowed, rewrite
from queue_controller.controller.state import ClusterState
from queue_controller.core import CycleResult
from queue_controller.core.cycle import NOT_REPLACED
from queue_controller.core.model import Replacement
from queue_controller.journal import Journal, JournalEvent, read_history
from tests.fakes.gateway import FakeGateway
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job, pod
from tests.unit.test_reservation_controller import node
from tests.views import seen

REPLACING = {**QUEUE, "spec": {**QUEUE["spec"], "onNodeFailure": "Replace"}}
RACK = "topology.queue-controller.io/rack"


def rack_job() -> dict[str, Any]:
    """The Job, asking for one rack: only a gang with a topology request is replaced."""
    body = job(suspend=False)
    annotations = {"queue-controller.io/topology-required": RACK}
    body["spec"]["template"]["metadata"] = {"annotations": annotations}
    return body


LOST = Replacement("Job/ns/train", "main", "n1", "Deleted", "n3", 1, "b/r")


def running_gang(*pods: dict[str, Any]) -> tuple[FakeGateway, ClusterState, Applier]:
    pg = group(
        phase="Running",
        placement={"n1": 1, "n2": 1},
        admittedAt=iso(100),
        topologyDomain="b/r",
        topologyAssignment={"main": {"domain": "b/r", "slices": [{"n1": 1}, {"n2": 1}]}},
    )
    fake = FakeGateway(REPLACING, rack_job(), pg, node("n2"), node("n3"), *pods, clock=lambda: NOW)
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
    assignment = {"main": {"domain": "", "slices": []}}  # spread over top-level domains
    admitted = {"spec": {"queue": "q"}, "status": {"topologyAssignment": assignment}}
    gang = GangSeen("ns", "train", {}, admitted, ())

    def queue(**spec: str) -> dict[str, Any]:
        meta = {"name": "q", "namespace": "ns"}
        return {"kind": "Queue", "metadata": meta, "spec": {"teamQuota": "t", **spec}}

    quota = {"kind": "TeamQuota", "metadata": {"name": "t"}, "spec": {"onNodeFailure": "Replace"}}
    assert replaces_lost_nodes(gang, [queue(onNodeFailure="Replace")])
    assert replaces_lost_nodes(gang, [queue()])  # Replace is the default
    assert replaces_lost_nodes(gang, [queue(), quota])
    assert not replaces_lost_nodes(gang, [queue(onNodeFailure="Evict"), quota])
    evicting = {**quota, "spec": {"onNodeFailure": "Evict"}}
    assert not replaces_lost_nodes(gang, [queue(), evicting])
    # A gang admitted without a topology request has no domain to be replaced in.
    plain = GangSeen("ns", "train", {}, {"spec": {"queue": "q"}}, ())
    assert not replaces_lost_nodes(plain, [queue(onNodeFailure="Replace")])
    node = {"metadata": {"name": "n1"}}
    injection = node_loss(seen_running(), node, keep_in="ns", replaces=True)
    assert (injection.expect, injection.once) == (REPLACED_PHASES, True)


def seen_running() -> GangSeen:
    group = {"spec": {"queue": "q"}, "status": {"phase": "Running"}}
    return GangSeen("ns", "train", {"spec": {"suspend": False}}, group, ())


def test_a_gang_with_no_replacement_is_evicted_saying_why() -> None:
    """No node of the rack fits: the MembersLost timeout evicts it whole, as without
    replacement, and the eviction carries the core's reason (chaos reads it)."""
    _, state, _ = running_gang(pod("m0", node="n2"))
    held = copy.deepcopy(state.get("PodGroup", "ns", "train"))
    assert held is not None
    held["metadata"]["resourceVersion"] = "99"
    held["status"]["conditions"] = [
        {
            "type": "PodsReady",
            "status": "False",
            "reason": "MembersLost",
            "lastTransitionTime": iso(1000),  # long past the 300 s timeout
        }
    ]
    state.upsert(held)
    why = "no node of rack b/r takes the 1 member of pod set main that was on n1"
    result = CycleResult((), {}, unreplaced={"Job/ns/train": why})
    actions = Planner(300).plan(seen(state, NOW), result, now=NOW)
    (evict,) = [a for a in actions if isinstance(a, act.Evict)]
    assert evict.reason == "MembersLost"
    assert evict.message.endswith(f"; {NOT_REPLACED}{why}")
    # Without the core's word, the eviction says nothing of replacement.
    plain = Planner(300).plan(seen(state, NOW), CycleResult((), {}), now=NOW)
    (evict,) = [a for a in plain if isinstance(a, act.Evict)]
    assert NOT_REPLACED not in evict.message


def test_chaos_judges_an_eviction_that_says_no_replacement_fit_as_a_loss_without_one() -> None:
    """node-loss on a gang whose Queue replaces (the default): evicted saying that no node
    of its rack fits is right, and the run passes once the gang is readmitted; evicted
    without saying so is a broken promise, and the run fails."""
    from queue_controller.chaos.runner import Outcome, Runner
    from queue_controller.check import Timing
    from tests.unit.test_chaos import MemoryGateway

    def judged(detail: str) -> Outcome:
        injection = node_loss(
            seen_running(), {"metadata": {"name": "n1"}}, keep_in="ns", replaces=True
        )
        line = Timeline(injected_at=100.0, requeues_before=0)
        line.track_running = line.track_replaced = True
        outcome = Outcome("r", injection, line, deadline=600.0)
        said: list[str] = []
        runner = Runner(MemoryGateway({}), run="r", timing=Timing(), interval=1.0, say=said.append)
        line.mark("injected", 100.0, "delete Node n1")
        line.mark("evicted", 200.0, detail)
        runner._fall_back(injection, outcome)
        for phase in ("quota back", "requeued", "readmitted"):
            line.mark(phase, 210.0, "")
        runner._judge(outcome)
        return outcome

    why = "no node of rack b/r takes the 1 member of pod set main that was on n1"
    right = judged(f"MembersLost: only 1 of 2 members running for 300s; {NOT_REPLACED}{why}")
    assert right.injection.fallback is None
    assert right.injection.expect == PHASES
    assert right.problems == []
    wrong = judged("MembersLost: only 1 of 2 members running for 300s")
    assert wrong.injection.expect == REPLACED_PHASES
    assert any("admission was lost" in p for p in wrong.problems), wrong.problems


def test_the_recorded_domain_follows_the_members_to_the_replacement() -> None:
    """status.topologyDomain is the narrowest domain holding the members: a pod set that
    was all on the lost node is now all on the replacement; one spread over a rack stays
    in the rack; one whose replacement lies in another rack of the block widens to it."""
    one_node = Replacement("k", "main", "n1", "Deleted", "n3", 2, "b/r", "b/r/n3")
    assert narrowed("b/r/n1", one_node) == "b/r/n3"
    assert narrowed("b/r", one_node) == "b/r"
    other_rack = Replacement("k", "main", "n1", "Deleted", "n5", 1, "b", "b/r2/n5")
    assert narrowed("b/r", other_rack) == "b"
    assert narrowed("", other_rack) == ""  # nothing recorded: nothing to narrow

    status = PodGroupStatus.model_validate(
        {
            "placement": {"n1": 2},
            "topologyDomain": "b/r/n1",
            "topologyAssignment": {"main": {"domain": "b/r/n1", "slices": [{"n1": 2}]}},
        }
    )
    moved = rewrite(status, "main", [one_node], NOW)
    assert moved.patch["topologyDomain"] == "b/r/n3"
    assert moved.patch["topologyAssignment"] == {
        "main": {"slices": [{"n3": 2}], "domain": "b/r/n3"}
    }
    # A replacement that leaves the domain as it was writes no domain.
    spread = PodGroupStatus.model_validate(
        {
            "placement": {"n1": 1, "n2": 1},
            "topologyDomain": "b/r",
            "topologyAssignment": {"main": {"domain": "b/r", "slices": []}},
        }
    )
    moved = rewrite(spread, "main", [one_node], NOW)
    assert "topologyDomain" not in moved.patch
    assert "topologyAssignment" not in moved.patch


def test_the_journal_records_the_replacement_with_the_plan_as_it_is_now(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    fake, state, _ = running_gang(pod("m0", node="n2"))
    journal = Journal(url)
    journal.start()  # brings the schema up
    try:
        applier = Applier(fake, state, journal, Metrics(), clock=lambda: NOW)
        assert asyncio.run(applier.apply_all(plan(state, LOST))) == 0
        assert journal.flush()
    finally:
        journal.close()
    (entry,) = read_history(url, namespace="ns")
    assert (entry.event, entry.reason) == (JournalEvent.REPLACED, "NodeReplaced")
    assert entry.placement == {"n2": 1, "n3": 1}
    assert entry.message == LOST.describe()
