"""One tenant's malformed object cannot stop the queue (issue 22), on the real control plane.

A Job whose min-member annotation is a superscript digit ("²": ``str.isdigit`` accepts
it, ``int`` refuses it) once ended every scheduling cycle, so no gang of any team was
admitted while it existed.  Here it sits among healthy gangs of three teams: they are
all admitted, it is InvalidSpec on its own PodGroup (condition and Warning event, both
naming the annotation), and the controller's /metrics says no cycle failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster

ANNOTATION = "queue-controller.io/min-member"
TEAMS = ("a", "b", "c")


def _cycle_failures(controller: ControllerProcess) -> float:
    text = controller.metrics()
    assert "queue_controller_scheduling_cycle_seconds" in text, "no metrics read"
    return sum(
        float(value)
        for value in re.findall(
            r"^queue_controller_cycle_failures_total\{[^}]*\} (\S+)$", text, re.MULTILINE
        )
    )


def _invalid(objects: Objects, name: str) -> dict[str, Any] | None:
    group = objects.pod_group(name)
    if group is not None and group.get("status", {}).get("reason") == "InvalidSpec":
        return group
    return None


def _admitted(objects: Objects, name: str) -> Callable[[], dict[str, Any] | None]:
    return lambda: objects.phase(name, "Admitted", "Running")


def test_a_malformed_annotation_stops_no_other_team_and_is_invalid_on_its_own_job(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    before = _cycle_failures(controller)
    for name in TEAMS:
        objects.queue(f"q-{name}", objects.team_quota(4))
    bad = job("bad", queue="q-a", gpus=1, pods=2, nodes=h100(0, 1))
    bad["metadata"]["annotations"] = {ANNOTATION: "²"}
    create(cluster, namespace, bad)
    # The bad Job first: the healthy gangs arrive while it is there, every cycle.
    group = eventually(lambda: _invalid(objects, "bad"), what="the bad Job to be InvalidSpec")
    (condition,) = [c for c in group["status"]["conditions"] if c["type"] == "Admitted"]
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec")
    assert ANNOTATION in condition["message"], condition
    for name in TEAMS:
        create(cluster, namespace, job(name, queue=f"q-{name}", gpus=1, pods=2, nodes=h100(0, 1)))
    for name in TEAMS:
        eventually(_admitted(objects, name), what=f"team {name}'s gang to be admitted")
    warnings = eventually(
        lambda: [
            e
            for e in cluster.core.list_namespaced_event(namespace).items
            if e.involved_object.kind == "Job"
            and e.involved_object.name == "bad"
            and e.reason == "Invalid"
        ],
        what="the Warning event on the bad Job",
    )
    assert all(e.type == "Warning" for e in warnings)
    assert any(
        ANNOTATION in (e.message or "") and "InvalidSpec" in (e.message or "") for e in warnings
    )
    still = objects.pod_group("bad")
    assert still is not None
    assert still["status"]["reason"] == "InvalidSpec"
    assert _cycle_failures(controller) == before == 0
