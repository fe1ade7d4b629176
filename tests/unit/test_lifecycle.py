"""The gang lifecycle planner, on plain objects: every phase and transition."""

from __future__ import annotations

from typing import Any

import pytest

from queue_controller.controller import actions as act
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.state import ClusterState
from queue_controller.core import CycleResult, Decision, Reason, Verdict
from queue_controller.kube.resources import ADMISSION_GATE as GATE
from queue_controller.kube.views import Delete
from tests.views import seen

NOW = 1_800_000_000.0
T0 = "2027-01-15T08:00:00Z"  # NOW in RFC 3339


def iso(seconds_before_now: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(NOW - seconds_before_now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(
    name: str = "train", *, suspend: bool = True, parallelism: int = 2, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "10",
            "creationTimestamp": iso(600),
            "labels": {"queue-controller.io/queue": "q"},
            **meta,
        },
        "spec": {
            "parallelism": parallelism,
            "suspend": suspend,
            "template": {
                "spec": {
                    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
                }
            },
        },
        "status": {},
    }


def group(name: str = "train", *, phase: str, min_member: int = 2, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": "11",
            "ownerReferences": [{"kind": "Job", "name": name, "uid": f"uid-{name}"}],
        },
        "spec": {"queue": "q", "minMember": min_member},
        "status": {"phase": phase, **status},
    }


def pod(
    name: str,
    *,
    phase: str = "Running",
    node: str | None = None,
    gated: bool = False,
    selector: str | None = None,
    owner: str = "train",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main"}]}
    if node:
        spec["nodeName"] = node
    if selector:
        spec["nodeSelector"] = {"kubernetes.io/hostname": selector}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}, {"name": "other.io/gate"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": "12",
            "ownerReferences": [{"kind": "Job", "name": owner, "controller": True}],
        },
        "spec": spec,
        "status": {"phase": phase},
    }


QUEUE = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "Queue",
    "metadata": {"name": "q", "namespace": "ns", "resourceVersion": "5"},
    "spec": {
        "teamQuota": "team",
        "podsReadyTimeoutSeconds": 60,
        "requeue": {"backoffBaseSeconds": 10, "backoffMaxSeconds": 100, "backoffLimit": 2},
    },
    "status": {"pendingGangs": 0, "admittedGangs": 0, "runningGangs": 0},
}


def plan(*objects: dict[str, Any], decisions: tuple[Decision, ...] = ()) -> list[act.Action]:
    state = ClusterState()
    for obj in (QUEUE, *objects):
        state.upsert(obj)
    actions = Planner(300).plan(seen(state, NOW), CycleResult(decisions, {}), now=NOW)
    return [a for a in actions if not isinstance(a, act.QueueStatus | act.TeamQuotaStatus)]


def pending(reason: Reason = Reason.NO_NODE_FIT, message: str = "0 of 2 fit") -> Decision:
    return Decision("ns/train", "q", Verdict.PENDING, reason, message, kind="Job")


def test_a_new_queued_job_gets_an_owned_pod_group() -> None:
    (create,) = [a for a in plan(job(parallelism=3)) if isinstance(a, act.CreatePodGroup)]
    body = create.body
    assert body["spec"] == {"queue": "q", "minMember": 3}
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-train"
    assert body["metadata"]["ownerReferences"][0]["controller"] is True


def test_min_member_and_timeout_annotations_shape_the_pod_group() -> None:
    annotated = job(
        parallelism=4,
        annotations={
            "queue-controller.io/min-member": "2",
            "queue-controller.io/pods-ready-timeout-seconds": "45",
        },
    )
    (create,) = [a for a in plan(annotated) if isinstance(a, act.CreatePodGroup)]
    assert create.body["spec"] == {"queue": "q", "minMember": 2, "timeoutSeconds": 45}


def test_admit_decision_becomes_an_admission() -> None:
    decision = Decision(
        "ns/train", "q", Verdict.ADMIT, Reason.ADMITTED, "2 members", {"n1": 2}, kind="Job"
    )
    (admit,) = plan(job(), group(phase="Pending"), decisions=(decision,))
    assert isinstance(admit, act.Admit)
    assert admit.placement == {"n1": 2}
    assert admit.subject.queue == "ns/q"


