"""The write side: the Applier carries out real planner decisions against a fake Gateway.

Each test builds raw objects, seeds the fake and a ClusterState with the same ones,
translates and plans as a cycle does, applies, and then reads what the fake was sent
and what it holds.  No watch event is ever delivered unless a test says so.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from dataclasses import dataclass
from typing import Any, get_args

import pytest

from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.core import Cohort, CohortFigures, CycleResult, Decision, Reason, Verdict
from queue_controller.core.model import Replacement
from queue_controller.kube import gateway as gw
from queue_controller.kube import kinds
from queue_controller.kube.gangs import WORKLOAD_KIND_LABEL
from queue_controller.kube.resources import ADMISSION_GATE
from tests.fakes.gateway import Call, FakeGateway, merge_patch
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job, pod
from tests.views import seen

Obj = dict[str, Any]


@dataclass
class Cluster:
    fake: FakeGateway
    state: ClusterState
    applier: Applier

    def plan(
        self,
        *decisions: Decision,
        usage: dict[str, dict[str, int]] | None = None,
        cohorts: dict[str, CohortFigures] | None = None,
        replacements: tuple[Replacement, ...] = (),
    ) -> list[act.Action]:
        """What the planner decides from the controller's state, as a cycle would."""
        result = CycleResult(
            decisions, usage or {}, cohorts=cohorts or {}, replacements=replacements
        )
        return Planner(300).plan(seen(self.state, NOW), result, now=NOW)

    def apply(self, actions: list[act.Action]) -> int:
        return asyncio.run(self.applier.apply_all(actions))

    def cycle(
        self,
        *decisions: Decision,
        usage: dict[str, dict[str, int]] | None = None,
        cohorts: dict[str, CohortFigures] | None = None,
        replacements: tuple[Replacement, ...] = (),
    ) -> int:
        return self.apply(
            self.plan(*decisions, usage=usage, cohorts=cohorts, replacements=replacements)
        )

    def held(self, kind: str, name: str, namespace: str = "ns") -> Obj:
        obj = self.fake.held(kind, namespace, name)
        assert obj is not None, f"the fake holds no {kind} {namespace}/{name}"
        return obj

    def watch(self, kind: str, name: str, namespace: str = "ns") -> None:
        """Deliver the watch event for the fake's current object."""
        self.state.upsert(self.held(kind, name, namespace))


def cluster(*objects: Obj) -> Cluster:
    """The fake and the controller's state, both holding QUEUE and ``objects``."""
    fake = FakeGateway(QUEUE, *objects, clock=lambda: NOW)
    state = ClusterState()
    state.replace_all(fake.all())
    return Cluster(fake, state, Applier(fake, state, None, Metrics(), clock=lambda: NOW))


def admit(name: str = "train", placement: dict[str, int] | None = None) -> Decision:
    return Decision(
        f"ns/{name}",
        "q",
        Verdict.ADMIT,
        Reason.ADMITTED,
        "2 members",
        placement or {"n1": 2},
        kind="Job",
    )


def pending(name: str = "train") -> Decision:
    return Decision(
        f"ns/{name}", "q", Verdict.PENDING, Reason.NO_NODE_FIT, "0 of 2 fit", kind="Job"
    )


def only(actions: list[act.Action], kind: type[Any]) -> list[act.Action]:
    return [a for a in actions if isinstance(a, kind)]


def step(call: Call) -> str:
    """A write, by what it does in a gang's lifecycle."""
    if call.method == "event":
        return "event"
    return f"{call.method} {call.resource.kind}" + (
        f"/{call.subresource}" if call.subresource else ""
    )


def steps(calls: list[Call]) -> list[str]:
    """The writes' steps in order, runs of one step counted once."""
    out: list[str] = []
    for call in calls:
        if not out or out[-1] != step(call):
            out.append(step(call))
    return out


def suspended(c: Cluster, name: str = "train") -> bool:
    return bool(c.held("Job", name)["spec"]["suspend"])


# -- the fake itself ------------------------------------------------------------------


