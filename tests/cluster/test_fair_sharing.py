"""Fair sharing on the real control plane: two borrowing teams end with equal shares.

Team a borrows all that the lender lends; once team b asks, b's gangs preempt a's
newest, by their shares, until the two teams borrow alike, and no further: a's
evicted gangs wait, and nobody preempts back.
"""

from __future__ import annotations

import secrets
import time

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.test_preemption import condition, team_quota
from tests.cluster.workloads import GROUP, VERSION, Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster


@pytest.fixture
def fair_cohort(objects: Objects) -> str:
    return objects.cohort("fair", fairSharing={"enabled": True})


def weighted_share(objects: Objects, quota: str) -> int | None:
    found = objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", quota)
    share = found.get("status", {}).get("fairSharing", {}).get("weightedShare")
    return share if isinstance(share, int) else None


def test_fair_sharing_equalises_two_borrowing_teams(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    fair_cohort: str,
) -> None:
    suffix = secrets.token_hex(3)
    team_quota(objects, f"lender-{suffix}", fair_cohort, 16)
    reclaim = {"preemption": {"reclaimWithinCohort": "Any"}}
    a = team_quota(objects, f"a-{suffix}", fair_cohort, 0, **reclaim)
    b = team_quota(objects, f"b-{suffix}", fair_cohort, 0, **reclaim)
    objects.queue("qa", a)
    objects.queue("qb", b)
    nodes = h100(6, 7)
    for i in range(4):
        create(cluster, namespace, job(f"a{i}", queue="qa", gpus=4, pods=1, nodes=nodes))
        eventually(lambda i=i: objects.phase(f"a{i}", "Running"), what=f"a{i} borrowing")
    # a borrows all 16 the cohort lends: weighted share 1000.
    eventually(lambda: weighted_share(objects, a) == 1000, what="a's share at 1000")
    for i in range(2):
        create(cluster, namespace, job(f"b{i}", queue="qb", gpus=4, pods=1, nodes=nodes))
    for i in range(2):
        eventually(lambda i=i: objects.phase(f"b{i}", "Running"), timeout=90, what=f"b{i} running")
    # Each team now borrows 8 of the 16: 500 each.
    eventually(
        lambda: weighted_share(objects, a) == weighted_share(objects, b) == 500,
        what="equal shares",
    )
    running = [f"a{i}" for i in range(4) if objects.phase(f"a{i}", "Running", "Admitted")]
    # Two of a's gangs give way: the newest by creation time, which has whole seconds,
    # so two created in the same second are told apart by name.
    assert len(running) == 2
    evicted = sorted({f"a{i}" for i in range(4)} - set(running))
    for name in evicted:
        group = objects.pod_group(name)
        assert group is not None
        condition_evicted = condition(group, "Evicted")
        assert condition_evicted is not None
        assert condition_evicted["reason"] == "Preempted"
        assert "(FairSharing)" in condition_evicted["message"]
    assert (
        controller.metric(
            "queue_controller_preemptions_total", queue=f"{namespace}/qa", reason="FairSharing"
        )
        == 2
    )
    # Settled: a's evicted gangs wait, and nobody preempts back.
    time.sleep(5)
    for name in evicted:
        assert objects.phase(name, "Pending"), f"{name} waits while the shares are equal"
    for name in (*running, "b0", "b1"):
        assert objects.phase(name, "Running"), f"{name} keeps running"
