"""A preemption through whole cycles of the scheduling loop, in-process against the fake
Gateway, with the real core: what it leaves in the PodGroups, the journal and the metrics.

The preemptor's nomination time is stored in its PodGroup (``status.nominatedAt``), so
the reclaim time is right even when another controller admits it; the nominated room
is a gauge while the preempted gangs are still going.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from queue_controller.cli import cli
from queue_controller.controller.apply import Applier
from queue_controller.controller.leader import Leadership
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.loop import SUMMARY_SECONDS, SchedulingLoop
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.server import Health
from queue_controller.controller.settings import Settings
from queue_controller.controller.state import ClusterState
from queue_controller.controller.summaries import nominated_room
from queue_controller.core import CycleResult, Decision, Reason, Verdict
from queue_controller.journal import Journal, JournalEvent, read_history
from queue_controller.kube.resources import COHORT, POD
from tests.fakes.gateway import FakeGateway
from tests.unit.test_apply import admit, cluster, preempt
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job, pod
from tests.views import seen

GPU = "nvidia.com/gpu"
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "resourceVersion": "3", "labels": {}},
    "status": {
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: "4"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}
TEAM = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "TeamQuota",
    "metadata": {"name": "team", "resourceVersion": "2"},
    "spec": {
        "resources": {GPU: {"nominal": 4}},
        "preemption": {"withinTeamQuota": "LowerPriority"},
    },
}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "resourceVersion": "4"},
        "value": value,
    }


def gang(name: str, priority: str, *, running_since: float | None = None) -> list[dict[str, Any]]:
    """A two-member Job of one GPU each: running on n1 since then, or pending."""
    created = running_since if running_since is not None else 60
    body = job(name, suspend=running_since is None, creationTimestamp=iso(created + 60))
    spec = body["spec"]["template"]["spec"]
    spec["priorityClassName"] = priority
    if running_since is None:
        return [body]
    members = []
    for i in range(2):
        member = pod(f"{name}-{i}", node="n1", owner=name)
        member["spec"]["containers"][0]["resources"] = {"limits": {GPU: 1}}
        member["spec"]["priorityClassName"] = priority
        members.append(member)
    status = {"placement": {"n1": 2}, "admittedAt": iso(running_since), "running": 2}
    return [body, group(name, phase="Running", **status), *members]


class Controller:
    """The scheduling loop with its own metrics: a new one is a restarted controller."""

    def __init__(
        self, fake: FakeGateway, clock: Callable[[], float], journal: Journal | None = None
    ) -> None:
        self.fake, self.metrics, self.state = fake, Metrics(), ClusterState()
        self.loop = SchedulingLoop(
            state=self.state,
            planner=Planner(300),
            applier=Applier(fake, self.state, journal, self.metrics, clock=clock),
            leadership=Leadership(Settings(leader_election=False), self.metrics),
            metrics=self.metrics,
            health=Health(),
            clock=clock,
            tick_seconds=1,
            batch_seconds=0,
            status_writes_per_cycle=100,
        )

    def cycle(self) -> None:
        self.state.replace_all(self.fake.all())  # what the watches would hold by now
        asyncio.run(self.loop.cycle())

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


def status(fake: FakeGateway, name: str) -> dict[str, Any]:
    held = fake.held("PodGroup", "ns", name)
    assert held is not None
    found: dict[str, Any] = held["status"]
    return found


def test_the_reclaim_time_and_the_held_room_survive_a_restart(tmp_path: Path) -> None:
    now = [NOW]
    fake = FakeGateway(
        QUEUE,
        TEAM,
        NODE,
        priority_class("low", 10),
        priority_class("high", 1000),
        *gang("low-old", "low", running_since=500),
        *gang("low-new", "low", running_since=300),
        *gang("high", "high"),
        clock=lambda: now[0],
    )
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = Journal(url, flush_interval=0.01)
    journal.start()
    first = Controller(fake, lambda: now[0], journal)
    first.cycle()  # its PodGroup is made, and it preempts the newest of the low gangs
    journal.close()

    high = status(fake, "high")
    assert (high["phase"], high["reason"]) == ("Pending", "Preempting")
    assert high["nominatedPlacement"] == {"main": {"n1": 2}}
    assert high["nominatedAt"] == iso(0)
    assert status(fake, "low-new")["reason"] == "Preempted"
    assert status(fake, "low-old")["phase"] == "Running"
    queue = {"queue": "ns/q"}
    assert first.sample("queue_controller_nominated_accelerators", resource=GPU, **queue) == 2
    assert first.sample("queue_controller_reclaim_seconds_count", **queue) is None

    # Who preempted whom, in the journal and in `history`.
    entries = {(e.name, e.event): e for e in read_history(url, namespace="ns")}
    evicted = entries[("low-new", JournalEvent.EVICTED)]
    assert evicted.reason == "Preempted"
    assert evicted.message == "preempted by Job ns/high (WithinTeamQuota)"
    preempting = entries[("high", JournalEvent.PENDING)]
    assert preempting.reason == "Preempting"
    assert "ns/low-new" in preempting.message
    assert "WithinTeamQuota" in preempting.message
    assert ("low-old", JournalEvent.EVICTED) not in entries
    shown = CliRunner().invoke(cli, ["history", "--db", url, "-n", "ns"], terminal_width=400)
    assert shown.exit_code == 0, shown.output
    assert "preempted by Job ns/high (WithinTeamQuota)" in shown.stdout
    assert "preempting 1 gang (ns/low-new)" in shown.stdout

    # The victim's members linger (terminating): the room stays held, cycle after cycle.
    for i in range(2):
        lingering = pod(f"low-new-{i}", node="n1", owner="low-new")
        lingering["spec"]["containers"][0]["resources"] = {"limits": {GPU: 1}}
        lingering["metadata"]["deletionTimestamp"] = iso(-5)
        fake.seed(lingering)
    now[0] = NOW + 30
    first.cycle()
    assert status(fake, "high")["phase"] == "Pending"
    assert status(fake, "high")["nominatedAt"] == iso(0)
    assert first.sample("queue_controller_nominated_accelerators", resource=GPU, **queue) == 2

    # A restarted controller admits it once they are gone, and counts from the nomination.
    for i in range(2):
        fake.delete(POD, "ns", f"low-new-{i}")
    now[0] = NOW + 42
    second = Controller(fake, lambda: now[0])
    second.cycle()
    high = status(fake, "high")
    assert high["phase"] == "Admitted"
    assert high["placement"] == {"n1": 2}
    assert "nominatedAt" not in high
    assert "nominatedPlacement" not in high
    assert second.sample("queue_controller_reclaim_seconds_count", **queue) == 1
    assert second.sample("queue_controller_reclaim_seconds_sum", **queue) == 42
    assert second.sample("queue_controller_reclaim_seconds_bucket", le="60.0", **queue) == 1
    assert second.sample("queue_controller_reclaim_seconds_bucket", le="30.0", **queue) == 0
    held = second.sample("queue_controller_nominated_accelerators", resource=GPU, **queue)
    assert held is None, "the room is a placement now"
    assert status(fake, "low-new")["phase"] == "Pending", "the victim waits again"


def test_taking_room_again_keeps_the_first_nomination_time_and_drops_the_old_nodes() -> None:
    c = cluster(
        job("preemptor"),
        group(
            "preemptor",
            phase="Pending",
            reason="NoNodeFit",
            nominatedPlacement={"main": {"n1": 2}, "gone": {"n1": 1}},
            nominatedAt=iso(100),
        ),
        job("victim", suspend=False),
        group("victim", phase="Running", placement={"n2": 1}),
        pod("victim-0", node="n2", owner="victim"),
    )
    assert c.cycle(preempt("preemptor", "victim")) == 0
    held = c.held("PodGroup", "preemptor")["status"]
    assert held["nominatedPlacement"] == {"main": {"n2": 2}}
    assert held["nominatedAt"] == iso(100)


def test_a_first_nomination_is_stamped_now() -> None:
    c = cluster(
        job("preemptor"),
        group("preemptor", phase="Pending", nominatedAt=iso(900)),  # stale, no room held
        job("victim", suspend=False),
        group("victim", phase="Running", placement={"n2": 1}),
        pod("victim-0", node="n2", owner="victim"),
    )
    assert c.cycle(preempt("preemptor", "victim")) == 0
    assert c.held("PodGroup", "preemptor")["status"]["nominatedAt"] == iso(0)


@pytest.mark.parametrize("preempted", [True, False])
def test_only_an_admission_onto_nominated_room_is_a_reclaim(preempted: bool) -> None:
    extra = {"nominatedPlacement": {"main": {"n1": 2}}, "nominatedAt": iso(75)} if preempted else {}
    c = cluster(job(), group(phase="Pending", reason="Preempting", **extra))
    assert c.cycle(admit()) == 0
    held = c.held("PodGroup", "train")["status"]
    assert held["phase"] == "Admitted"
    assert "nominatedAt" not in held
    metrics = c.applier.metrics.registry
    count = metrics.get_sample_value("queue_controller_reclaim_seconds_count", {"queue": "ns/q"})
    total = metrics.get_sample_value("queue_controller_reclaim_seconds_sum", {"queue": "ns/q"})
    assert (count, total) == ((1, 75) if preempted else (None, None))


def test_the_nominated_gauge_counts_accelerators_by_queue_and_resource() -> None:
    mig = job("mig")
    mig["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/mig-1g.10gb": 2, "cpu": 3}
    }
    state = ClusterState()
    holding = group("mig", phase="Pending", nominatedPlacement={"main": {"n1": 1, "n2": 1}})
    for obj in (QUEUE, job("train"), group(phase="Pending"), mig, holding, job("other")):
        state.upsert(obj)
    decisions = (
        preempt("train", "victim"),  # holds {"n2": 2}: two members of one GPU
        Decision(
            "ns/mig",
            "q",
            Verdict.PENDING,
            Reason.PREEMPTING,
            "holding room",
            kind="Job",
        ),
        Decision("ns/other", "q", Verdict.PENDING, Reason.NO_NODE_FIT, "no", kind="Job"),
    )
    held = nominated_room(seen(state, NOW), CycleResult(decisions, {}))
    assert held == {("ns/q", GPU): 2.0, ("ns/q", "nvidia.com/mig-1g.10gb"): 4.0}


def test_a_fair_sharing_quota_shows_its_weighted_share_as_a_gauge_and_in_its_status() -> None:
    # team (nominal 0, weight 2) borrows the 2 GPUs of its running gang from the lender's
    # 4: 2/4 = 0.5, by 2 = 0.25 -> 250.
    team = {
        **TEAM,
        "spec": {
            "cohort": "pool",
            "resources": {GPU: {"nominal": 0}},
            "fairSharing": {"weight": 2},
        },
    }
    lender = {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": {"name": "lender", "resourceVersion": "5"},
        "spec": {"cohort": "pool", "resources": {GPU: {"nominal": 4}}},
    }
    cohort = {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "Cohort",
        "metadata": {"name": "pool", "resourceVersion": "6"},
        "spec": {"fairSharing": {"enabled": True}},
    }
    fake = FakeGateway(
        QUEUE,
        team,
        lender,
        cohort,
        NODE,
        priority_class("low", 10),
        *gang("borrowing", "low", running_since=100),
        clock=lambda: NOW,
    )
    now = [NOW]
    controller = Controller(fake, lambda: now[0])
    controller.cycle()
    assert controller.sample("queue_controller_team_quota_weighted_share", team_quota="team") == 250
    assert controller.sample("queue_controller_team_quota_weighted_share", team_quota="lender") == 0
    held = fake.held("TeamQuota", "", "team")
    assert held is not None
    assert held["status"]["fairSharing"] == {"weightedShare": 250}
    # Fair sharing switched off: the gauge and the status figure go.
    fake.delete(COHORT, "", "pool")
    now[0] += SUMMARY_SECONDS  # a later cycle, past the pacing of status figures
    controller.cycle()
    assert (
        controller.sample("queue_controller_team_quota_weighted_share", team_quota="team") is None
    )
    held = fake.held("TeamQuota", "", "team")
    assert held is not None
    assert "fairSharing" not in held["status"]
