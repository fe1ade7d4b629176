"""Reclaim on the real control plane: a lender gets its lent nominal back by preemption.

The borrower's gangs hold the lender's GPUs; the lender's gang, within its nominal,
evicts exactly the gangs on the node it needs, holds the room while they go, binds
there, and the borrower's gangs are requeued at once and come back when it is done.

Within a TeamQuota, by priority: a high-priority gang evicts the newest low-priority
gang whole and binds on the room it freed; and a controller restarted while a victim's
member still terminates (a finalizer holds it) keeps the preemptor's nominated room
from other gangs until the preemptor is bound there.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from queue_controller.journal import read_history
from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import (
    GPU,
    GROUP,
    VERSION,
    Objects,
    create,
    eventually,
    filler,
    h100,
    job,
    pods_of,
    running_on,
)

pytestmark = pytest.mark.cluster


def team_quota(objects: Objects, name: str, cohort: str, nominal: int, **spec: Any) -> str:
    objects.api.create_cluster_custom_object(
        GROUP,
        VERSION,
        "teamquotas",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TeamQuota",
            "metadata": {"name": name},
            "spec": {"cohort": cohort, "resources": {GPU: {"nominal": nominal}}, **spec},
        },
    )
    objects.quotas.append(name)
    return name


def condition(group: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in group["status"].get("conditions", []) if c["type"] == kind), None)


def test_a_lender_reclaims_its_nominal_from_a_borrower(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    cohort = f"c-{secrets.token_hex(3)}"
    lender = team_quota(
        objects,
        f"lender-{secrets.token_hex(3)}",
        cohort,
        8,
        preemption={"reclaimWithinCohort": "Any"},
    )
    borrower = team_quota(objects, f"borrower-{secrets.token_hex(3)}", cohort, 0)
    objects.queue("own", lender)
    objects.queue("more", borrower)
    node = h100(5)
    for name in ("b-old", "b-new"):
        create(cluster, namespace, job(name, queue="more", gpus=4, pods=1, nodes=node))
        eventually(lambda name=name: objects.phase(name, "Running"), what=f"{name} borrowing")
    create(
        cluster,
        namespace,
        job("lend", queue="own", gpus=8, pods=1, nodes=node, runs_for="10s"),
    )
    # The lender's gang preempts both (it needs the whole node), holds the room,
    # and runs there once they are gone.
    running = eventually(
        lambda: objects.phase("lend", "Running"), timeout=90, what="the lender's gang running"
    )
    assert running["status"]["placement"] == {node[0]: 1}
    assert not running["status"].get("nominatedPlacement"), "the held room became its placement"
    assert dict(running_on(cluster, namespace, "lend")) == {node[0]: 1}
    for name in ("b-old", "b-new"):
        group = objects.pod_group(name)
        assert group is not None
        evicted = condition(group, "Evicted")
        assert evicted is not None
        assert evicted["reason"] == "Preempted"
        assert f"preempted by Job {namespace}/lend (ReclaimWithinCohort)" in evicted["message"]
        # No fault of the borrower's: its requeue count is not raised.
        assert group["status"].get("requeueCount", 0) == 0
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=lend"
    )
    assert "Preempting" in events
    assert (
        controller.metric(
            "queue_controller_preemptions_total",
            queue=f"{namespace}/more",
            reason="ReclaimWithinCohort",
        )
        == 2
    )
    # When the lender's gang is done, the borrower's gangs are readmitted.
    eventually(lambda: objects.phase("lend", "Finished"), timeout=60, what="the lender done")
    for name in ("b-old", "b-new"):
        eventually(
            lambda name=name: objects.phase(name, "Running"),
            timeout=60,
            what=f"{name} readmitted",
        )


# -- within a TeamQuota, by priority -------------------------------------------------------

LINGER = "queue-controller.io/test-linger"  # keeps a victim's pod terminating until removed


@pytest.fixture
def priorities(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """A low and a high PriorityClass of this test's own (kube-scheduler preempts nothing)."""
    api = client.SchedulingV1Api(cluster.api)
    suffix = secrets.token_hex(3)
    names = (f"low-{suffix}", f"high-{suffix}")
    for name, value in zip(names, (10, 1000), strict=True):
        api.create_priority_class(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "preemptionPolicy": "Never",
            }
        )
    yield names
    for name in names:
        api.delete_priority_class(name)


