"""chaos breaks a gang of any kind with a head, not only a Job's (issue 25): a RayJob's or a
PyTorchJob's members are the pods the controller claims for it, its PodGroup is its kind's,
and it has given its quota back when its kind says it is held."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queue_controller import chaos
from queue_controller.cli.chaosrun import gang_of
from queue_controller.errors import InputError
from queue_controller.kube.fields import describe
from queue_controller.kube.kinds.ray import RAY_JOB_LABEL
from queue_controller.kube.snapshot import Located
from tests.unit.test_kind_kubeflow import member, pytorchjob
from tests.unit.test_kind_ray import HEAD_LABELS, WORKER_LABELS, ray_pod, rayjob


def located(*objs: dict[str, Any]) -> list[Located]:
    return [Located(describe(o), o) for o in objs]


def group(name: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"queue": "q"},
        "status": {"phase": phase, "placement": {"n1": 2}},
    }


def bound(pod: dict[str, Any], name: str, node: str) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["metadata"]["name"] = name
    out["spec"]["nodeName"] = node
    out["status"] = {"phase": "Running"}
    return out


def test_a_rayjobs_gang_is_its_claimed_pods_and_its_kinds_podgroup() -> None:
    mine = {**HEAD_LABELS, RAY_JOB_LABEL: "tune"}
    items = located(
        rayjob(suspend=False),
        group("rayjob-tune"),
        group("tune"),  # a Job's PodGroup of the same name: not this gang's
        bound(ray_pod("RayCluster", mine), "tune-x7k2p-head", "n1"),
        bound(ray_pod("RayCluster", {**WORKER_LABELS, RAY_JOB_LABEL: "tune"}), "w", "n1"),
        bound(ray_pod("RayCluster", WORKER_LABELS), "another-clusters", "n1"),
    )
    seen = chaos.gang_seen(items, "ns", "tune", "RayJob")
    assert seen.what == "RayJob ns/tune"
    assert seen.head is not None
    assert seen.group is not None
    assert seen.group["metadata"]["name"] == "rayjob-tune"
    assert [m.name for m in seen.members] == ["tune-x7k2p-head", "w"]
    assert not seen.suspended
    held = chaos.gang_seen(located(rayjob(suspend=True)), "ns", "tune", "RayJob")
    assert held.suspended
    assert held.members == ()


def test_a_pytorchjobs_gang_and_the_tolerations_its_templates_give() -> None:
    job = pytorchjob(suspend=False)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"] = [
        {"operator": "Exists"}
    ]
    items = located(
        job, group("pytorchjob-train"), bound(member("PyTorchJob", "worker"), "p", "n1")
    )
    seen = chaos.gang_seen(items, "ns", "train", "PyTorchJob")
    assert [m.name for m in seen.members] == ["p"]
    assert not seen.suspended
    tolerations = [t for spec in seen.pod_specs for t in spec.get("tolerations", [])]
    assert tolerations == [{"operator": "Exists"}]


def test_job_names_a_job_or_any_kind_with_a_head() -> None:
    assert gang_of("research/train") == ("Job", "research", "train")
    assert gang_of("RayJob/research/tune") == ("RayJob", "research", "tune")
    assert gang_of("PyTorchJob/research/ddp") == ("PyTorchJob", "research", "ddp")
    for bad, says in (
        ("train", "is not NAMESPACE/NAME"),
        ("Pod/research/group", "'Pod' is not one of"),
        ("Nope/a/b", "'Nope' is not one of"),
        ("RayJob//tune", "is not NAMESPACE/NAME"),
    ):
        with pytest.raises(InputError, match=says) as raised:
            gang_of(bad)
        assert raised.value.field == "--job"