def test_the_fake_has_every_public_method_of_the_gateway_with_its_signature() -> None:
    public = [n for n, f in inspect.getmembers(gw.Gateway, inspect.isfunction) if n[0] != "_"]
    assert public == ["create", "delete", "event", "get", "list", "list_at", "patch"]
    for name in public:
        real, fake = getattr(gw.Gateway, name), getattr(FakeGateway, name)
        assert fake is not real, name
        signatures = (inspect.signature(f, eval_str=True) for f in (fake, real))
        assert next(signatures) == next(signatures), name


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [  # RFC 7386, Appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_the_fake_applies_json_merge_patches_as_rfc_7386_does(
    target: Obj, patch: Obj, result: Obj
) -> None:
    assert merge_patch(target, patch) == result


# -- order of writes -------------------------------------------------------------------


def test_an_admission_writes_the_pod_group_status_before_it_releases_the_job() -> None:
    c = cluster(job(), group(phase="Pending"))
    (admission,) = only(c.plan(admit()), act.Admit)
    assert c.apply([admission]) == 0
    # The status says Admitted, then it is said (events), then the Job is released.
    assert steps(c.fake.writes()) == ["patch PodGroup/status", "event", "patch Job"]
    status = c.fake.writes()[0].body
    assert status is not None
    assert status["status"]["phase"] == "Admitted"
    assert status["status"]["placement"] == {"n1": 2}


def test_an_admission_whose_release_conflicts_is_still_told_and_resumed_next_cycle() -> None:
    """The Job controller updates a Job's status all the time: a release made on the
    version the cycle read may conflict.  The admission has happened (the PodGroup says
    so): its events are posted, and the next cycle resumes the release."""
    c = cluster(job(), group(phase="Pending"))
    c.fake.fail_next(
        gw.Conflict(409, "the Job changed"),
        when=lambda call: call.method == "patch" and call.resource.kind == "Job",
    )
    (admission,) = only(c.plan(admit()), act.Admit)
    assert c.apply([admission]) == 1
    assert c.held("PodGroup", "train")["status"]["phase"] == "Admitted"
    assert c.held("Job", "train")["spec"]["suspend"] is True
    assert "Admitted" in {e["reason"] for e in c.fake.events}
    (resume,) = only(c.plan(), act.ResumeAdmission)
    assert c.apply([resume]) == 0
    assert c.held("Job", "train")["spec"]["suspend"] is False


def test_an_admission_unsuspends_the_job_with_the_admission_gate_on_its_pods() -> None:
    c = cluster(job(), group(phase="Pending"))
    assert c.cycle(admit()) == 0
    spec = c.held("Job", "train")["spec"]
    assert spec["suspend"] is False
    assert {"name": ADMISSION_GATE} in spec["template"]["spec"]["schedulingGates"]


def test_an_eviction_writes_the_pod_group_status_before_suspending_and_deleting() -> None:
    c = cluster(
        job(suspend=False),
        group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(61)),
        pod("a", node="n1"),
        pod("b", node="n1", phase="Pending"),
    )
    (eviction,) = only(c.plan(), act.Evict)
    assert c.apply([eviction]) == 0
    assert steps(c.fake.writes()) == ["patch PodGroup/status", "event", "patch Job", "delete Pod"]
    assert [call.name for call in c.fake.writes() if call.method == "delete"] == ["a", "b"]
    assert c.held("PodGroup", "train")["status"]["phase"] == "Evicted"


# -- assume on write --------------------------------------------------------------------


def test_written_objects_are_held_as_the_api_returned_them_without_a_watch_event() -> None:
    c = cluster(job(), group(phase="Pending"))
    assert c.cycle(admit()) == 0
    for kind in ("PodGroup", "Job"):
        held = c.state.get(kind, "ns", "train")
        assert held == c.held(kind, "train")
        assert held is not None
        assert held["metadata"]["resourceVersion"] not in ("10", "11")