def test_unchanged_pending_reason_writes_nothing() -> None:
    quiet = group(phase="Pending", reason="NoNodeFit", message="0 of 2 fit")
    assert plan(job(), quiet, decisions=(pending(),)) == []
    (mark,) = plan(job(), quiet, decisions=(pending(Reason.QUOTA_EXCEEDED, "quota"),))
    assert isinstance(mark, act.MarkPending)
    assert mark.reason == "QuotaExceeded"


def test_a_queued_job_running_without_admission_is_suspended() -> None:
    (suspend,) = plan(
        job(suspend=False),
        group(phase="Pending"),
        pod("a", node="n1"),
        pod("b", phase="Succeeded"),
    )
    assert isinstance(suspend, act.HoldUnadmitted)
    deleted = [w.ref.name for w in suspend.writes if isinstance(w, Delete)]
    assert deleted == ["a"]  # only live pods


def test_a_pod_a_lagging_job_controller_made_after_the_suspend_is_deleted() -> None:
    # Suspended (evicted and requeued), yet one member runs: made from the Job as the
    # Job controller last saw it, unsuspended.  Nothing admitted it.
    (stray,) = plan(
        job(suspend=True),
        group(phase="Pending"),
        pod("late", node="n1"),
        pod("going", node="n1", phase="Failed"),
    )
    assert isinstance(stray, act.HoldUnadmitted)
    assert [(type(w), w.ref.name) for w in stray.writes] == [(Delete, "late")]


def test_a_held_job_with_no_member_running_is_left_alone() -> None:
    assert plan(job(suspend=True), group(phase="Pending"), pod("gated", gated=True)) == []


def test_admission_interrupted_before_unsuspend_is_resumed() -> None:
    (resume,) = plan(job(), group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(5)))
    assert isinstance(resume, act.ResumeAdmission)


def test_gated_members_get_nodes_with_free_slots() -> None:
    actions = plan(
        job(suspend=False, parallelism=4),
        group(phase="Admitted", placement={"n1": 2, "n2": 1}, admittedAt=iso(5), min_member=3),
        pod("p0", selector="n1", phase="Pending"),  # already bound to n1 (ungated)
        pod("p1", gated=True, phase="Pending"),
        pod("p2", gated=True, phase="Pending"),
        pod("p3", gated=True, phase="Pending"),  # beyond the plan: stays gated
    )
    bindings = {a.pod.ref.name: a.node for a in actions if isinstance(a, act.BindMember)}
    assert bindings == {"p1": "n1", "p2": "n2"}


def test_enough_running_members_mark_the_gang_running() -> None:
    actions = plan(
        job(suspend=False),
        group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(5)),
        pod("a", node="n1"),
        pod("b", node="n1", phase="Succeeded"),
    )
    assert [type(a) for a in actions] == [act.MarkRunning]


def test_partial_gang_past_its_timeout_is_evicted_with_backoff() -> None:
    actions = plan(
        job(suspend=False),
        group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(61), requeueCount=1),
        pod("a", node="n1"),
        pod("b", node="n1", phase="Pending"),
    )
    (evict,) = [a for a in actions if isinstance(a, act.Evict)]
    assert evict.reason == "PodsReadyTimeout"
    assert "1 of 2 members running 60s after admission" in evict.message
    assert evict.requeue.count == 2
    assert evict.requeue.at == NOW + 20  # base 10, second requeue doubles
    assert not evict.requeue.deactivated
    assert evict.partial_since == NOW - 61


def test_partial_gang_within_its_timeout_waits() -> None:
    actions = plan(
        job(suspend=False),
        group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(59)),
        pod("a", node="n1"),
        pod("b", node="n1", phase="Pending"),
    )
    assert actions == []


def test_pod_group_timeout_beats_the_queue_timeout() -> None:
    short = group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(11))
    short["spec"]["timeoutSeconds"] = 10
    actions = plan(job(suspend=False), short, pod("a", node="n1"))
    assert any(isinstance(a, act.Evict) for a in actions)


def test_eviction_past_backoff_limit_deactivates() -> None:
    actions = plan(
        job(suspend=False),
        group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(61), requeueCount=2),
    )
    (evict,) = [a for a in actions if isinstance(a, act.Evict)]
    assert evict.requeue.deactivated