def preempting_quota(objects: Objects, nominal: int) -> str:
    return team_quota(
        objects,
        f"team-{secrets.token_hex(3)}",
        "",
        nominal,
        preemption={"withinTeamQuota": "LowerPriority"},
    )


def test_a_high_priority_gang_preempts_the_newest_low_one_within_its_team(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    journal_url: str,
    priorities: tuple[str, str],
) -> None:
    low, high = priorities
    objects.queue("q", preempting_quota(objects, 8))
    node = h100(6)
    # The quota, and the node, full of low-priority gangs of two members each.
    for name in ("low-old", "low-new"):
        create(
            cluster,
            namespace,
            job(name, queue="q", gpus=2, pods=2, nodes=node, priorityClassName=low),
        )
        eventually(lambda name=name: objects.phase(name, "Running"), what=f"{name} running")
    create(
        cluster,
        namespace,
        job("urgent", queue="q", gpus=2, pods=2, nodes=node, priorityClassName=high),
    )
    running = eventually(
        lambda: objects.phase("urgent", "Running"), timeout=90, what="the high-priority gang"
    )
    assert running["status"]["placement"] == {node[0]: 2}
    assert not running["status"].get("nominatedPlacement")
    assert not running["status"].get("nominatedAt")
    assert dict(running_on(cluster, namespace, "urgent")) == {node[0]: 2}
    # The newest low gang was evicted whole and waits again; the older one runs on.
    victim = eventually(
        lambda: objects.phase("low-new", "Pending"), timeout=30, what="the victim requeued"
    )
    evicted = condition(victim, "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "Preempted"
    assert evicted["message"] == f"preempted by Job {namespace}/urgent (WithinTeamQuota)"
    assert victim["status"].get("requeueCount", 0) == 0
    assert not pods_of(cluster, namespace, "low-new")
    survivor = objects.phase("low-old", "Running")
    assert survivor is not None
    assert condition(survivor, "Evicted") is None
    assert dict(running_on(cluster, namespace, "low-old")) == {node[0]: 2}
    # Who preempted whom: the journal, and the metrics.
    history = read_history(journal_url, namespace=namespace)
    evictions = [(e.name, e.reason, e.message) for e in history if e.event.value == "Evicted"]
    assert evictions == [
        ("low-new", "Preempted", f"preempted by Job {namespace}/urgent (WithinTeamQuota)")
    ]
    preempting = [e for e in history if e.name == "urgent" and e.reason == "Preempting"]
    assert preempting
    assert f"({namespace}/low-new)" in preempting[0].message
    queue = f"{namespace}/q"
    assert (
        controller.metric(
            "queue_controller_preemptions_total", queue=queue, reason="WithinTeamQuota"
        )
        == 1
    )
    assert controller.metric("queue_controller_reclaim_seconds_count", queue=queue) == 1


def linger(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"]["template"]["metadata"]["finalizers"] = [LINGER]
    return body


def release_lingering(cluster: Cluster, namespace: str) -> None:
    for p in cluster.core.list_namespaced_pod(namespace).items:
        held = p.metadata.finalizers or []
        if LINGER in held:
            cluster.core.patch_namespaced_pod(
                p.metadata.name,
                namespace,
                [
                    {
                        "op": "replace",
                        "path": "/metadata/finalizers",
                        "value": [f for f in held if f != LINGER],
                    }
                ],
            )


def test_a_restart_while_the_victims_terminate_keeps_the_nominated_room(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    priorities: tuple[str, str],
) -> None:
    low, high = priorities
    objects.queue("q", preempting_quota(objects, 8))
    objects.queue("other", objects.team_quota(8))
    room, full = h100(4)[0], h100(5)[0]
    queue = f"{namespace}/q"
    try:
        # The other node has 4 GPUs left: too few for the high gang, which must preempt.
        filler(cluster, namespace, full, 4)
        create(
            cluster,
            namespace,
            linger(job("low", queue="q", gpus=4, pods=1, nodes=[room], priorityClassName=low)),
        )
        eventually(lambda: objects.phase("low", "Running"), what="the low gang running")
        assert all(
            LINGER in (p.metadata.finalizers or []) for p in pods_of(cluster, namespace, "low")
        )
        create(
            cluster,
            namespace,
            job("high", queue="q", gpus=8, pods=1, nodes=[room, full], priorityClassName=high),
        )
        held = eventually(
            lambda: (
                (g := objects.phase("high", "Pending"))
                and g["status"].get("nominatedPlacement")
                and g
            ),
            timeout=60,
            what="the high gang holding room",
        )
        nominated = held["status"]["nominatedPlacement"]
        nominated_at = held["status"]["nominatedAt"]
        assert nominated == {"main": {room: 1}}
        assert held["status"]["reason"] == "Preempting"
        eventually(
            lambda: objects.phase("low", "Evicted", "Pending"), what="the low gang preempted"
        )

        # Its member lingers, terminating, on the room: the high gang waits.
        def terminating() -> list[Any]:
            found = cluster.core.list_namespaced_pod(
                namespace, label_selector="batch.kubernetes.io/job-name=low"
            ).items
            return [p for p in found if p.metadata.deletion_timestamp is not None]

        eventually(terminating, what="the victim's member terminating")
        eventually(
            lambda: (
                controller.metric(
                    "queue_controller_nominated_accelerators", queue=queue, resource=GPU
                )
                == 8
            ),
            what="the nominated room's gauge",
        )

        controller.stop()
        controller.start()
        # A smaller gang, of another quota, that the room's node has the GPUs for right
        # now (4 free beside the lingering member), does not take the room; nor does the
        # victim, requeued.  (The small gang is tried before the victim, by priority.)
        create(
            cluster,
            namespace,
            job("small", queue="other", gpus=4, pods=1, nodes=[room], priorityClassName=high),
        )
        eventually(
            lambda: (g := objects.phase("small", "Pending")) and g["status"].get("reason"),
            what="the small gang's reason",
        )
        time.sleep(5)  # several cycles of the new controller
        small = objects.pod_group("small")
        assert small is not None
        assert small["status"]["phase"] == "Pending"
        assert small["status"]["reason"] == "NoNodeFit"
        assert not pods_of(cluster, namespace, "small")
        assert objects.phase("low", "Pending") is not None, "the victim does not take it back"
        still = objects.phase("high", "Pending")
        assert still is not None
        assert still["status"]["nominatedPlacement"] == nominated
        assert still["status"]["nominatedAt"] == nominated_at
        assert not pods_of(cluster, namespace, "high")
        assert (
            controller.metric("queue_controller_nominated_accelerators", queue=queue, resource=GPU)
            == 8
        )
        assert controller.metric("queue_controller_reclaim_seconds_count", queue=queue) == 0

        # The victim's member goes: the high gang binds exactly on its nominated room.
        release_lingering(cluster, namespace)
        running = eventually(
            lambda: objects.phase("high", "Running"), timeout=60, what="the high gang running"
        )
        assert running["status"]["placement"] == {room: 1}
        assert not running["status"].get("nominatedPlacement")
        assert dict(running_on(cluster, namespace, "high")) == {room: 1}
        assert objects.phase("small", "Pending") is not None, "the node is full now"
        assert eventually(lambda: objects.phase("low", "Pending"), what="the victim requeued")
        assert controller.metric("queue_controller_reclaim_seconds_count", queue=queue) == 1
        waited = controller.metric("queue_controller_reclaim_seconds_sum", queue=queue)
        assert waited >= 5, "counted from the nomination before the restart"
        assert (
            controller.metric("queue_controller_nominated_accelerators", queue=queue, resource=GPU)
            == 0
        )
    finally:
        release_lingering(cluster, namespace)
        if controller.process is None:
            controller.start()