def flagged_gang(admitted_seconds_ago: float, running: int) -> Cluster:
    """An admitted gang flagged GPUUnhealthy whose GPUs are healthy again."""
    flagged = group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(admitted_seconds_ago))
    flagged["status"]["conditions"] = [
        {"type": "GPUUnhealthy", "status": "True", "reason": "GPUUnhealthy", "message": "xid"}
    ]
    pods = [pod(f"m{i}", node="n1") for i in range(running)]
    return cluster(job(suspend=False), flagged, *pods)


@pytest.mark.parametrize(
    ("admitted_seconds_ago", "running", "then", "phase"),
    [(5, 2, act.MarkRunning, "Running"), (61, 1, act.Evict, "Evicted")],
)
def test_a_second_write_to_a_pod_group_in_one_cycle_builds_on_the_first(
    admitted_seconds_ago: float, running: int, then: type[Any], phase: str
) -> None:
    c = flagged_gang(admitted_seconds_ago, running)
    actions = c.plan()
    assert [type(a) for a in actions if not isinstance(a, act.QueueStatus)] == [
        act.SetCondition,
        then,
    ]
    assert c.apply(actions) == 0  # the second write is conditional on the first's version
    status = c.held("PodGroup", "train")["status"]
    assert status["phase"] == phase
    gpu = [x["status"] for x in status["conditions"] if x["type"] == "GPUUnhealthy"]
    assert gpu == ["False"]  # what the first write set, not undone by the second


def test_a_pod_group_created_in_a_cycle_is_admitted_in_that_cycle() -> None:
    c = cluster(job())
    actions = c.plan(admit())
    assert [type(a) for a in actions][:2] == [act.CreatePodGroup, act.Admit]
    assert c.apply(actions) == 0
    assert c.held("PodGroup", "train")["status"]["phase"] == "Admitted"
    assert not suspended(c)


def test_a_pod_group_created_in_a_cycle_is_marked_pending_in_that_cycle() -> None:
    c = cluster(job())
    actions = c.plan(pending())
    assert [type(a) for a in actions][:2] == [act.CreatePodGroup, act.MarkPending]
    assert c.apply(actions) == 0
    status = c.held("PodGroup", "train")["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "NoNodeFit")


# -- failed writes ---------------------------------------------------------------------


def two_gangs() -> Cluster:
    return cluster(
        job("train"), group("train", phase="Pending"), job("other"), group("other", phase="Pending")
    )


def on(kind: str, name: str, subresource: str = "") -> Any:
    def matches(call: Call) -> bool:
        return (call.resource.kind, call.name, call.subresource) == (kind, name, subresource)

    return matches


def test_a_conflict_fails_only_its_own_action() -> None:
    c = two_gangs()
    c.fake.fail_next(gw.Conflict(409, "modified"), on("PodGroup", "train", "status"))
    assert c.cycle(admit("train"), admit("other")) == 1
    assert c.held("PodGroup", "other")["status"]["phase"] == "Admitted"
    assert not suspended(c, "other")


def test_an_admission_whose_status_write_conflicts_releases_nothing() -> None:
    c = two_gangs()
    c.fake.fail_next(gw.Conflict(409, "modified"), on("PodGroup", "train", "status"))
    c.cycle(admit("train"), admit("other"))
    assert suspended(c, "train")
    assert not [
        call for call in c.fake.writes() if (call.resource.kind, call.name) == ("Job", "train")
    ]


def test_nothing_is_assumed_for_a_write_that_conflicted() -> None:
    c = two_gangs()
    before = c.state.get("PodGroup", "ns", "train")
    c.fake.fail_next(gw.Conflict(409, "modified"), on("PodGroup", "train", "status"))
    c.cycle(admit("train"), admit("other"))
    assert c.state.get("PodGroup", "ns", "train") == before


def test_the_next_cycle_redoes_a_write_that_conflicted() -> None:
    c = two_gangs()
    c.fake.fail_next(gw.Conflict(409, "modified"), on("PodGroup", "train", "status"))
    c.cycle(admit("train"), admit("other"))
    assert c.cycle(admit("train")) == 0
    assert c.held("PodGroup", "train")["status"]["phase"] == "Admitted"
    assert not suspended(c, "train")


def test_a_change_made_by_someone_else_in_between_makes_the_write_conflict() -> None:
    c = cluster(job(), group(phase="Pending"))
    # Someone else's write: a new version, which the state has not seen.
    c.fake.patch(gw.POD_GROUP, "ns", "train", {"metadata": {"labels": {"team": "b"}}})
    c.fake.calls.clear()
    assert c.cycle(admit()) == 1
    assert c.fake.writes()[0].failed
    assert suspended(c)
    c.watch("PodGroup", "train")
    assert c.cycle(admit()) == 0
    assert not suspended(c)


def test_a_transport_error_mid_admission_fails_that_action_and_the_cycle_goes_on() -> None:
    c = two_gangs()
    c.fake.fail_next(gw.TransportError("connection reset"), on("Job", "train"))
    assert c.cycle(admit("train"), admit("other")) == 1
    assert suspended(c, "train")
    assert not suspended(c, "other")
    assert c.held("PodGroup", "other")["status"]["phase"] == "Admitted"


def test_an_admission_cut_short_by_a_transport_error_is_resumed_next_cycle() -> None:
    c = two_gangs()
    c.fake.fail_next(gw.TransportError("connection reset"), on("Job", "train"))
    c.cycle(admit("train"), admit("other"))
    actions = c.plan()
    assert [type(a) for a in actions if not isinstance(a, act.QueueStatus)] == [act.ResumeAdmission]
    assert c.apply(actions) == 0
    assert not suspended(c, "train")


# -- Queue and TeamQuota status ------------------------------------------------------------

QUOTA: Obj = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "TeamQuota",
    "metadata": {"name": "team", "resourceVersion": "3"},
    "spec": {"resources": {"nvidia.com/gpu": {"nominal": 4}}},
    "status": {"used": {"cpu": "1", "nvidia.com/gpu": "2"}},
}


