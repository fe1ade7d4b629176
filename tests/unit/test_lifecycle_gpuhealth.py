"""Admitted gangs on GPUs that fail or idle: evicted, or flagged, as their Queue says."""

from __future__ import annotations

import json
from typing import Any

from queue_controller.controller import actions as act
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.state import ClusterState
from queue_controller.core import CycleResult
from queue_controller.kube import nodehealth
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job
from tests.views import seen

GPU_LIMITS = {"limits": {"nvidia.com/gpu": 4}}


def member(name: str, node: str, *, created_before_now: float = 600) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "resourceVersion": "12",
            "creationTimestamp": iso(created_before_now),
            "ownerReferences": [{"kind": "Job", "name": "train", "controller": True}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": GPU_LIMITS}]},
        "status": {"phase": "Running"},
    }


def node(name: str, *, unhealthy: list[dict[str, Any]] | None = None, **condition: str) -> dict:
    annotations = {}
    if unhealthy is not None:
        report = {"source": "node-agent", "gpus": 8, "updated": iso(0), "unhealthy": unhealthy}
        annotations[nodehealth.ANNOTATION] = json.dumps(report)
    conditions = [{"type": "Ready", "status": "True"}]
    if condition:
        conditions.append({"type": "GPUHealthy", **condition})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": conditions},
    }


def xid79(since_before_now: float = 60, **extra: Any) -> dict[str, Any]:
    return {
        "index": 3,
        "uuid": "GPU-3",
        "reason": "XidCriticalError",
        "xids": [79],
        "since": iso(since_before_now),
        "lastSeen": iso(since_before_now),
        **extra,
    }


def queue(**gpu_health: Any) -> dict[str, Any]:
    return {**QUEUE, "spec": {**QUEUE["spec"], "gpuHealth": gpu_health}}


def running_group(**status: Any) -> dict[str, Any]:
    return group(phase="Running", running=2, placement={"n1": 1, "n2": 1}, **status)


def plan(*objects: dict[str, Any], idle: dict[str, float] | None = None) -> list[act.Action]:
    state = ClusterState()
    for obj in objects:
        state.upsert(obj)
    actions = Planner(300).plan(seen(state, NOW), CycleResult((), {}), now=NOW, idle=idle)
    return [a for a in actions if not isinstance(a, act.QueueStatus | act.TeamQuotaStatus)]


def running_gang(*nodes: dict[str, Any], **group_status: Any) -> tuple[dict[str, Any], ...]:
    return (
        job(suspend=False),
        running_group(**group_status),
        member("train-0", "n1"),
        member("train-1", "n2"),
        *nodes,
    )


def test_a_running_gang_on_a_gpu_that_failed_is_evicted_whole_with_gpu_unhealthy() -> None:
    actions = plan(queue(), *running_gang(node("n1", unhealthy=[xid79()]), node("n2")))
    (evict,) = actions
    assert isinstance(evict, act.Evict)
    assert evict.reason == "GPUUnhealthy"
    assert len(evict.pods) == 2  # both members go, not only the one on n1
    assert "ns/train-0" in evict.message
    assert "GPU 3 (GPU-3) has XID 79" in evict.message


def test_under_mark_the_gang_is_flagged_once_and_keeps_running() -> None:
    objects = running_gang(node("n1", unhealthy=[xid79()]), node("n2"))
    (flag,) = plan(queue(onUnhealthy="Mark"), *objects)
    assert isinstance(flag, act.SetCondition)
    assert (flag.condition, flag.status, flag.reason) == ("GPUUnhealthy", True, "GPUUnhealthy")
    flagged = {"conditions": [{"type": "GPUUnhealthy", "status": "True"}]}
    objects = running_gang(node("n1", unhealthy=[xid79()]), node("n2"), **flagged)
    assert plan(queue(onUnhealthy="Mark"), *objects) == []


def test_the_flag_clears_when_the_gpu_recovers() -> None:
    flagged = {"conditions": [{"type": "GPUUnhealthy", "status": "True"}]}
    (clear,) = plan(queue(onUnhealthy="Mark"), *running_gang(node("n1"), node("n2"), **flagged))
    assert isinstance(clear, act.SetCondition)
    assert (clear.status, clear.reason) == (False, "GPUsHealthy")


def test_members_created_after_the_fault_were_placed_knowing_it() -> None:
    # The GPU failed 10 minutes before the members existed: admission already
    # counted it out, so the gang beside it is left alone.
    assert plan(queue(), *running_gang(node("n1", unhealthy=[xid79(since_before_now=1200)]))) == []


def test_a_report_naming_pods_hits_them_even_when_created_after_the_fault() -> None:
    ours = node("n1", unhealthy=[xid79(since_before_now=1200, pods=["ns/train-0"])])
    (evict,) = plan(queue(), *running_gang(ours))
    assert isinstance(evict, act.Evict)
    assert evict.reason == "GPUUnhealthy"
    # A list naming someone else spares nobody older than the fault.
    elsewhere = node("n1", unhealthy=[xid79(pods=["gpu-operator/nvidia-dcgm-exporter-x"])])
    (evict,) = plan(queue(), *running_gang(elsewhere))
    assert isinstance(evict, act.Evict)


def test_a_condition_set_by_hand_without_a_list_hits_every_member_there() -> None:
    down = node("n2", status="False", reason="Maintenance", lastTransitionTime=iso(30))
    (evict,) = plan(queue(), *running_gang(down))
    assert isinstance(evict, act.Evict)
    assert "all unhealthy" in evict.message


def test_pods_without_gpus_are_not_hit() -> None:
    cpu_only = member("train-0", "n1")
    cpu_only["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    objects = (
        job(suspend=False),
        running_group(),
        cpu_only,
        member("train-1", "n2"),
        node("n1", unhealthy=[xid79()]),
    )
    assert plan(queue(), *objects) == []


def test_an_idle_gang_is_flagged_and_evicted_only_where_its_queue_opts_in() -> None:
    idle = {"Job/ns/train": NOW - 3600}
    (flag,) = plan(queue(), *running_gang(), idle=idle)
    assert isinstance(flag, act.SetCondition)
    assert (flag.condition, flag.status, flag.reason) == ("Idle", True, "GPUIdle")
    (evict,) = plan(queue(evictIdle=True), *running_gang(), idle=idle)
    assert isinstance(evict, act.Evict)
    assert evict.reason == "Idle"


def test_the_idle_flag_clears_when_the_gpus_get_busy() -> None:
    flagged = {"conditions": [{"type": "Idle", "status": "True"}]}
    (clear,) = plan(queue(), *running_gang(**flagged))
    assert isinstance(clear, act.SetCondition)
    assert (clear.condition, clear.status, clear.reason) == ("Idle", False, "GPUActive")
