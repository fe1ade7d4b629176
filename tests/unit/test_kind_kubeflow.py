"""The training-operator's jobs as a workload kind (kube/kinds/kubeflow.py): what a
PyTorchJob's gang is, its writes, and its way through translation and the planner.
The real operator runs them in tests/cluster/test_kubeflow_jobs.py."""

from __future__ import annotations

from typing import Any

import pytest

from queue_controller.controller import actions as act
from queue_controller.core import Decision, Reason, Verdict
from queue_controller.kube import kinds
from queue_controller.kube.kinds.kubeflow import PYTORCH_JOB, TF_JOB, TRAINING_JOBS
from queue_controller.kube.resources import ADMISSION_GATE, POD
from queue_controller.kube.views import Delete, Patch, member_pod
from tests.unit.test_lifecycle import iso, plan


def replica(count: int | str, gpus: int = 1, **template_meta: Any) -> dict[str, Any]:
    return {
        "replicas": count,
        "restartPolicy": "OnFailure",
        "template": {
            "metadata": template_meta,
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "pytorch/pytorch:2.4.0",
                        "resources": {"limits": {"nvidia.com/gpu": gpus}},
                    }
                ],
                "schedulingGates": [{"name": "someone-else/gate"}],
            },
        },
    }


def pytorchjob(
    name: str = "train",
    *,
    workers: int | str = 3,
    suspend: bool = True,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "3",
            "creationTimestamp": iso(100),
            "labels": {"queue-controller.io/queue": "q"} if labels is None else labels,
        },
        "spec": {
            "runPolicy": {"suspend": suspend},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers, 2)},
            **spec,
        },
    }


def read(obj: dict[str, Any]) -> Any:
    return PYTORCH_JOB.read(namespace="ns", name=obj["metadata"]["name"], head=obj, members=())


def test_one_pod_set_per_replica_type_all_placed_together() -> None:
    gang = read(pytorchjob())
    facts = gang.facts
    assert facts.spec_error == ""
    assert [(s.name, s.count, s.min_count) for s in facts.pod_sets] == [
        ("master", 1, 1),
        ("worker", 3, 3),
    ]
    assert facts.pod_sets[1].path == "spec.pytorchReplicaSpecs.Worker.template.spec"
    assert facts.held
    assert not facts.finished
    assert facts.uncreated_members == 4  # the operator makes all four once it runs
    assert facts.queue == "q"


def test_kueues_queue_label_is_accepted() -> None:
    gang = read(pytorchjob(labels={"kueue.x-k8s.io/queue-name": "research"}))
    assert gang.facts.queue == "research"


def test_an_elastic_job_is_refused_naming_the_field() -> None:
    elastic = pytorchjob(elasticPolicy={"minReplicas": 1, "maxReplicas": 4})
    error = read(elastic).facts.spec_error
    assert "spec.elasticPolicy" in error
    assert "no one placement" in error


@pytest.mark.parametrize(
    ("workers", "field"),
    [
        (-1, "spec.pytorchReplicaSpecs.Worker.replicas"),
        ("three", "spec.pytorchReplicaSpecs.Worker.replicas"),
        (1_000_000, "spec.pytorchReplicaSpecs.Worker.replicas"),
    ],
)
def test_a_bad_replica_count_is_the_gangs_own_error(workers: Any, field: str) -> None:
    gang = read(pytorchjob(workers=workers))
    assert field in gang.facts.spec_error
    assert gang.facts.pod_sets == ()


def test_a_replica_type_of_none_is_left_out_and_none_at_all_is_refused() -> None:
    gang = read(pytorchjob(workers=0))
    assert [s.name for s in gang.facts.pod_sets] == ["master"]
    empty = pytorchjob()
    empty["spec"]["pytorchReplicaSpecs"] = {}
    assert "spec.pytorchReplicaSpecs" in read(empty).facts.spec_error