COHORT: Obj = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "Cohort",
    "metadata": {"name": "org", "resourceVersion": "7"},
    "spec": {"resources": {"nvidia.com/gpu": {"nominal": 2}}},
    "status": {"subtreeQuota": {"cpu": "4", "nvidia.com/gpu": "6"}, "used": {"cpu": "1"}},
}
FIGURES = {"org": CohortFigures({"nvidia.com/gpu": 6000}, {"nvidia.com/gpu": 5000}, 125)}


def status_writes(c: Cluster, kind: str) -> list[Call]:
    return [call for call in c.fake.writes() if call.resource.kind == kind]


def test_a_queue_status_write_is_conditional_on_the_queues_version() -> None:
    c = cluster(job(suspend=False), group(phase="Running", placement={"n1": 2}))
    assert c.cycle() == 0
    (write,) = status_writes(c, "Queue")
    assert (write.subresource, write.resource_version) == ("status", "5")
    assert c.held("Queue", "q")["status"]["runningGangs"] == 1


def test_a_team_quota_status_write_is_conditional_on_the_quotas_version() -> None:
    c = cluster(QUOTA)
    assert c.cycle(usage={"team": {"nvidia.com/gpu": 6000}}) == 0
    (write,) = status_writes(c, "TeamQuota")
    assert (write.namespace, write.subresource, write.resource_version) == ("", "status", "3")


def test_a_cohort_status_write_is_conditional_and_drops_what_left() -> None:
    c = cluster(COHORT)
    assert c.cycle(cohorts=FIGURES) == 0
    (write,) = status_writes(c, "Cohort")
    assert (write.namespace, write.subresource, write.resource_version) == ("", "status", "7")
    status = c.held("Cohort", "org", namespace="")["status"]
    assert status == {
        "subtreeQuota": {"nvidia.com/gpu": "6"},
        "used": {"nvidia.com/gpu": "5"},
        "fairSharing": {"weightedShare": 125},
    }


def test_a_cohort_whose_figures_did_not_change_is_not_written() -> None:
    c = cluster(COHORT)
    c.cycle(cohorts=FIGURES)
    c.watch("Cohort", "org", namespace="")
    writes = len(c.fake.writes())
    assert c.cycle(cohorts=FIGURES) == 0
    assert len(c.fake.writes()) == writes


