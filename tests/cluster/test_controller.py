"""The controller on the real local control plane, as a subprocess, end to end.

Each test pins its Jobs to a few H100 nodes (required node affinity on the
hostname) and uses its own TeamQuotas and Queues, so tests do not depend on
each other's leftovers.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queue_controller.journal import read_history
from queue_controller.kube.resources import FIELD_MANAGER
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
    table,
)

pytestmark = pytest.mark.cluster

# -- the tests ------------------------------------------------------------------


def test_a_queued_job_is_held_admitted_placed_run_finished_and_released(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    journal_url: str,
) -> None:
    team = objects.team_quota(8)
    objects.queue("train", team)
    created = create(
        cluster,
        namespace,
        job("gang", queue="train", gpus=2, pods=2, nodes=h100(0, 1, 2), runs_for="6s"),
    )
    # The webhook held it: created without suspend, it was stored suspended.
    assert created["spec"]["suspend"] is True
    group = eventually(lambda: objects.phase("gang", "Admitted", "Running"), what="admission")
    assert group["spec"]["minMember"] == 2
    assert group["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    placement = group["status"]["placement"]
    assert sum(placement.values()) == 2
    on_nodes = eventually(
        lambda: (c := running_on(cluster, namespace, "gang")) and sum(c.values()) == 2 and c,
        what="both members running",
    )
    assert dict(on_nodes) == placement, "members must run exactly where the core planned them"
    for pod in pods_of(cluster, namespace, "gang"):
        assert pod.spec.node_selector["kubernetes.io/hostname"] == pod.spec.node_name
        assert not pod.spec.scheduling_gates
    eventually(lambda: objects.phase("gang", "Running"), what="phase Running")
    quota = lambda: objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", team)  # noqa: E731
    eventually(
        lambda: quota().get("status", {}).get("used", {}).get(GPU) == "4", what="quota in use"
    )
    eventually(lambda: objects.phase("gang", "Finished"), what="the Job to finish")
    eventually(
        lambda: quota().get("status", {}).get("used", {}).get(GPU) == "0", what="quota released"
    )
    events = {
        e.reason
        for e in cluster.core.list_namespaced_event(namespace).items
        if e.involved_object.name == "gang"
    }
    assert {"Admitted", "PodsReady", "Finished"} <= events
    history = eventually(
        lambda: (
            [
                e.event.value
                for e in read_history(journal_url, namespace=namespace)
                if e.name == "gang"
            ]
            if any(
                e.event.value == "Finished" for e in read_history(journal_url, namespace=namespace)
            )
            else None
        ),
        what="the journal",
    )
    assert history == ["Admitted", "Finished"]


def test_kueue_label_is_queued_too(cluster: Cluster, namespace: str, objects: Objects) -> None:
    objects.queue("train", objects.team_quota(4))
    created = create(
        cluster,
        namespace,
        job(
            "kueue-style",
            queue="train",
            gpus=1,
            pods=1,
            nodes=h100(3),
            label="kueue.x-k8s.io/queue-name",
        ),
    )
    assert created["spec"]["suspend"] is True
    eventually(lambda: objects.phase("kueue-style", "Running"), what="admission")


def test_fragmentation_trap_stays_suspended_while_a_fitting_job_is_admitted(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    nodes = h100(4, 5, 6, 7)
    for node in nodes:
        filler(cluster, namespace, node, 5)  # 12 GPUs free in all, 3 per node
    objects.queue("train", objects.team_quota(64))
    create(cluster, namespace, job("wide", queue="train", gpus=4, pods=2, nodes=nodes))
    create(cluster, namespace, job("narrow", queue="train", gpus=3, pods=1, nodes=nodes))
    eventually(lambda: objects.phase("narrow", "Running"), what="the fitting Job to run")
    # 12 GPUs were free, 3 per node; narrow took 3 of them.  Wide still cannot place one member.
    scattered = "9 nvidia.com/gpu free on eligible nodes but at most 3 on any one node"
    waiting = eventually(
        lambda: (
            (g := objects.phase("wide", "Pending"))
            and scattered in g["status"].get("message", "")
            and g
        ),
        what="the fragmentation to be explained",
    )
    assert waiting["status"]["reason"] == "NoNodeFit"
    message = waiting["status"]["message"]
    assert message.startswith("0 of 2 members fit at once")
    assert "binding constraint: Insufficient nvidia.com/gpu (4 nodes)" in message
    wide = client.BatchV1Api(cluster.api).read_namespaced_job("wide", namespace)
    assert wide.spec.suspend is True
    assert pods_of(cluster, namespace, "wide") == []


def test_quota_limit_and_borrowing_within_a_cohort(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    cohort = f"c-{secrets.token_hex(3)}"
    mine = objects.team_quota(4, cohort=cohort, borrowing=4)
    objects.team_quota(8, cohort=cohort, lending=2)  # lends at most 2
    objects.queue("train", mine)
    nodes = h100(0, 1)
    create(cluster, namespace, job("own", queue="train", gpus=4, pods=1, nodes=nodes))
    eventually(lambda: objects.phase("own", "Running"), what="within nominal")
    create(cluster, namespace, job("borrow", queue="train", gpus=2, pods=1, nodes=nodes))
    admitted = eventually(lambda: objects.phase("borrow", "Admitted", "Running"), what="borrowing")
    said = f"borrowing 2 nvidia.com/gpu from cohort {cohort}"
    assert said in admitted["status"].get("message", "") or any(
        said in (c.get("message") or "") for c in admitted["status"]["conditions"]
    )
    create(cluster, namespace, job("over", queue="train", gpus=1, pods=1, nodes=nodes))
    over = eventually(
        lambda: (g := objects.phase("over", "Pending")) and g["status"].get("reason") and g,
        what="the quota to refuse",
    )
    assert over["status"]["reason"] == "QuotaExceeded"
    assert "only 0 available" in over["status"]["message"]
    quota = objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", mine)
    eventually(
        lambda: (
            objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", mine)
            .get("status", {})
            .get("borrowed", {})
            .get(GPU)
            == "2"
        ),
        what="borrowed in status",
    )
    assert quota["spec"]["resources"][GPU]["nominal"] == 4
    assert (
        controller.metric(
            "queue_controller_pending_gangs", queue=f"{namespace}/train", reason="QuotaExceeded"
        )
        == 1
    )


@pytest.mark.parametrize(
    ("ordering", "small_admitted"), [("StrictFIFO", False), ("BestEffortFIFO", True)]
)
def test_strict_fifo_holds_the_queue_behind_its_head(
    cluster: Cluster, namespace: str, objects: Objects, ordering: str, small_admitted: bool
) -> None:
    objects.queue("q", objects.team_quota(64), ordering=ordering)
    create(cluster, namespace, job("head", queue="q", gpus=8, pods=3, nodes=h100(2, 3)))
    time.sleep(1.1)  # creation times order the queue
    create(cluster, namespace, job("small", queue="q", gpus=1, pods=1, nodes=h100(2, 3)))
    head = eventually(
        lambda: (g := objects.phase("head", "Pending")) and g["status"].get("reason") and g,
        what="the head to wait",
    )
    assert head["status"]["reason"] == "NoNodeFit"
    if small_admitted:
        eventually(lambda: objects.phase("small", "Running"), what="the small Job to pass the head")
    else:
        small = eventually(
            lambda: (g := objects.phase("small", "Pending")) and g["status"].get("reason") and g,
            what="the small Job to wait",
        )
        assert small["status"]["reason"] == "WaitingForHead"
        assert f"{namespace}/head" in small["status"]["message"]


def test_partial_placement_is_evicted_requeued_and_admitted_elsewhere(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    journal_url: str,
) -> None:
    objects.queue("q", objects.team_quota(64), timeout=5)
    nodes = h100(4, 5, 6)
    create(
        cluster, namespace, job("fragile", queue="q", gpus=8, pods=2, nodes=nodes, backoff_limit=4)
    )
    first = eventually(lambda: objects.phase("fragile", "Running"), what="the gang to run")
    victim = sorted(first["status"]["placement"])[0]
    cluster.core.patch_node(
        victim, {"spec": {"taints": [{"key": "chaos", "value": "true", "effect": "NoExecute"}]}}
    )
    try:
        started = time.monotonic()
        evicted = eventually(
            lambda: (
                (g := objects.pod_group("fragile"))
                and g["status"].get("requeueCount", 0) >= 1
                and g
            ),
            timeout=5 + 20,
            what="the eviction",
        )
        # Within the timeout plus a cycle or so of the member going.
        assert time.monotonic() - started < 5 + 15
        assert (
            evicted["status"]["reason"] in ("MembersLost", "Requeued")
            or evicted["status"]["phase"] != "Running"
        )
        again = eventually(
            lambda: (
                (g := objects.phase("fragile", "Running"))
                and g["status"].get("requeueCount") == 1
                and g
            ),
            timeout=45,
            what="re-admission elsewhere",
        )
        assert victim not in again["status"]["placement"]
        assert sum(again["status"]["placement"].values()) == 2
        reasons = [
            (e.event.value, e.reason) for e in read_history(journal_url, namespace=namespace)
        ]
        assert ("Evicted", "MembersLost") in reasons
        assert ("Requeued", "Backoff") in reasons
        assert reasons.count(("Admitted", "Admitted")) == 2
        assert (
            controller.metric(
                "queue_controller_evicted_gangs_total", queue=f"{namespace}/q", reason="MembersLost"
            )
            == 1
        )
        assert (
            controller.metric("queue_controller_requeued_gangs_total", queue=f"{namespace}/q") == 1
        )
    finally:
        cluster.core.patch_node(victim, {"spec": {"taints": None}})


def test_gang_that_never_runs_whole_is_evicted_after_its_timeout_then_deactivated(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    """A node that accepts pods but never runs them: the gang sits partly placed."""
    hole = f"blackhole-{secrets.token_hex(2)}"
    cluster.core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": hole,
                "labels": {"kubernetes.io/hostname": hole},
            },  # no kwok: no kubelet
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"},
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "Test"}],
            },
        }
    )
    try:
        objects.queue("q", objects.team_quota(64), timeout=4, backoff_limit=0)
        create(cluster, namespace, job("stuck", queue="q", gpus=8, pods=1, nodes=[hole]))
        failed = eventually(
            lambda: objects.phase("stuck", "Failed"), timeout=40, what="deactivation"
        )
        evicted = next(c for c in failed["status"]["conditions"] if c["type"] == "Evicted")
        assert evicted["reason"] == "PodsReadyTimeout"
        assert failed["status"]["requeueCount"] == 1
        eventually(
            lambda: pods_of(cluster, namespace, "stuck") == [] or None, what="its pods to go"
        )
        assert (
            client.BatchV1Api(cluster.api).read_namespaced_job("stuck", namespace).spec.suspend
            is True
        )
        events = {
            e.reason
            for e in cluster.core.list_namespaced_event(namespace).items
            if e.involved_object.name == "stuck"
        }
        assert {"Evicted", "Deactivated"} <= events
    finally:
        cluster.core.delete_node(hole)


def test_restart_mid_admission_resumes_without_admitting_twice(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    journal_url: str,
) -> None:
    objects.queue("q", objects.team_quota(64))
    controller.kill()  # as if it crashed
    try:
        # The crash came between the two writes of an admission: the PodGroup says
        # Admitted with its placement, written by the controller's field manager (another
        # writer's Admitted admits nothing: test_user_rbac.py), the Job is still suspended.
        create(
            cluster,
            namespace,
            job("mid", queue="q", gpus=4, pods=2, nodes=h100(0, 1, 2), suspend=True),
        )
        uid = client.BatchV1Api(cluster.api).read_namespaced_job("mid", namespace).metadata.uid
        objects.api.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "podgroups",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "PodGroup",
                "metadata": {
                    "name": "mid",
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": "mid",
                            "uid": uid,
                            "controller": True,
                        }
                    ],
                },
                "spec": {"queue": "q", "minMember": 2},
            },
        )
        objects.api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            "podgroups",
            "mid",
            {
                "status": {
                    "phase": "Admitted",
                    "placement": {"h100-0002": 2},
                    "admittedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            },
            field_manager=FIELD_MANAGER,
        )
        # And a queued Job created while no controller (and no webhook) was there: it ran.
        unheld = job("unheld", queue="q", gpus=1, pods=1, nodes=h100(3))
        created = create(cluster, namespace, unheld)
        assert created["spec"].get("suspend") in (None, False)
    finally:
        controller.start()
    running = eventually(lambda: objects.phase("mid", "Running"), what="the interrupted admission")
    assert running["status"]["placement"] == {"h100-0002": 2}, "placement must not be re-planned"
    assert dict(running_on(cluster, namespace, "mid")) == {"h100-0002": 2}
    assert len(pods_of(cluster, namespace, "mid")) == 2
    eventually(
        lambda: objects.phase("unheld", "Running"), what="the unheld Job, suspended then admitted"
    )
    events = {
        e.reason
        for e in cluster.core.list_namespaced_event(namespace).items
        if e.involved_object.name == "unheld"
    }
    assert "Suspended" in events
    admissions = [
        e
        for e in read_history(journal_url, namespace=namespace)
        if e.event.value == "Admitted" and e.name == "mid"
    ]
    assert admissions == [], "the resumed admission was made before the restart, not again"
    controller.stop()
    controller.start()
    time.sleep(3)
    after = objects.pod_group("mid")
    assert after is not None
    assert after["status"]["admittedAt"] == running["status"]["admittedAt"]
    assert len(pods_of(cluster, namespace, "mid")) == 2


def test_only_the_leader_admits_and_a_standby_takes_over(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    journal_url: str,
    tmp_path: Path,
) -> None:
    standby = ControllerProcess(
        kubeconfig=cluster.kubeconfig,
        journal=journal_url,
        logs=tmp_path,
        identity="qc-b",
        webhook="off",
    )
    standby.start(expect_leader=False)
    try:
        ready = standby.readyz()
        assert ready is not None
        assert ready["leader"] is False
        objects.queue("q", objects.team_quota(64))
        create(cluster, namespace, job("first", queue="q", gpus=1, pods=1, nodes=h100(5)))
        eventually(lambda: objects.phase("first", "Running"), what="admission by the leader")
        assert standby.metric("queue_controller_admitted_gangs_total", queue=f"{namespace}/q") == 0
        assert (
            controller.metric("queue_controller_admitted_gangs_total", queue=f"{namespace}/q") == 1
        )
        controller.kill()
        eventually(lambda: (r := standby.readyz()) and r.get("leader"), timeout=20, what="failover")
        # No webhook now (the standby serves none): created suspended, as a client should.
        create(
            cluster,
            namespace,
            job("second", queue="q", gpus=1, pods=1, nodes=h100(5), suspend=True),
        )
        eventually(lambda: objects.phase("second", "Running"), what="admission by the new leader")
        assert standby.metric("queue_controller_admitted_gangs_total", queue=f"{namespace}/q") == 1
    finally:
        standby.stop()
        controller.start()


def test_specs_the_core_refuses_are_invalid_with_an_explanation(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    objects.queue("q", objects.team_quota(8))
    create(
        cluster,
        namespace,
        job(
            "no-class", queue="q", gpus=1, pods=1, nodes=h100(6), priorityClassName="does-not-exist"
        ),
    )
    too_many = job("too-many", queue="q", gpus=1, pods=2, nodes=h100(6))
    too_many["metadata"]["annotations"] = {"queue-controller.io/min-member": "3"}
    create(cluster, namespace, too_many)
    for name, words in (
        ("no-class", "PriorityClass 'does-not-exist' does not exist"),
        (
            "too-many",
            "metadata.annotations[queue-controller.io/min-member]: 3 members, "
            "but the Job runs only 2 pods at once (spec.parallelism)",
        ),
    ):
        group = eventually(
            lambda n=name: (g := objects.pod_group(n)) and g.get("status", {}).get("reason") and g,
            what=f"{name} to be judged",
        )
        assert group["status"]["reason"] == "InvalidSpec"
        assert words in group["status"]["message"]


def test_gpu_requests_without_limits_are_refused_before_they_reach_us(
    cluster: Cluster, namespace: str
) -> None:
    """kube-apiserver enforces the extended-resource rules on a Job's template itself."""
    bad = job("no-limits", queue="q", gpus=1, pods=1, nodes=h100(0))
    bad["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {GPU: "2"}}
    with pytest.raises(ApiException) as refused:
        create(cluster, namespace, bad)
    assert refused.value.status == 422
    assert (
        "Limit must be set for non overcommitable resources"
        in json.loads(refused.value.body)["message"]
    )


def test_kubectl_tells_the_story_and_metrics_answer(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    team = objects.team_quota(8)
    objects.queue("q", team)
    create(cluster, namespace, job("shown", queue="q", gpus=2, pods=2, nodes=h100(7)))
    create(cluster, namespace, job("waits", queue="q", gpus=8, pods=2, nodes=h100(7)))
    eventually(lambda: objects.phase("shown", "Running"), what="admission")
    eventually(
        lambda: (g := objects.pod_group("waits")) and g.get("status", {}).get("reason"),
        what="reason",
    )
    groups = table(cluster.kubectl("get", "pg", "-n", namespace))
    assert list(groups[0])[:6] == ["NAME", "QUEUE", "PHASE", "MINMEMBER", "RUNNING", "REQUEUES"]
    shown = next(r for r in groups if r["NAME"] == "shown")
    waits = next(r for r in groups if r["NAME"] == "waits")
    assert (shown["QUEUE"], shown["PHASE"], shown["MINMEMBER"], shown["RUNNING"]) == (
        "q",
        "Running",
        "2",
        "2",
    )
    assert (waits["PHASE"], waits["REASON"]) == ("Pending", "QuotaExceeded")
    eventually(
        lambda: (
            (r := table(cluster.kubectl("get", "qq", "q", "-n", namespace))[0])
            and (r["TEAMQUOTA"], r["PENDING"], r["ADMITTED"], r["RUNNING"]) == (team, "1", "0", "1")
        ),
        what="queue counts",
    )
    eventually(
        lambda: (
            (r := table(cluster.kubectl("get", "tq", team))[0])
            and (r["COHORT"], r["GPU NOMINAL"], r["GPU USED"], r["PENDING"]) == ("", "8", "4", "1")
        ),
        what="team quota columns",
    )
    metrics = controller.metrics()
    assert f'queue_controller_admitted_gangs_total{{queue="{namespace}/q"}} 1.0' in metrics
    assert (
        f'queue_controller_quota_used{{resource="nvidia.com/gpu",team_quota="{team}"}} 4.0'
        in metrics
    )
    assert (
        f'queue_controller_quota_nominal{{resource="nvidia.com/gpu",team_quota="{team}"}} 8.0'
        in metrics
    )
    assert "queue_controller_scheduling_cycle_seconds_count" in metrics
    assert "queue_controller_partially_placed_gangs 0.0" in metrics
    assert controller.metric("queue_controller_leader") == 1
    assert controller.metric("queue_controller_journal_up") == 1
    healthy = controller._get("/healthz")
    assert healthy == (200, "ok\n")
