"""A PodGroup status the controller did not write admits nothing.

Only the controller writes PodGroup status (the chart grants no one else a status
subresource). Should someone else write one anyway (a cluster admin's `kubectl patch
--subresource=status`, a restored backup), a held gang's Admitted or Running is no
admission: the gang stays pending and the quota decides. The controller's own Admitted on
a held gang (it crashed, or its release conflicted, before the gang was let go) is still
resumed. A whole cycle of the scheduling loop runs on a fake API.
"""

from __future__ import annotations

from typing import Any

import pytest

from queue_controller.kube.resources import FIELD_MANAGER
from queue_controller.kube.snapshot import phase_writer
from tests.fakes.gateway import FakeGateway
from tests.unit.test_kind_plainpods import group as pod_group
from tests.unit.test_kind_plainpods import pod
from tests.unit.test_lifecycle import NOW, QUEUE, T0, group, job
from tests.unit.test_one_translation import NODE, run_one_cycle

# One GPU of quota; the gang asks for two (two members of one GPU each).
TEAM = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "TeamQuota",
    "metadata": {"name": "team", "resourceVersion": "2"},
    "spec": {"resources": {"nvidia.com/gpu": {"nominal": 1}}},
}


def written_by(obj: dict[str, Any], manager: str | None) -> dict[str, Any]:
    """``obj`` with managedFields saying ``manager`` wrote its status, as the API server does."""
    if manager is not None:
        obj["metadata"]["managedFields"] = [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "fieldsV1": {"f:metadata": {"f:ownerReferences": {}}},
            },
            {
                "manager": manager,
                "operation": "Update",
                "subresource": "status",
                "fieldsV1": {
                    "f:status": {".": {}, "f:phase": {}, "f:placement": {}, "f:admittedAt": {}}
                },
            },
        ]
    return obj


def admitted(manager: str | None) -> dict[str, Any]:
    return written_by(group(phase="Admitted", placement={"n1": 2}, admittedAt=T0), manager)


def cycle(*objects: dict[str, Any]) -> FakeGateway:
    from queue_controller.controller.state import ClusterState

    fake = FakeGateway(QUEUE, TEAM, NODE, *objects, clock=lambda: NOW)
    state = ClusterState()
    state.replace_all(fake.all())
    run_one_cycle(state, fake)
    return fake


def test_the_phase_writer_is_read_from_managed_fields() -> None:
    assert phase_writer(admitted("kubectl-patch")) == "kubectl-patch"
    assert phase_writer(admitted(FIELD_MANAGER)) == FIELD_MANAGER
    assert phase_writer(admitted(None)) is None
    spec_only = written_by(group(phase="Pending"), None)
    spec_only["metadata"]["managedFields"] = [
        {"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:spec": {}}}
    ]
    assert phase_writer(spec_only) is None
    shared = admitted(FIELD_MANAGER)
    shared["metadata"]["managedFields"].append(
        {"manager": "ops", "operation": "Apply", "subresource": "status",
         "fieldsV1": {"f:status": {"f:phase": {}}}}
    )  # fmt: skip
    assert phase_writer(shared) == "ops"


@pytest.mark.parametrize("manager", ["kubectl-patch", "kubectl-edit", "OpenAPI-Generator"])
def test_a_hand_written_admission_of_a_held_job_is_undone_by_the_quota(manager: str) -> None:
    fake = cycle(job("train", parallelism=2), admitted(manager))
    held = fake.held("Job", "ns", "train")
    assert held is not None
    assert held["spec"]["suspend"] is True, "the Job was released past its quota"
    status = (fake.held("PodGroup", "ns", "train") or {})["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "QuotaExceeded")
    quota = (fake.held("TeamQuota", "", "team") or {}).get("status", {})
    assert quota["used"] == {"nvidia.com/gpu": "0"}
    assert quota["admittedGangs"] == 0
    queue = (fake.held("Queue", "ns", "q") or {})["status"]
    assert (queue["pendingGangs"], queue["admittedGangs"]) == (1, 0)


@pytest.mark.parametrize("manager", [FIELD_MANAGER, None])
def test_the_controllers_own_admission_of_a_held_job_is_resumed(manager: str | None) -> None:
    fake = cycle(job("train", parallelism=2), admitted(manager))
    held = fake.held("Job", "ns", "train")
    assert held is not None
    assert held["spec"]["suspend"] is False, "the interrupted admission was not resumed"
    assert (fake.held("PodGroup", "ns", "train") or {})["status"]["phase"] == "Admitted"


def test_a_hand_written_admission_releases_no_gated_pod() -> None:
    group = written_by(
        pod_group("Admitted", name="pods-ring", placement={"n1": 2}, admittedAt=T0),
        "kubectl-patch",
    )
    fake = cycle(pod("ring-0"), pod("ring-1"), group)
    for name in ("ring-0", "ring-1"):
        spec = (fake.held("Pod", "ns", name) or {})["spec"]
        assert [g["name"] for g in spec.get("schedulingGates", [])] == [
            "queue-controller.io/admission"
        ], f"{name} was let go"
    status = (fake.held("PodGroup", "ns", "pods-ring") or {})["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "QuotaExceeded")


def test_a_released_gang_keeps_an_admission_someone_else_wrote() -> None:
    """Only a held gang is judged by who wrote its phase: a gang already running is not
    suspended for it (an upgrade from a controller that named no field manager)."""
    fake = cycle(job("train", parallelism=2, suspend=False), admitted("OpenAPI-Generator"))
    held = fake.held("Job", "ns", "train")
    assert held is not None
    assert held["spec"]["suspend"] is False
