"""The plain-Pod workload kind: membership, the facts of a group, its writes, and its gangs
through the planner (admitted while gated, evicted and made again)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.core import CycleResult, Decision, Reason, Verdict
from queue_controller.journal import Journal, read_history
from queue_controller.kube import kinds
from queue_controller.kube.kinds.plainpods import POD_SET_ANNOTATION, PlainPods
from queue_controller.kube.resources import ADMISSION_GATE, JOB, POD
from queue_controller.kube.views import Delete, member_pod
from tests.fakes.gateway import FakeGateway
from tests.unit.test_lifecycle import NOW, QUEUE, iso
from tests.views import seen

PODS = PlainPods()


def pod(
    name: str,
    *,
    group: str | None = "ring",
    total: int | str | None = 2,
    gpus: int = 4,
    gated: bool = True,
    node: str = "",
    phase: str = "Pending",
    owner: str | None = None,
    queue: str = "q",
    kueue: bool = False,
    image: str = "w",
    **annotations: str,
) -> dict[str, Any]:
    queue_label = "kueue.x-k8s.io/queue-name" if kueue else "queue-controller.io/queue"
    group_label = "kueue.x-k8s.io/pod-group-name" if kueue else "queue-controller.io/pod-group"
    count = (
        "kueue.x-k8s.io/pod-group-total-count"
        if kueue
        else "queue-controller.io/pod-group-total-count"
    )
    labels = {queue_label: queue}
    notes = dict(annotations)
    if group is not None:
        labels[group_label] = group
    if total is not None:
        notes[count] = str(total)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "creationTimestamp": iso(300),
        "labels": labels,
        "annotations": notes,
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        ]
    }
    if gated:
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }


def group(phase: str, *, name: str = "pods-ring", min_member: int = 2, **status: Any) -> Any:
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": "uid-group",
            "resourceVersion": "11",
            "labels": {"queue-controller.io/workload-kind": "Pod"},
        },
        "spec": {"queue": "q", "minMember": min_member},
        "status": {"phase": phase, **status},
    }


def views(*objects: dict[str, Any]) -> Any:
    state = ClusterState()
    for obj in (QUEUE, *objects):
        state.upsert(obj)
    return seen(state, NOW)


def plan(*objects: dict[str, Any], decisions: tuple[Decision, ...] = ()) -> list[act.Action]:
    actions = Planner(300).plan(views(*objects), CycleResult(decisions, {}), now=NOW)
    return [a for a in actions if not isinstance(a, act.QueueStatus | act.TeamQuotaStatus)]


# -- membership ------------------------------------------------------------------------


def test_labelled_pods_of_a_group_are_one_gang_named_for_its_pod_group() -> None:
    (gang,) = views(pod("ring-0"), pod("ring-1")).gangs
    assert gang.kind.name == "Pod"
    assert gang.workload.key == "Pod/ns/pods-ring"
    assert gang.workload.pod_count == 2
    assert gang.workload.absent_members == 0


def test_kueue_labels_and_annotation_are_aliases() -> None:
    (gang,) = views(pod("ring-0", kueue=True), pod("ring-1", kueue=True)).gangs
    assert gang.workload.queue == "q"
    assert gang.workload.pod_count == 2
    assert gang.gang.facts.gang_size == 2


def test_a_labelled_pod_without_a_group_is_a_gang_of_one() -> None:
    (gang,) = views(pod("solo", group=None, total=None)).gangs
    assert gang.workload.name == "pods-solo"
    assert gang.workload.gang_size == 1


def test_pods_without_a_queue_label_are_not_ours() -> None:
    unlabelled = pod("free")
    unlabelled["metadata"]["labels"] = {}
    assert views(unlabelled).gangs == ()


def test_a_jobs_pods_belong_to_the_job_even_with_the_queue_label() -> None:
    job_pod = pod("train-abc", group=None, total=None)
    job_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u", "controller": True}
    ]
    claimed = kinds.claim(member_pod(job_pod))
    assert claimed is not None
    assert claimed[0].name == "Job"
    assert views(job_pod).gangs == ()  # its Job is not in this state: no gang at all


# -- the facts of a group --------------------------------------------------------------


def test_a_group_short_of_its_count_waits_for_the_rest() -> None:
    (gang,) = views(pod("ring-0", total=3), pod("ring-1", total=3)).gangs
    assert gang.workload.absent_members == 1
    assert gang.gang.facts.gang_size == 3
    assert gang.new_group()["spec"]["minMember"] == 3


def test_members_of_two_shapes_are_two_pod_sets() -> None:
    (gang,) = views(
        pod("l", total=3, gpus=0, image="launcher"),
        pod("w0", total=3, gpus=4),
        pod("w1", total=3, gpus=4),
    ).gangs
    sizes = sorted(p.count for p in gang.workload.pod_sets)
    assert sizes == [1, 2]
    assert all(p.path == "spec" for p in gang.workload.pod_sets)


def test_the_role_the_webhook_wrote_wins_over_the_shape() -> None:
    (gang,) = views(
        pod("ring-0", **{POD_SET_ANNOTATION: "workers"}),
        pod("ring-1", gpus=2, **{POD_SET_ANNOTATION: "workers"}),
    ).gangs
    assert [p.name for p in gang.workload.pod_sets] == ["workers"]


def test_a_members_role_is_the_same_in_every_process() -> None:
    # The role names a pod set in the PodGroup's status: a restart must read it back.
    script = (
        "from queue_controller.kube.kinds.plainpods import pod_set_name;"
        "from queue_controller.kube.views import member_pod;"
        "from tests.unit.test_kind_plainpods import pod;"
        "print(pod_set_name(member_pod(pod('x'))))"
    )
    names = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert len(names) == 1
    assert names.pop().startswith("role-")


def test_a_bound_member_keeps_the_role_of_its_gated_siblings() -> None:
    bound = pod("ring-0", gated=False, node="n1", phase="Running")
    bound["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}  # what binding adds
    (gang,) = views(bound, pod("ring-1")).gangs
    assert len(gang.workload.pod_sets) == 1


def test_members_that_disagree_on_the_count_make_the_group_invalid() -> None:
    (gang,) = views(pod("ring-0", total=2), pod("ring-1", total=3)).gangs
    assert "queue-controller.io/pod-group-total-count" in gang.workload.spec_error
    assert "ring-0" in gang.workload.spec_error


def test_a_group_without_its_count_is_invalid_and_says_which_annotation() -> None:
    (gang,) = views(pod("ring-0", total=None)).gangs
    assert "pod-group-total-count" in gang.workload.spec_error


def test_a_count_that_is_not_a_number_is_invalid() -> None:
    (gang,) = views(pod("ring-0", total="two")).gangs
    assert "'two' is not a whole number" in gang.workload.spec_error


def test_more_members_than_the_count_is_invalid_not_truncated() -> None:
    (gang,) = views(pod("a", total=1), pod("b", total=1)).gangs
    assert "2 members exist but" in gang.workload.spec_error


def test_members_in_different_queues_are_invalid() -> None:
    (gang,) = views(pod("ring-0"), pod("ring-1", queue="other")).gangs
    assert "different queues" in gang.workload.spec_error


def test_a_group_whose_members_all_succeeded_is_finished() -> None:
    (gang,) = views(
        pod("ring-0", gated=False, node="n1", phase="Succeeded"),
        pod("ring-1", gated=False, node="n1", phase="Succeeded"),
    ).gangs
    assert gang.gang.facts.finished
    assert gang.gang.facts.succeeded


# -- its writes ------------------------------------------------------------------------


def test_the_webhook_gates_a_new_member_and_records_its_role() -> None:
    new = pod("ring-0", gated=False)
    held = kinds.hold_at_creation(POD, new)
    assert held["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
    assert held["metadata"]["annotations"][POD_SET_ANNOTATION].startswith("role-")


def test_the_webhook_keeps_other_gates() -> None:
    new = pod("ring-0", gated=False)
    new["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    held = PODS.hold_at_creation(new)
    assert held["spec"]["schedulingGates"] == [
        {"name": "example.com/other"},
        {"name": ADMISSION_GATE},
    ]


def test_the_webhook_leaves_a_jobs_pods_and_pods_outside_any_queue_alone() -> None:
    job_pod = pod("train-abc", group=None, total=None, gated=False)
    job_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "t", "uid": "u", "controller": True}
    ]
    assert kinds.hold_at_creation(POD, job_pod) == {}
    free = pod("free", gated=False)
    free["metadata"]["labels"] = {}
    assert kinds.hold_at_creation(POD, free) == {}


def test_the_webhook_holds_a_queued_job_by_suspending_it() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "t", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {},
    }
    assert kinds.hold_at_creation(JOB, job) == {"spec": {"suspend": True}}


def test_an_unadmitted_member_that_runs_is_deleted_only_if_an_owner_makes_it_again() -> None:
    (hold,) = plan(
        pod("owned", gated=False, node="n1", phase="Running", owner="rs"),
        pod("bare", gated=False, node="n1", phase="Running"),
        group("Pending"),
    )
    assert isinstance(hold, act.HoldUnadmitted)
    assert [w.ref.name for w in hold.writes if isinstance(w, Delete)] == ["owned"]


def test_the_pod_group_is_owned_by_the_members_common_owner() -> None:
    (create,) = [
        a
        for a in plan(pod("ring-0", owner="rs"), pod("ring-1", owner="rs"))
        if isinstance(a, act.CreatePodGroup)
    ]
    owners = create.body["metadata"]["ownerReferences"]
    assert owners == [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "uid-rs"}
    ]
    (bare,) = [a for a in plan(pod("ring-0"), pod("ring-1")) if isinstance(a, act.CreatePodGroup)]
    assert bare.body["metadata"]["ownerReferences"] == []
    assert bare.body["metadata"]["name"] == "pods-ring"


# -- through the planner ---------------------------------------------------------------


def test_an_admit_decision_admits_the_group_and_releases_nothing_at_once() -> None:
    decision = Decision(
        "ns/pods-ring", "q", Verdict.ADMIT, Reason.ADMITTED, "2 members", {"n1": 2}, kind="Pod"
    )
    (admit,) = plan(pod("ring-0"), pod("ring-1"), group("Pending"), decisions=(decision,))
    assert isinstance(admit, act.Admit)
    assert admit.release == ()
    assert admit.subject.kind == "Pod"


def test_an_admitted_group_still_gated_is_bound_not_evicted() -> None:
    actions = plan(
        pod("ring-0"),
        pod("ring-1"),
        group("Admitted", placement={"n1": 1, "n2": 1}, admittedAt=iso(2)),
    )
    bindings = {a.pod.ref.name: a.node for a in actions if isinstance(a, act.BindMember)}
    assert bindings == {"ring-0": "n1", "ring-1": "n2"}
    assert not any(isinstance(a, act.Evict) for a in actions)


def test_an_evicted_group_whose_members_were_made_again_is_requeued_not_deleted() -> None:
    (finish,) = plan(pod("ring-2", owner="rs"), pod("ring-3", owner="rs"), group("Evicted"))
    assert isinstance(finish, act.FinishEviction)
    assert finish.requeued
    assert finish.pods == ()


def test_an_evicted_group_still_running_is_deleted_member_by_member() -> None:
    (finish,) = plan(
        pod("ring-0", gated=False, node="n1", phase="Running", owner="rs"), group("Evicted")
    )
    assert isinstance(finish, act.FinishEviction)
    assert not finish.requeued
    assert [p.ref.name for p in finish.pods] == ["ring-0"]


def test_a_pod_group_whose_members_are_gone_is_deleted_after_the_grace() -> None:
    old = group("Evicted")
    old["metadata"]["creationTimestamp"] = iso(3600)
    (orphan,) = plan(old)
    assert isinstance(orphan, act.DeleteOrphan)
    recent = group("Evicted")
    recent["metadata"]["creationTimestamp"] = iso(60)
    assert plan(recent) == []


def test_a_pod_gangs_admission_is_journalled_with_its_kind(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    objects = (pod("ring-0"), pod("ring-1"), group("Pending"))
    fake = FakeGateway(QUEUE, *objects, clock=lambda: NOW)
    state = ClusterState()
    state.replace_all(fake.all())
    journal = Journal(url)
    journal.start()  # brings the schema up
    try:
        applier = Applier(fake, state, journal, Metrics(), clock=lambda: NOW)
        decision = Decision(
            "ns/pods-ring", "q", Verdict.ADMIT, Reason.ADMITTED, "2 members", {"n1": 2}, kind="Pod"
        )
        actions = Planner(300).plan(seen(state, NOW), CycleResult((decision,), {}), now=NOW)
        assert asyncio.run(applier.apply_all(actions)) == 0
        assert journal.flush()
    finally:
        journal.close()
    (entry,) = read_history(url, namespace="ns")
    assert (entry.kind, entry.name, entry.event.value) == ("Pod", "pods-ring", "Admitted")
    assert entry.placement == {"n1": 2}