def test_a_cohort_whose_tree_turns_fair_sharing_off_loses_its_share() -> None:
    c = cluster(COHORT)
    c.cycle(cohorts=FIGURES)
    c.watch("Cohort", "org", namespace="")
    off = {"org": CohortFigures({"nvidia.com/gpu": 6000}, {"nvidia.com/gpu": 5000}, None)}
    c.cycle(cohorts=off)
    assert "fairSharing" not in c.held("Cohort", "org", namespace="")["status"]


def test_a_resource_no_longer_counted_leaves_the_team_quota_status() -> None:
    c = cluster(QUOTA)
    c.cycle(usage={"team": {"nvidia.com/gpu": 6000}})
    status = c.held("TeamQuota", "team", namespace="")["status"]
    assert status["used"] == {"nvidia.com/gpu": "6"}
    assert status["borrowed"] == {"nvidia.com/gpu": "2"}


# -- every action, and what it asks of RBAC ---------------------------------------------------


def every_action() -> Cluster:
    """One cluster in which the planner asks for every kind of action at once."""
    flagged = group("ready", phase="Admitted", placement={"n1": 2}, admittedAt=iso(5))
    flagged["status"]["conditions"] = [
        {"type": "GPUUnhealthy", "status": "True", "reason": "GPUUnhealthy", "message": "xid"}
    ]
    done = job("done", suspend=False)
    done["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    orphan = group("gone", phase="Finished")
    orphan["metadata"]["labels"] = {WORKLOAD_KIND_LABEL: "Job"}
    return cluster(
        QUOTA,
        COHORT,  # CohortStatus
        job("fresh"),  # CreatePodGroup, MarkPending
        job("admit"),
        group("admit", phase="Pending"),  # Admit
        job("resume"),
        group(
            "resume", phase="Admitted", placement={"n1": 2}, admittedAt=iso(5)
        ),  # ResumeAdmission
        job("bind", suspend=False),
        group("bind", phase="Admitted", placement={"n1": 2}, admittedAt=iso(5)),
        pod("bind-0", gated=True, phase="Pending", owner="bind"),  # BindMember
        pod("bind-1", gated=True, phase="Pending", owner="bind"),
        job("ready", suspend=False),
        flagged,  # SetCondition, MarkRunning
        pod("ready-0", node="n1", owner="ready"),
        pod("ready-1", node="n1", owner="ready"),
        job("lost", suspend=False),
        group("lost", phase="Running", placement={"n1": 2}),  # MarkMembersLost
        pod("lost-0", node="n1", owner="lost"),
        job("late", suspend=False),
        group("late", phase="Admitted", placement={"n1": 2}, admittedAt=iso(61)),  # Evict
        pod("late-0", node="n1", owner="late"),
        job("evicted"),
        group("evicted", phase="Evicted"),  # FinishEviction
        pod("evicted-0", node="n1", owner="evicted"),
        job("rogue", suspend=False),
        group("rogue", phase="Pending"),  # HoldUnadmitted
        pod("rogue-0", node="n1", owner="rogue"),
        done,
        group("done", phase="Running", placement={"n1": 2}),  # MarkFinished
        orphan,  # DeleteOrphan
        job("preemptor"),
        group("preemptor", phase="Pending"),  # Nominate
        job("victim", suspend=False),
        group("victim", phase="Running", placement={"n2": 1}),  # Evict (Preempted)
        pod("victim-0", node="n2", owner="victim"),
        job("replaced", suspend=False),
        group("replaced", phase="Running", placement={"n9": 1, "n1": 1}),  # ReplaceNodes
        pod("replaced-0", node="n1", owner="replaced"),
    )


def preempt(name: str, victim: str) -> Decision:
    return Decision(
        f"ns/{name}",
        "q",
        Verdict.PREEMPT,
        Reason.RECLAIM_WITHIN_COHORT,
        "preempting 1 gang",
        {"n2": 2},
        kind="Job",
        victims=((f"Job/ns/{victim}", Reason.RECLAIM_WITHIN_COHORT),),
        nominated={"main": {"n2": 2}},
    )


EVERY_DECISION = (admit("admit"), pending("fresh"), preempt("preemptor", "victim"))
EVERY_REPLACEMENT = (Replacement("Job/ns/replaced", "main", "n9", "Deleted", "n1", 1, ""),)
USAGE = {"team": {"nvidia.com/gpu": 6000}}  # QueueStatus, TeamQuotaStatus


def test_the_every_action_cluster_plans_every_kind_of_action() -> None:
    planned = {
        type(a)
        for a in every_action().plan(
            *EVERY_DECISION, usage=USAGE, cohorts=FIGURES, replacements=EVERY_REPLACEMENT
        )
    }
    # Vanished is the loop's: it needs the cycle before (tests/unit/test_vanished.py); so
    # is WarnLeftOut, for objects the translation left out (tests/unit/test_bad_objects.py).
    assert planned == set(get_args(act.Action)) - {act.Vanished, act.WarnLeftOut}


def test_every_request_the_applier_sends_is_granted_by_the_rbac_rules() -> None:
    c = every_action()
    assert (
        c.cycle(*EVERY_DECISION, usage=USAGE, cohorts=FIGURES, replacements=EVERY_REPLACEMENT) == 0
    )
    allowed = {
        (rule.group, resource, verb)
        for rule in kinds.rbac_rules()
        for resource in rule.resources
        for verb in rule.verbs
    }
    sent = {
        (call.resource.group, call.rbac_resource, call.verb) for call in c.fake.calls
    } | owner_finalizers(c.fake.calls)
    assert {verb for _, _, verb in sent} == {"create", "patch", "delete", "update"}
    assert sent - allowed == set()


def owner_finalizers(calls: list[Call]) -> set[tuple[str, str, str]]:
    """A created object that blocks its owner's deletion needs update on the owner's finalizers."""
    by_kind = {(r.api_version, r.kind): r for r in kinds.WATCHED}
    needed: set[tuple[str, str, str]] = set()
    for call in calls:
        for owner in ((call.body or {}).get("metadata") or {}).get("ownerReferences", []):
            if call.method == "create" and owner.get("blockOwnerDeletion"):
                resource = by_kind[(owner["apiVersion"], owner["kind"])]
                needed.add((resource.group, f"{resource.plural}/finalizers", "update"))
    return needed


FAIR_QUOTA: Obj = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "TeamQuota",
    "metadata": {"name": "team", "resourceVersion": "3"},
    "spec": {
        "cohort": "pool",
        "resources": {"nvidia.com/gpu": {"nominal": 4}},
        "fairSharing": {"weight": "1500m"},
    },
}
FAIR_COHORT: Obj = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "Cohort",
    "metadata": {"name": "pool", "resourceVersion": "4"},
    "spec": {"fairSharing": {"enabled": True}},
}


