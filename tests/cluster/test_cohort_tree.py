"""A cohort tree on the real control plane (issue 24): a lender reclaims through two levels.

org <- dept-a (the lender's TeamQuota), dept-b (the borrower's).  The borrower's two
4-GPU gangs run on the lender's nominal, lent up through dept-a and org and down
through dept-b; the lender's 8-GPU gang takes it back.  Along the way the Cohorts'
status and ``kubectl get cohorts`` show each subtree's quota and use.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.test_preemption import condition, team_quota
from tests.cluster.workloads import GROUP, VERSION, Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster
GPU = "nvidia.com/gpu"


@pytest.fixture
def tree(objects: Objects) -> dict[str, str]:
    """Cohorts org <- dept-a, dept-b, named apart for this test; deleted after it."""
    org = objects.cohort("org")
    return {
        "org": org,
        "dept-a": objects.cohort("dept-a", parentName=org),
        "dept-b": objects.cohort("dept-b", parentName=org),
    }


def cohort_status(objects: Objects, name: str) -> dict[str, Any]:
    found = objects.api.get_cluster_custom_object(GROUP, VERSION, "cohorts", name)
    status = found.get("status") or {}
    return status if isinstance(status, dict) else {}


def test_a_lender_reclaims_through_a_two_level_tree(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    tree: dict[str, str],
) -> None:
    suffix = secrets.token_hex(3)
    reclaim = {"preemption": {"reclaimWithinCohort": "Any"}}
    lender = team_quota(objects, f"lender-{suffix}", tree["dept-a"], 8, **reclaim)
    borrower = team_quota(objects, f"borrower-{suffix}", tree["dept-b"], 0)
    objects.queue("own", lender)
    objects.queue("more", borrower)
    node = h100(4)
    for name in ("b-old", "b-new"):
        create(cluster, namespace, job(name, queue="more", gpus=4, pods=1, nodes=node))
        admitted = eventually(
            lambda name=name: objects.phase(name, "Admitted", "Running"), what=f"{name} borrowing"
        )
    said = f"borrowing 4 {GPU} from cohort {tree['dept-b']}, 4 of it from cohort {tree['org']}"
    messages = [admitted["status"].get("message") or ""]
    messages += [c.get("message") or "" for c in admitted["status"].get("conditions", [])]
    assert any(said in m for m in messages), messages
    # The tree as kubectl shows it: each cohort's subtree quota and use.
    eventually(
        lambda: cohort_status(objects, tree["org"]).get("used", {}).get(GPU) == "8",
        what="org's subtree using 8",
    )
    assert cohort_status(objects, tree["org"])["subtreeQuota"] == {GPU: "8"}
    assert cohort_status(objects, tree["dept-a"])["subtreeQuota"] == {GPU: "8"}
    assert cohort_status(objects, tree["dept-b"])["used"] == {GPU: "8"}
    table = cluster.kubectl("get", "cohorts", tree["dept-b"])
    assert "PARENT" in table
    assert tree["org"] in table

    create(cluster, namespace, job("lend", queue="own", gpus=8, pods=1, nodes=node))
    running = eventually(
        lambda: objects.phase("lend", "Running"), timeout=90, what="the lender's gang running"
    )
    assert running["status"]["placement"] == {node[0]: 1}
    for name in ("b-old", "b-new"):
        group = objects.pod_group(name)
        assert group is not None
        evicted = condition(group, "Evicted")
        assert evicted is not None
        assert evicted["reason"] == "Preempted"
        assert f"preempted by Job {namespace}/lend (ReclaimWithinCohort)" in evicted["message"]
    eventually(
        lambda: cohort_status(objects, tree["dept-a"]).get("used", {}).get(GPU) == "8",
        what="dept-a's subtree using its own 8",
    )