def test_finished_and_succeeded_come_from_the_operators_conditions() -> None:
    done = pytorchjob(suspend=False)
    done["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    facts = read(done).facts
    assert facts.finished
    assert facts.succeeded
    done["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    facts = read(done).facts
    assert facts.finished
    assert not facts.succeeded


def member(owner_kind: str, replica_type: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{replica_type}-0",
            "namespace": "ns",
            "uid": "uid-p",
            "labels": {"training.kubeflow.org/replica-type": replica_type},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1" if owner_kind != "Job" else "batch/v1",
                    "kind": owner_kind,
                    "name": "train",
                    "uid": "uid-train",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


def test_its_pods_are_its_members_by_replica_type() -> None:
    claimed = kinds.claim(member_pod(member("PyTorchJob", "worker")))
    assert claimed is not None
    kind, membership = claimed
    assert kind is PYTORCH_JOB
    assert (membership.workload, membership.pod_set) == ("train", "worker")
    # Another kind's pod is not: a TFJob's, a Job's.
    assert PYTORCH_JOB.membership(member_pod(member("TFJob", "worker"))) is None
    assert PYTORCH_JOB.membership(member_pod(member("Job", "worker"))) is None
    assert TF_JOB.membership(member_pod(member("TFJob", "ps"))) is not None


def test_held_at_creation_by_run_policy_suspend() -> None:
    running = pytorchjob(suspend=False)
    assert kinds.hold_at_creation(PYTORCH_JOB.webhook.resource, running) == {
        "spec": {"runPolicy": {"suspend": True}}
    }
    assert kinds.hold_at_creation(PYTORCH_JOB.webhook.resource, pytorchjob()) == {}
    unqueued = pytorchjob(suspend=False, labels={})
    assert kinds.hold_at_creation(PYTORCH_JOB.webhook.resource, unqueued) == {}


def test_released_unsuspended_with_our_gate_on_every_template() -> None:
    (patch,) = PYTORCH_JOB.release(read(pytorchjob()))
    assert isinstance(patch, Patch)
    assert patch.body["spec"]["runPolicy"] == {"suspend": False}
    for replica_type in ("Master", "Worker"):
        gates = patch.body["spec"]["pytorchReplicaSpecs"][replica_type]["template"]["spec"]
        assert gates["schedulingGates"] == [
            {"name": "someone-else/gate"},
            {"name": ADMISSION_GATE},
        ]


def test_evicted_and_held_by_suspending_again() -> None:
    gang = read(pytorchjob(suspend=False))
    (patch,) = PYTORCH_JOB.evict(gang)
    assert isinstance(patch, Patch)
    assert patch.body == {"spec": {"runPolicy": {"suspend": True}}}
    assert PYTORCH_JOB.evict(read(pytorchjob())) == []  # already held
    hold = PYTORCH_JOB.hold(gang)
    assert isinstance(hold[0], Patch)
    assert not any(isinstance(w, Delete) for w in hold)  # no members to delete


def test_in_a_managed_namespace_a_gpu_job_without_a_queue_is_queued_by_default() -> None:
    resource = PYTORCH_JOB.webhook.resource
    unlabelled = pytorchjob(suspend=False, labels={})
    patch = kinds.queue_by_default(resource, unlabelled)
    assert patch["metadata"]["labels"] == {"queue-controller.io/queue": "default"}
    assert patch["spec"] == {"runPolicy": {"suspend": True}}
    cpu_only = pytorchjob(suspend=False, labels={})
    for spec in cpu_only["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert kinds.queue_by_default(resource, cpu_only) == {}
    # Its pods are its own, never queued alone.
    assert kinds.queue_by_default(POD, member("PyTorchJob", "worker")) == {}


def test_every_training_kind_is_registered_watched_optional_and_granted() -> None:
    for kind in TRAINING_JOBS:
        assert kind.head in kinds.WATCHED
        assert kind.head in kinds.OPTIONAL
        plurals = {r for rule in kinds.rbac_rules() for r in rule.resources}
        assert kind.head is not None
        assert {kind.head.plural, f"{kind.head.plural}/finalizers"} <= plurals


def test_through_translation_and_the_planner_a_pytorchjob_gets_its_pod_group() -> None:
    actions = plan(pytorchjob())
    (create,) = [a for a in actions if isinstance(a, act.CreatePodGroup)]
    assert create.body["metadata"]["name"] == "pytorchjob-train"
    assert create.body["spec"] == {"queue": "q", "minMember": 4}
    owner = create.body["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("PyTorchJob", "uid-train", True)


def test_an_admission_unsuspends_it() -> None:
    # The workload is named as its PodGroup is, distinct from a Job of the same name.
    decision = Decision(
        "ns/pytorchjob-train",
        "q",
        Verdict.ADMIT,
        Reason.ADMITTED,
        "4 members",
        {"n1": 4},
        {"master": {"n1": 1}, "worker": {"n1": 3}},
        kind="PyTorchJob",
    )
    group = {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "pytorchjob-train",
            "namespace": "ns",
            "resourceVersion": "9",
            "labels": {"queue-controller.io/workload-kind": "PyTorchJob"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": "train",
                    "uid": "uid-train",
                }
            ],
        },
        "spec": {"queue": "q", "minMember": 4},
        "status": {"phase": "Pending"},
    }
    (admit,) = plan(pytorchjob(), group, decisions=(decision,))
    assert isinstance(admit, act.Admit)
    assert admit.placement == {"n1": 4}
    (release,) = admit.release
    assert isinstance(release, Patch)
    assert release.body["spec"]["runPolicy"] == {"suspend": False}
