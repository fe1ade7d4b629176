"""TeamQuota ``spec.preemption`` (Kueue's ClusterQueue names) reaches the core's TeamQuota.

Only the API: no preemption behaviour hangs on these fields yet.
"""

from __future__ import annotations

from typing import Any

import pytest

from queue_controller.api.v1alpha1 import API_VERSION
from queue_controller.core import BorrowPolicy, Preemption, ReclaimPolicy, TeamQuota, WithinPolicy
from queue_controller.errors import InputError
from queue_controller.kube import objects


def tq(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TeamQuota",
        "metadata": {"name": "research"},
        "spec": {"cohort": "gpu-pool", "resources": {"nvidia.com/gpu": {"nominal": 8}}, **spec},
    }


def test_absent_preemption_is_never_everywhere() -> None:
    quota = objects.team_quota(tq({}))
    assert quota.preemption == Preemption()
    assert quota.preemption.reclaim_within_cohort is ReclaimPolicy.NEVER
    assert quota.preemption.within_team_quota is WithinPolicy.NEVER
    assert quota.preemption.borrow_within_cohort is BorrowPolicy.NEVER
    assert quota.preemption.borrow_max_priority is None


def test_core_default_is_never_everywhere() -> None:
    assert TeamQuota(name="t", resources={}).preemption == Preemption(
        ReclaimPolicy.NEVER, WithinPolicy.NEVER, BorrowPolicy.NEVER, None
    )


@pytest.mark.parametrize("policy", list(ReclaimPolicy))
def test_reclaim_within_cohort(policy: ReclaimPolicy) -> None:
    quota = objects.team_quota(tq({"preemption": {"reclaimWithinCohort": policy.value}}))
    assert quota.preemption.reclaim_within_cohort is policy
    assert quota.preemption.within_team_quota is WithinPolicy.NEVER


@pytest.mark.parametrize("policy", list(WithinPolicy))
def test_within_team_quota(policy: WithinPolicy) -> None:
    quota = objects.team_quota(tq({"preemption": {"withinTeamQuota": policy.value}}))
    assert quota.preemption.within_team_quota is policy
    assert quota.preemption.reclaim_within_cohort is ReclaimPolicy.NEVER


@pytest.mark.parametrize("policy", list(BorrowPolicy))
def test_borrow_within_cohort_policy(policy: BorrowPolicy) -> None:
    spec = {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": policy.value}}
    quota = objects.team_quota(tq({"preemption": spec}))
    assert quota.preemption.borrow_within_cohort is policy
    assert quota.preemption.borrow_max_priority is None


@pytest.mark.parametrize("threshold", [-5, 0, 1000, 2**31 - 1])
def test_borrow_max_priority_threshold(threshold: int) -> None:
    spec = {
        "reclaimWithinCohort": "LowerPriority",
        "withinTeamQuota": "LowerOrNewerEqualPriority",
        "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": threshold},
    }
    assert objects.team_quota(tq({"preemption": spec})).preemption == Preemption(
        reclaim_within_cohort=ReclaimPolicy.LOWER_PRIORITY,
        within_team_quota=WithinPolicy.LOWER_OR_NEWER_EQUAL_PRIORITY,
        borrow_within_cohort=BorrowPolicy.LOWER_PRIORITY,
        borrow_max_priority=threshold,
    )


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"reclaimWithinCohort": "Always"}, id="unknown-reclaim"),
        pytest.param({"withinClusterQueue": "LowerPriority"}, id="kueue-field-name"),
        pytest.param({"borrowWithinCohort": {"maxPriorityThreshold": 1}}, id="threshold-no-policy"),
        pytest.param({"borrowWithinCohort": {"policy": "LowerPriority"}}, id="borrow-no-reclaim"),
    ],
)
def test_invalid_preemption_is_an_input_error(spec: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        objects.team_quota(tq({"preemption": spec}))


def test_preemption_is_hashable_and_frozen() -> None:
    preemption = Preemption(borrow_max_priority=3)
    assert hash(preemption) == hash(Preemption(borrow_max_priority=3))
    with pytest.raises(AttributeError):
        preemption.borrow_max_priority = 4  # type: ignore[misc]
