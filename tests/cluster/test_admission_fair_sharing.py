"""Admission fair sharing on the real control plane: two Queues of one TeamQuota, one
submitting ten times the other, are admitted in turn by decayed usage, and still are
after the controller restarts, because the usage is kept in each Queue's status.

The TeamQuota has 2 GPUs; every gang wants 1 and runs until it is deleted, so a test
frees one slot at a time.  Queue heavy takes both slots first, and its decayed usage
grows; light's newer gang then takes the first slot freed, ahead of heavy's older
ones.  Across a restart the ordering holds only if the usage is read back from status:
with it forgotten both Queues would start from nothing and heavy's older gang would go.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.test_preemption import team_quota
from tests.cluster.workloads import GPU, GROUP, VERSION, Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster

NODES = h100(2, 3)
HEAVY_GANGS = 20
LIGHT_GANGS = 2  # a tenth of heavy's


def afs_status(objects: Objects, queue: str) -> dict[str, Any]:
    found = objects.api.get_namespaced_custom_object(
        GROUP, VERSION, objects.namespace, "queues", queue
    )
    fair = found.get("status", {}).get("fairSharing", {})
    status: dict[str, Any] = fair.get("admissionFairSharingStatus", {})
    return status


def consumed(objects: Objects, queue: str) -> float:
    amount = afs_status(objects, queue).get("consumedResources", {}).get(GPU, "0")
    text = str(amount)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def running(objects: Objects, name: str) -> bool:
    return objects.phase(name, "Admitted", "Running") is not None


def delete(cluster: Cluster, namespace: str, name: str) -> None:
    client.BatchV1Api(cluster.api).delete_namespaced_job(
        name, namespace, propagation_policy="Background"
    )


def still_pending(objects: Objects, names: list[str]) -> list[str]:
    return [name for name in names if objects.phase(name, "Pending") is not None]


def test_two_queues_take_turns_by_decayed_usage_across_a_restart(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    # A short half-life and a one-second interval, so that usage moves within a test.
    afs = {"usageHalfLifeSeconds": 20, "usageSamplingIntervalSeconds": 1}
    quota = team_quota(objects, f"afs-{secrets.token_hex(3)}", "", 2, admissionFairSharing=afs)
    objects.queue("heavy", quota)
    objects.queue("light", quota)
    heavy = [f"h{i}" for i in range(HEAVY_GANGS)]
    for name in heavy:
        create(cluster, namespace, job(name, queue="heavy", gpus=1, pods=1, nodes=NODES))
    eventually(lambda: running(objects, "h0") and running(objects, "h1"), what="heavy admitted")
    # heavy's decayed usage grows towards its 2 GPUs; light's stays at nothing.
    eventually(lambda: consumed(objects, "heavy") >= 0.4, timeout=30, what="heavy's usage")
    assert consumed(objects, "light") == 0
    assert afs_status(objects, "light").get("lastUpdate"), "light is sampled too"
    waiting = still_pending(objects, heavy)
    assert len(waiting) == HEAVY_GANGS - 2

    # light's gang is the newest, yet takes the slot that heavy's first gang frees.
    create(cluster, namespace, job("l0", queue="light", gpus=1, pods=1, nodes=NODES))
    time.sleep(2)  # seen and waiting, behind no free slot
    assert not running(objects, "l0")
    delete(cluster, namespace, "h0")
    eventually(lambda: running(objects, "l0"), what="light's gang admitted first")
    assert still_pending(objects, waiting) == waiting, "heavy's older gangs waited"
    assert controller.metric(
        "queue_controller_queue_admission_fair_sharing_usage", queue=f"{namespace}/heavy"
    ) > controller.metric(
        "queue_controller_queue_admission_fair_sharing_usage", queue=f"{namespace}/light"
    )

    # A restart: the usage comes back from the Queues' status, not from nothing.
    controller.stop()
    try:
        before = consumed(objects, "heavy")  # as the stopped controller last wrote it
        assert before > 0
        create(cluster, namespace, job("l1", queue="light", gpus=1, pods=1, nodes=NODES))
    finally:
        controller.start()
    time.sleep(2)
    assert not running(objects, "l1")
    assert consumed(objects, "heavy") >= before * 0.5, "usage kept, not reset"
    delete(cluster, namespace, "h1")
    eventually(lambda: running(objects, "l1"), what="light's second gang admitted first")
    assert still_pending(objects, waiting) == waiting, "heavy's older gangs waited again"
