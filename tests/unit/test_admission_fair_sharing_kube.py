"""Admission fair sharing outside the core: the API's rules, the snapshot's reading of a
Queue's status, and the controller's write of each sample (against the fake gateway)."""

from __future__ import annotations

import asyncio
import copy
import math
from typing import Any

import pytest

from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.core import schedule
from queue_controller.core.quota.admissionfair import alpha
from queue_controller.errors import InputError
from queue_controller.kube.objects import queue, team_quota
from tests.fakes.gateway import FakeGateway
from tests.unit.test_crds import crd_errors, pydantic_errors
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job
from tests.views import seen

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
AFS = {"usageHalfLifeSeconds": 600, "usageSamplingIntervalSeconds": 60}


def fair_quota(afs: Obj | None = None) -> Obj:
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": {"name": "team", "resourceVersion": "3"},
        "spec": {
            "resources": {GPU: {"nominal": 16}},
            "admissionFairSharing": AFS if afs is None else afs,
        },
    }


def fair_queue(status: Obj | None = None, weight: object = 1) -> Obj:
    obj = copy.deepcopy(QUEUE)
    obj["spec"]["fairSharing"] = {"weight": weight}
    if status is not None:
        obj["status"] = {**obj["status"], "fairSharing": {"admissionFairSharingStatus": status}}
    return obj


# -- the API ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("afs", "field"),
    [
        ({"usageHalfLifeSeconds": 0}, "usageHalfLifeSeconds"),
        ({"usageHalfLifeSeconds": -60}, "usageHalfLifeSeconds"),
        ({"usageHalfLifeSeconds": "600"}, "usageHalfLifeSeconds"),
        ({"usageHalfLifeSeconds": 60, "usageSamplingIntervalSeconds": 0}, "usageSampling"),
        ({}, "usageHalfLifeSeconds"),
        ({"usageHalfLifeSeconds": 60, "resourceWeights": {"cpu": -1}}, "resourceWeights.cpu"),
        ({"usageHalfLifeSeconds": 60, "usageHalfLifeTime": "1h"}, "usageHalfLifeTime"),
    ],
)
def test_a_bad_setting_is_refused_by_both_naming_its_field(afs: Obj, field: str) -> None:
    obj = fair_quota(afs)
    assert any(field in error for error in crd_errors(obj))
    assert any(field in error for error in pydantic_errors(obj))
    with pytest.raises(InputError) as refused:
        team_quota(obj)
    assert field in str(refused.value)
    assert "spec.admissionFairSharing" in str(refused.value)


@pytest.mark.parametrize("weight", [-1, "-1", 1.5, "heavy"])
def test_a_bad_queue_weight_is_refused_by_both(weight: object) -> None:
    obj = fair_queue(weight=weight)
    assert any("fairSharing.weight" in error for error in crd_errors(obj))
    assert any("fairSharing.weight" in error for error in pydantic_errors(obj))


def test_good_settings_are_accepted_by_both() -> None:
    obj = fair_quota({**AFS, "resourceWeights": {GPU: 1, "cpu": 0, "memory": "0"}})
    assert crd_errors(obj) == []
    assert pydantic_errors(obj) == []
    status = {"consumedResources": {GPU: "1500m"}, "lastUpdate": iso(30), "usage": "1.5"}
    for weight in (0, 2, "500m"):
        assert crd_errors(fair_queue(status, weight)) == []
        assert pydantic_errors(fair_queue(status, weight)) == []


def test_the_crd_refuses_a_negative_consumed_amount_in_status() -> None:
    bad = fair_queue({"consumedResources": {GPU: "-1"}, "lastUpdate": iso(30)})
    assert any("consumedResources" in error for error in crd_errors(bad))


# -- the snapshot -------------------------------------------------------------------------------


def test_the_settings_and_the_status_are_read_into_the_core() -> None:
    quota = team_quota(fair_quota({**AFS, "resourceWeights": {"memory": 0}}))
    assert quota.admission_fair_sharing is not None
    assert quota.admission_fair_sharing.usage_half_life_seconds == 600
    assert quota.admission_fair_sharing.usage_sampling_interval_seconds == 60
    assert quota.admission_fair_sharing.resource_weights == {"memory": 0}
    read = queue(fair_queue({"consumedResources": {GPU: "1500m"}, "lastUpdate": iso(30)}, "2"))
    assert read.fair_weight == 2000
    assert read.consumed == {GPU: 1500}
    assert read.consumed_at == NOW - 30


