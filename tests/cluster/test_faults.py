"""Faults on the real control plane, each with ``check`` in the background (conftest):
the controller says what is wrong, keeps going, and loses nothing."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queue_controller.journal import read_history
from tests.cluster.conftest import ROOT, Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import GPU, GROUP, VERSION, Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster


def test_a_controller_that_cannot_hold_its_lease_says_so_and_retries(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    journal_url: str,
    tmp_path: Path,
) -> None:
    missing = f"qc-lease-{secrets.token_hex(3)}"
    lonely = ControllerProcess(
        kubeconfig=cluster.kubeconfig,
        journal=journal_url,
        logs=tmp_path,
        identity="qc-lonely",
        webhook="off",
        extra_args=("--namespace", missing),  # the last --namespace wins
    )
    # The session's controller stands down, so that only the lonely one could admit.
    controller.stop()
    try:
        lonely.start(ready=False)
        objects.queue("q", objects.team_quota(8))
        create(cluster, namespace, job("waits", queue="q", gpus=1, pods=1, nodes=h100(4)))
        answer = eventually(
            lambda: (r := lonely.readyz()) and r.get("leaderElection") and r,
            timeout=30,
            what="/readyz saying why it cannot lead",
        )
        assert answer["ready"] is False
        assert f"namespace {missing} does not exist" in answer["leaderElection"]
        assert (
            lonely.metric(
                "queue_controller_leader_election_errors_total", reason="NamespaceNotFound"
            )
            >= 1
        )
        assert f"namespace {missing} does not exist" in lonely.log_tail(200)
        time.sleep(3)
        assert objects.phase("waits", "Admitted", "Running") is None, "nothing admitted meanwhile"
        # It goes on retrying: once the namespace exists it leads, and admits.
        cluster.core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=missing))
        )
        eventually(lambda: (r := lonely.readyz()) and r.get("leader"), timeout=30, what="leading")
        ready = lonely.readyz()
        assert ready is not None
        assert ready["ready"] is True
        assert "leaderElection" not in ready
        eventually(lambda: objects.phase("waits", "Running"), timeout=60, what="admitted")
    finally:
        lonely.stop()
        cluster.core.delete_namespace(missing)
        controller.start()


def test_a_job_created_while_no_controller_runs_is_queued_once_it_is_back(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    """Run locally, the webhook is registered with failurePolicy Ignore: the Job is
    created as written, unsuspended.  The controller, once back, holds it (suspends
    it, its pods go) and queues it like any other; it is then admitted whole."""
    objects.queue("q", objects.team_quota(8))
    controller.stop()
    try:
        body = job("early", queue="q", gpus=2, pods=2, nodes=h100(5))
        created = create(cluster, namespace, body)
        assert created["spec"].get("suspend") in (None, False), "no webhook answered"
    finally:
        controller.start()
    group = eventually(lambda: objects.pod_group("early"), timeout=30, what="its PodGroup")
    assert group["spec"]["minMember"] == 2
    eventually(lambda: objects.phase("early", "Running"), timeout=60, what="admitted whole")
    # It was held first (suspended as found running unadmitted), then admitted.
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=early"
    )
    assert "Suspended" in events
    assert "Admitted" in events
    released = cluster.batch.read_namespaced_job("early", namespace)
    assert released.spec.suspend is False


def quota_used(objects: Objects, name: str) -> str | None:
    found = objects.api.get_cluster_custom_object(GROUP, VERSION, "teamquotas", name)
    used = found.get("status", {}).get("used", {}).get(GPU)
    return used if isinstance(used, str) else None


def test_a_job_deleted_while_admitted_gives_its_quota_back_with_a_journal_entry(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    journal_url: str,
) -> None:
    quota = objects.team_quota(8)
    objects.queue("q", quota)
    create(cluster, namespace, job("doomed", queue="q", gpus=2, pods=2, nodes=h100(6)))
    eventually(lambda: objects.phase("doomed", "Running"), what="running")
    eventually(lambda: quota_used(objects, quota) == "4", what="quota in use")
    cluster.batch.delete_namespaced_job("doomed", namespace, propagation_policy="Background")
    started = time.monotonic()
    eventually(lambda: quota_used(objects, quota) == "0", timeout=30, what="quota back")
    took = time.monotonic() - started
    assert took < 10, f"quota back after {took:.1f}s"  # a 1 s tick: within a few cycles

    def deleted() -> list[Any]:
        return [
            e
            for e in read_history(journal_url, namespace=namespace)
            if e.name == "doomed" and e.reason == "Deleted"
        ]

    (entry,) = eventually(deleted, timeout=15, what="the journal entry")
    assert entry.event.value == "Finished"


def test_a_queue_deleted_under_its_gangs_loses_nothing(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    objects.queue("q", objects.team_quota(8))
    nodes = h100(7)
    create(cluster, namespace, job("runs", queue="q", gpus=8, pods=1, nodes=nodes, runs_for="8s"))
    eventually(lambda: objects.phase("runs", "Running"), what="running")
    create(cluster, namespace, job("waits", queue="q", gpus=8, pods=1, nodes=nodes))
    eventually(lambda: objects.phase("waits", "Pending"), what="waiting for the node")
    objects.api.delete_namespaced_custom_object(GROUP, VERSION, namespace, "queues", "q")
    # The waiting gang says why it waits; the running one runs to its end.
    eventually(
        lambda: objects.reason("waits") == "QueueNotFound",
        timeout=30,
        what="QueueNotFound",
    )
    eventually(lambda: objects.phase("runs", "Finished"), timeout=60, what="finished")
    waiting = cluster.batch.read_namespaced_job("waits", namespace)
    assert waiting.spec.suspend is True, "nothing runs without its queue"
    # The Queue back: the waiting gang is admitted.
    objects.queue("q", objects.team_quota(8))
    eventually(lambda: objects.phase("waits", "Running"), timeout=60, what="admitted again")


@pytest.mark.breaks_invariants("a TeamQuota lowered below what already runs is overdrawn")
def test_a_quota_lowered_below_its_use_keeps_what_runs_and_admits_nothing_new(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    quota = objects.team_quota(8)
    objects.queue("q", quota)
    nodes = h100(0, 1)
    create(cluster, namespace, job("big", queue="q", gpus=4, pods=2, nodes=nodes))
    eventually(lambda: objects.phase("big", "Running"), what="running")
    objects.api.patch_cluster_custom_object(
        GROUP, VERSION, "teamquotas", quota, {"spec": {"resources": {GPU: {"nominal": 4}}}}
    )
    create(cluster, namespace, job("small", queue="q", gpus=1, pods=1, nodes=nodes))
    eventually(
        lambda: objects.reason("small") == "QuotaExceeded",
        timeout=30,
        what="the new gang waiting on the lowered quota",
    )
    time.sleep(3)
    assert objects.phase("big", "Running"), "what runs keeps running"
    eventually(
        lambda: (
            controller.metric("queue_controller_quota_nominal", team_quota=quota, resource=GPU) == 4
        ),
        what="the nominal metric lowered",
    )
    assert controller.metric("queue_controller_quota_used", team_quota=quota, resource=GPU) == 8
    # check names the overdrawn quota, from the running pods.
    done = subprocess.run(
        [
            str(ROOT / ".venv/bin/queue-controller"),
            "check",
            "--kubeconfig",
            str(cluster.kubeconfig),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "QuotaOverdrawn" in done.stdout
    assert quota in done.stdout


def test_status_writes_that_lose_a_race_are_retried_until_they_land(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    """A second writer bumps every PodGroup's resourceVersion (a label) every 50 ms, so the
    controller's conditional status writes meet 409 Conflict; each gang still gets there.

    The gangs first wait for quota, so the racer is seen bumping all four before admission,
    and again while they are admitted: a fast controller cannot outrun the race unseen."""
    team = objects.team_quota(0)
    objects.queue("q", team)
    stop = threading.Event()
    api = client.CustomObjectsApi(cluster.api)
    bumped: Counter[str] = Counter()

    def race() -> None:
        tick = 0
        while not stop.is_set():
            tick += 1
            groups = api.list_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups")
            for group in groups["items"]:
                with contextlib.suppress(ApiException):
                    api.patch_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        namespace,
                        "podgroups",
                        group["metadata"]["name"],
                        {"metadata": {"labels": {"racer": str(tick)}}},
                    )
                    bumped[group["metadata"]["name"]] += 1
            time.sleep(0.05)

    racer = threading.Thread(target=race, daemon=True)
    racer.start()
    try:
        for i in range(4):
            create(cluster, namespace, job(f"g{i}", queue="q", gpus=2, pods=2, nodes=h100(2, 3)))
        eventually(
            lambda: (len(bumped) == 4 and min(list(bumped.values())) >= 5) or None,
            timeout=60,
            what="the racer bumping all four pending PodGroups",
        )
        before = sum(bumped.values())
        api.patch_cluster_custom_object(
            GROUP, VERSION, "teamquotas", team, {"spec": {"resources": {GPU: {"nominal": 16}}}}
        )
        for i in range(4):
            eventually(lambda i=i: objects.phase(f"g{i}", "Running"), timeout=90, what=f"g{i}")
        during = sum(bumped.values()) - before
    finally:
        stop.set()
        racer.join(timeout=10)
    assert during > 0, "the racer stopped before the gangs were admitted"
    for i in range(4):
        group = objects.pod_group(f"g{i}")
        assert group is not None
        assert sum(group["status"]["placement"].values()) == 2


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (("--tick", "soon"), {}, "--tick"),
        ((), {"QC_TICK_SECONDS": "-1"}, "tick_seconds (QC_TICK_SECONDS)"),
        ((), {"QC_PODS_READY_TIMEOUT_SECONDS": "ten"}, "QC_PODS_READY_TIMEOUT_SECONDS"),
    ],
)
def test_a_malformed_setting_at_start_up_is_one_line_naming_it(
    cluster: Cluster, args: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    done = subprocess.run(
        [ROOT / ".venv/bin/queue-controller", "run", "--kubeconfig", cluster.kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("QC_")}, **env},
    )
    assert done.returncode != 0
    assert named in done.stderr
    assert "Traceback" not in done.stderr


def test_an_api_server_restart_is_followed_by_a_relist_that_leaves_no_ghosts(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    """While the controller is frozen (SIGSTOP) the API server restarts, which ends every
    watch of the controller, and then an admitted Job is deleted.  Deleted after the
    restart, no DELETED event can wait in a socket buffer of the controller; and its
    watches' resourceVersion is older than the new watch cache, so on resuming they meet
    410 Gone and list again: the deleted Job is simply not in the listing.  Nothing of it
    may stay behind: its quota is given back and the gang that waited on it is admitted."""
    if cluster.local is None:
        pytest.skip("restarts the API server of a cluster the session started")
    assert controller.process is not None
    quota = objects.team_quota(8)
    objects.queue("q", quota)
    nodes = h100(6, 7)
    create(cluster, namespace, job("gone", queue="q", gpus=4, pods=2, nodes=nodes))
    eventually(lambda: objects.phase("gone", "Running"), what="running")
    eventually(lambda: quota_used(objects, quota) == "8", what="the whole quota in use")
    create(cluster, namespace, job("next", queue="q", gpus=2, pods=1, nodes=nodes))
    eventually(
        lambda: objects.reason("next") == "QuotaExceeded",
        timeout=30,
        what="the second gang waiting on the quota",
    )
    started = time.monotonic()
    controller.process.send_signal(signal.SIGSTOP)
    try:
        cluster.local.restart("kube-apiserver")
        cluster.batch.delete_namespaced_job("gone", namespace, propagation_policy="Background")
        eventually(
            lambda: (
                not cluster.core.list_namespaced_pod(
                    namespace, label_selector="job-name=gone"
                ).items
            ),
            timeout=60,
            what="the deleted Job's pods gone",
        )
    finally:
        controller.process.send_signal(signal.SIGCONT)
    frozen = time.monotonic() - started
    eventually(lambda: objects.phase("next", "Running"), timeout=90, what="the waiting gang")
    eventually(lambda: quota_used(objects, quota) == "2", timeout=30, what="the quota given back")
    recovered = time.monotonic() - started - frozen

    def pod_groups() -> list[str]:
        listed = objects.api.list_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups")
        return [g["metadata"]["name"] for g in listed["items"]]

    # The garbage collector removes the deleted Job's PodGroup (its owner) once it has
    # caught up after the restart; the controller must not make it again, nor a second one.
    eventually(lambda: pod_groups() == ["next"], timeout=60, what="only the live gang's PodGroup")
    ready = eventually(lambda: (r := controller.readyz()) and r.get("ready") and r, what="ready")
    assert ready["leader"] is True
    assert controller.process.poll() is None, "the controller rode it out"
    # Learnt from its own relist, not from a DELETED event (none was ever sent to it).
    assert f"Job {namespace}/gone is gone" in controller.log_tail(100_000)
    print(f"frozen {frozen:.1f}s; recovered {recovered:.1f}s after resuming")


POSTGRES_SH = ROOT / "tests" / "journal" / "postgres.sh"


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A PostgreSQL server of this test's own (installed if missing, as `make journal-test`
    does), to halt and resume at will; removed at the end."""
    env = {**os.environ, "QC_POSTGRES_DIR": str(tmp_path / "postgres")}
    started = subprocess.run(
        [str(POSTGRES_SH), "start"], env=env, capture_output=True, text=True, check=False
    )
    if started.returncode != 0:
        pytest.fail(f"postgres.sh start failed:\n{started.stderr}")
    try:
        yield started.stdout.strip(), env
    finally:
        subprocess.run([str(POSTGRES_SH), "stop"], env=env, capture_output=True, check=False)