def test_running_gang_losing_members_is_marked_then_evicted_after_the_timeout() -> None:
    running = group(phase="Running", placement={"n1": 2}, admittedAt=iso(500))
    (lost,) = plan(job(suspend=False), running, pod("a", node="n1"))
    assert isinstance(lost, act.MarkMembersLost)
    running["status"]["conditions"] = [
        {
            "type": "PodsReady",
            "status": "False",
            "reason": "MembersLost",
            "lastTransitionTime": iso(30),
        }
    ]
    assert plan(job(suspend=False), running, pod("a", node="n1")) == []
    running["status"]["conditions"][0]["lastTransitionTime"] = iso(61)
    (evict,) = plan(job(suspend=False), running, pod("a", node="n1"))
    assert isinstance(evict, act.Evict)
    assert evict.reason == "MembersLost"


def test_a_gang_that_recovers_its_members_is_running_again() -> None:
    running = group(phase="Running", placement={"n1": 2})
    running["status"]["conditions"] = [
        {
            "type": "PodsReady",
            "status": "False",
            "reason": "MembersLost",
            "lastTransitionTime": iso(30),
        }
    ]
    actions = plan(job(suspend=False), running, pod("a", node="n1"), pod("b", node="n1"))
    assert [type(a) for a in actions] == [act.MarkRunning]


def test_someone_suspending_an_admitted_job_evicts_it() -> None:
    actions = plan(
        job(suspend=True), group(phase="Running", placement={"n1": 2}), pod("a", node="n1")
    )
    (evict,) = actions
    assert isinstance(evict, act.Evict)
    assert evict.reason == "JobSuspended"


@pytest.mark.parametrize(
    ("suspend", "pods", "requeued"),
    [(False, ("a",), False), (True, ("a",), False), (True, (), True)],
)
def test_eviction_finishes_before_requeueing(
    suspend: bool, pods: tuple[str, ...], requeued: bool
) -> None:
    (finish,) = plan(
        job(suspend=suspend), group(phase="Evicted"), *(pod(p, node="n1") for p in pods)
    )
    assert isinstance(finish, act.FinishEviction)
    assert finish.requeued is requeued


def test_deactivated_gang_rests_once_it_holds_nothing() -> None:
    assert plan(job(suspend=True), group(phase="Failed")) == []
    (finish,) = plan(job(suspend=False), group(phase="Failed"))
    assert isinstance(finish, act.FinishEviction)
    assert finish.requeued is False


def test_finished_job_finishes_its_pod_group_once() -> None:
    done = job(suspend=False)
    done["status"]["conditions"] = [{"type": "Complete", "status": "True"}]
    (finish,) = plan(done, group(phase="Running", placement={"n1": 2}))
    assert isinstance(finish, act.MarkFinished)
    assert finish.succeeded
    assert plan(done, group(phase="Finished")) == []


def test_unlabelled_jobs_are_not_ours() -> None:
    free = job()
    free["metadata"]["labels"] = {}
    assert plan(free) == []


def test_a_pod_group_of_another_job_with_that_name_is_not_used() -> None:
    stale = group(phase="Running")
    stale["metadata"]["ownerReferences"][0]["uid"] = "uid-of-a-deleted-job"
    assert any(isinstance(a, act.CreatePodGroup) for a in plan(job(), stale))