def test_a_cohort_and_a_weight_are_read_once_into_the_snapshot() -> None:
    c = cluster(FAIR_QUOTA, FAIR_COHORT)
    snapshot = seen(c.state, NOW).snapshot
    assert snapshot.cohorts == (Cohort("pool", fair_sharing=True),)
    (quota,) = snapshot.quotas
    assert quota.fair_weight == 1500


def test_the_weighted_share_is_written_and_leaves_when_fair_sharing_ends() -> None:
    c = cluster(FAIR_QUOTA, FAIR_COHORT)
    usage = {"team": {"nvidia.com/gpu": 6000}}
    c.apply(Planner(300).plan(seen(c.state, NOW), CycleResult((), usage, {"team": 333}), now=NOW))
    assert c.held("TeamQuota", "team", namespace="")["status"]["fairSharing"] == {
        "weightedShare": 333
    }
    c.watch("TeamQuota", "team", namespace="")
    # Unchanged: nothing written.
    assert (
        Planner(300).plan(seen(c.state, NOW), CycleResult((), usage, {"team": 333}), now=NOW) == []
    )
    c.apply(Planner(300).plan(seen(c.state, NOW), CycleResult((), usage, {}), now=NOW))
    assert "fairSharing" not in c.held("TeamQuota", "team", namespace="")["status"]