def test_the_postgres_journal_going_away_and_back_never_stops_scheduling(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    postgres: tuple[str, dict[str, str]],
    tmp_path: Path,
) -> None:
    url, env = postgres
    journalled = ControllerProcess(
        kubeconfig=cluster.kubeconfig,
        journal=url,
        logs=tmp_path,
        identity=controller.identity,  # takes the session controller's place and Lease
        webhook="off",
    )
    objects.queue("q", objects.team_quota(8))
    nodes = h100(4)
    controller.stop()
    try:
        journalled.start()

        def submit(name: str) -> None:
            body = job(name, queue="q", gpus=2, pods=1, nodes=nodes, suspend=True)
            create(cluster, namespace, body)

        def journal_state() -> str:
            answer = journalled.readyz() or {}
            return str(answer.get("journal", ""))

        def written() -> set[str]:
            return {e.name for e in read_history(url, namespace=namespace)}

        submit("before")
        eventually(lambda: objects.phase("before", "Running"), timeout=60, what="admitted")
        subprocess.run([str(POSTGRES_SH), "halt"], env=env, check=True, capture_output=True)
        # The journal is down: scheduling goes on, and /readyz and the metric say so.
        submit("during")
        eventually(lambda: objects.phase("during", "Running"), timeout=60, what="admitted anyway")
        eventually(lambda: journal_state().startswith("degraded"), timeout=30, what="degraded")
        answer = journalled.readyz()
        assert answer is not None
        assert answer["ready"] is True
        assert journalled.metric("queue_controller_journal_up") == 0
        subprocess.run([str(POSTGRES_SH), "resume"], env=env, check=True, capture_output=True)
        eventually(lambda: journal_state() == "ok", timeout=60, what="the journal back")
        # What happened during the outage was kept and written once the server was back.
        eventually(lambda: {"before", "during"} <= written(), timeout=60, what="entries written")
    finally:
        journalled.stop()
        controller.start()