def test_queue_and_team_quota_status_is_written_only_when_it_changes() -> None:
    state = ClusterState()
    quota = {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": {"name": "team", "resourceVersion": "1"},
        "spec": {"resources": {"nvidia.com/gpu": {"nominal": 4}}},
    }
    for obj in (QUEUE, quota, job(suspend=False), group(phase="Running", placement={"n1": 2})):
        state.upsert(obj)
    result = CycleResult((), {"team": {"nvidia.com/gpu": 6000}})
    statuses = [
        a
        for a in Planner(300).plan(seen(state, NOW), result, now=NOW)
        if isinstance(a, act.QueueStatus | act.TeamQuotaStatus)
    ]
    queue_status = next(a for a in statuses if isinstance(a, act.QueueStatus))
    assert queue_status.counts == {"pendingGangs": 0, "admittedGangs": 0, "runningGangs": 1}
    quota_status = next(a for a in statuses if isinstance(a, act.TeamQuotaStatus))
    assert quota_status.used == {"nvidia.com/gpu": "6"}
    assert quota_status.borrowed == {"nvidia.com/gpu": "2"}
    assert quota_status.counts == {"pendingGangs": 0, "admittedGangs": 1}
    state.upsert(
        {
            **QUEUE,
            "metadata": {**QUEUE["metadata"], "resourceVersion": "6"},
            "status": dict(queue_status.counts),
        }
    )
    state.upsert(
        {
            **quota,
            "metadata": {**quota["metadata"], "resourceVersion": "2"},
            "status": {
                "used": quota_status.used,
                "borrowed": quota_status.borrowed,
                **quota_status.counts,
            },
        }
    )
    again = [
        a
        for a in Planner(300).plan(seen(state, NOW), result, now=NOW)
        if isinstance(a, act.QueueStatus | act.TeamQuotaStatus)
    ]
    assert again == []


def test_a_preemption_nominates_its_room_and_evicts_its_victims_without_backoff() -> None:
    decision = Decision(
        "ns/train",
        "q",
        Verdict.PREEMPT,
        Reason.RECLAIM_WITHIN_COHORT,
        "preempting 1 gang",
        {"n1": 2},
        kind="Job",
        victims=(("Job/ns/victim", Reason.RECLAIM_WITHIN_COHORT),),
        nominated={"main": {"n1": 2}},
    )
    victim = group("victim", phase="Running", placement={"n1": 2}, requeueCount=2)
    actions = plan(
        job(),
        group(phase="Pending"),
        job("victim", suspend=False),
        victim,
        pod("victim-0", node="n1", owner="victim"),
        pod("victim-1", node="n1", owner="victim"),
        decisions=(decision,),
    )
    (nominate,) = [a for a in actions if isinstance(a, act.Nominate)]
    assert nominate.nominated == {"main": {"n1": 2}}
    assert nominate.victims == ("ns/victim",)
    (evict,) = [a for a in actions if isinstance(a, act.Evict)]
    assert evict.subject.name == "victim"
    assert evict.reason == "Preempted"
    assert evict.preemption == "ReclaimWithinCohort"
    assert "preempted by Job ns/train" in evict.message
    assert len(evict.pods) == 2
    # No fault of its own: back in its queue at once, and its requeue count stays.
    assert (evict.requeue.count, evict.requeue.at, evict.requeue.deactivated) == (2, NOW, False)


def test_the_room_a_preemptor_holds_is_read_back_from_its_pod_group() -> None:
    # What survives a restart: the core is handed the held room again.
    state = ClusterState()
    holding = group(phase="Pending", nominatedPlacement={"main": {"n1": 2}}, reason="Preempting")
    for obj in (QUEUE, job(), holding):
        state.upsert(obj)
    (gang,) = seen(state, NOW).gangs
    assert gang.workload.nominated == {"main": {"n1": 2}}
    admitted = group(phase="Admitted", nominatedPlacement={"main": {"n1": 2}}, placement={"n1": 2})
    state.upsert({**admitted, "metadata": {**admitted["metadata"], "resourceVersion": "12"}})
    (gang,) = seen(state, NOW).gangs
    assert gang.workload.nominated == {}, "an admitted gang holds its placement, not a nomination"


def test_the_test_only_fault_skip_evictions_plans_no_eviction() -> None:
    state = ClusterState()
    for obj in (
        QUEUE,
        job(suspend=False),
        group(phase="Admitted", placement={"n1": 2}, admittedAt=iso(61)),
        pod("a", node="n1"),
        pod("b", node="n1", phase="Pending"),
    ):
        state.upsert(obj)
    broken = Planner(300, skip_evictions=True)
    actions = broken.plan(seen(state, NOW), CycleResult((), {}), now=NOW)
    assert not [a for a in actions if isinstance(a, act.Evict)]
    healthy = Planner(300).plan(seen(state, NOW), CycleResult((), {}), now=NOW)
    assert [a for a in healthy if isinstance(a, act.Evict)]