def patch_together(c: Cluster, kind: str, writes: int) -> None:
    """Make the fake hold each patch of ``kind`` until ``writes`` of them are under way."""
    barrier = threading.Barrier(writes, timeout=10)
    patch = c.fake.patch

    def together(resource: Any, *args: Any, **kwargs: Any) -> Any:
        if resource.kind == kind:
            barrier.wait()
        return patch(resource, *args, **kwargs)

    c.fake.patch = together  # type: ignore[method-assign]


def test_members_released_in_one_cycle_are_patched_together() -> None:
    members = 4
    c = cluster(
        QUOTA,
        job("bind", suspend=False),
        group("bind", phase="Admitted", placement={"n1": members}, admittedAt=iso(5)),
        *(pod(f"bind-{i}", gated=True, phase="Pending", owner="bind") for i in range(members)),
    )
    actions = c.plan()
    assert len(only(actions, act.BindMember)) == members
    # Each member's patch waits until every member's patch is under way: applied one
    # at a time, the first would wait alone and the barrier would break.
    patch_together(c, "Pod", members)
    assert c.apply(actions) == 0
    for i in range(members):
        gates = c.held("Pod", f"bind-{i}")["spec"].get("schedulingGates") or []
        assert all(g["name"] != ADMISSION_GATE for g in gates)
        assert c.held("Pod", f"bind-{i}")["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "n1"


def test_a_member_whose_release_fails_is_counted_and_the_others_still_go() -> None:
    c = cluster(
        QUOTA,
        job("bind", suspend=False),
        group("bind", phase="Admitted", placement={"n1": 3}, admittedAt=iso(5)),
        *(pod(f"bind-{i}", gated=True, phase="Pending", owner="bind") for i in range(3)),
    )
    actions = c.plan()
    patch = c.fake.patch

    def failing(resource: Any, namespace: str, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "bind-1":
            raise gw.TransportError("no answer")
        return patch(resource, namespace, name, *args, **kwargs)

    c.fake.patch = failing  # type: ignore[method-assign]
    assert c.apply(actions) == 1
    released = [
        i
        for i in range(3)
        if not any(
            g["name"] == ADMISSION_GATE
            for g in c.held("Pod", f"bind-{i}")["spec"].get("schedulingGates") or []
        )
    ]
    assert released == [0, 2]


def test_gangs_admitted_in_one_cycle_are_written_at_once_each_in_its_own_order() -> None:
    names = ("one", "two", "three")
    c = cluster(*(o for n in names for o in (job(n), group(n, phase="Pending"))))
    admissions = [a for n in names for a in only(c.plan(admit(n)), act.Admit)]
    assert len(admissions) == len(names)
    # Each gang's PodGroup status write waits until every gang's is under way: one
    # gang at a time, the first would wait alone and the barrier would break.
    patch_together(c, "PodGroup", len(names))
    assert c.apply(admissions) == 0
    for n in names:
        mine = [call for call in c.fake.writes() if call.name == n]
        assert steps(mine) == ["patch PodGroup/status", "event", "patch Job"], n
        assert c.held("Job", n)["spec"]["suspend"] is False


def test_lanes_that_let_members_run_are_written_before_pending_reasons() -> None:
    from queue_controller.controller.lanes import lanes

    c = cluster(
        job("waits"),
        group("waits", phase="Pending"),
        job("bind", suspend=False),
        group("bind", phase="Admitted", placement={"n1": 2}, admittedAt=iso(5)),
        *(pod(f"bind-{i}", gated=True, phase="Pending", owner="bind") for i in range(2)),
    )
    actions = c.plan(pending("waits"))
    pending_first = sorted(actions, key=lambda a: not isinstance(a, act.MarkPending))
    assert isinstance(pending_first[0], act.MarkPending)
    ordered = lanes(pending_first)
    kinds = [type(lane[0]) for lane in ordered]
    assert kinds[:2] == [act.BindMember, act.BindMember]
    assert act.MarkPending in kinds[2:]