def test_a_quota_without_the_setting_has_none_and_the_sampling_interval_defaults() -> None:
    plain = fair_quota()
    del plain["spec"]["admissionFairSharing"]
    assert team_quota(plain).admission_fair_sharing is None
    quota = team_quota(fair_quota({"usageHalfLifeSeconds": 60}))
    assert quota.admission_fair_sharing is not None
    assert quota.admission_fair_sharing.usage_sampling_interval_seconds == 300


def test_a_status_it_cannot_read_counts_as_never_sampled_and_keeps_the_queue() -> None:
    read = queue(fair_queue({"consumedResources": {GPU: "lots"}, "lastUpdate": "yesterday"}))
    assert read.consumed == {}
    assert read.consumed_at is None


# -- the write ----------------------------------------------------------------------------------


def cycle(state: ClusterState, fake: FakeGateway, now: float) -> list[act.Action]:
    """One cycle as the loop runs it: translate, schedule, plan, apply."""
    translation = seen(state, now)
    result = schedule(translation.snapshot)
    actions = Planner(300).plan(translation, result, now=now)
    applier = Applier(fake, state, None, Metrics(), clock=lambda: now)
    asyncio.run(applier.apply_all(actions))
    return actions


def afs_status(fake: FakeGateway) -> Obj:
    held = fake.held("Queue", "ns", "q")
    assert held is not None
    status: Obj = held["status"]["fairSharing"]["admissionFairSharingStatus"]
    return status


def test_each_sample_is_written_to_the_queue_status_and_read_back_after_a_restart() -> None:
    running = job(suspend=False)
    admitted = group(phase="Running", placement={"n1": 2}, admittedAt=iso(3600))
    objects = (fair_quota(), fair_queue({"consumedResources": {}, "lastUpdate": iso(60)}))
    fake = FakeGateway(*objects, running, admitted, clock=lambda: NOW)
    state = ClusterState()
    state.replace_all(fake.all())
    cycle(state, fake, NOW)
    status = afs_status(fake)
    assert status["lastUpdate"] == iso(0)
    # The Job's two pods hold a GPU each (tests/unit/test_lifecycle.job): 2 GPUs, a
    # sixty-second step towards them with a half-life of ten minutes.
    expected = 2000 * alpha(elapsed=60, half_life=600)
    assert status["consumedResources"][GPU] == f"{round(expected)}m"
    assert math.isclose(float(status["usage"]), _weighed(status["consumedResources"]), rel_tol=1e-3)
    # Not again until the interval is up: nothing is written for it.
    state.replace_all(fake.all())
    actions = cycle(state, fake, NOW + 30)
    assert not any(isinstance(a, act.QueueStatus) and a.fair_sharing for a in actions)
    # A restarted controller reads the sample from the Queue and goes on from it.
    restarted = ClusterState()
    restarted.replace_all(fake.all())
    (read,) = seen(restarted, NOW + 60).snapshot.queues
    assert read.consumed[GPU] == round(expected)
    assert read.consumed_at == NOW
    cycle(restarted, fake, NOW + 60)
    again = round(expected)  # the consumed the restart read
    step = alpha(elapsed=60, half_life=600)
    assert afs_status(fake)["consumedResources"][GPU] == (
        f"{round(again * (1 - step) + 2000 * step)}m"
    )


def _weighed(consumed: Obj) -> float:
    from queue_controller.core.model import parse_milli

    return sum(parse_milli(amount) for amount in consumed.values()) / 1000


def test_the_figure_leaves_the_queue_when_its_quota_drops_admission_fair_sharing() -> None:
    plain = fair_quota()
    del plain["spec"]["admissionFairSharing"]
    sampled = fair_queue({"consumedResources": {GPU: "1"}, "lastUpdate": iso(60)})
    fake = FakeGateway(plain, sampled, clock=lambda: NOW)
    state = ClusterState()
    state.replace_all(fake.all())
    cycle(state, fake, NOW)
    held = fake.held("Queue", "ns", "q")
    assert held is not None
    assert "fairSharing" not in held["status"]
