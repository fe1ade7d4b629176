"""``queue-controller chaos`` on the real local control plane, as an operator runs it.

Each experiment breaks one admitted 2-pod GPU Job pinned to three H100 nodes,
and the command itself (a subprocess) must see the controller recover and
leave the cluster as it found it.  The same experiment against a controller
started with the test-only fault ``--fault skip-evictions`` must fail and name
the broken invariant.  Each test prints its timeline (pytest -s shows it).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from queue_controller.chaos import LABEL, TAINT_KEY
from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ROOT, ControllerProcess
from tests.cluster.workloads import (
    GPU,
    GROUP,
    VERSION,
    Objects,
    create,
    eventually,
    h100,
    job,
    running_on,
)

pytestmark = pytest.mark.cluster
CLI = str(ROOT / ".venv/bin/queue-controller")


def chaos(cluster: Cluster, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [CLI, "chaos", *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(result.stdout, result.stderr)
    return result


def start_chaos(cluster: Cluster, *args: str) -> tuple[subprocess.Popen[str], str]:
    """A run in the background, once it has injected: (process, run id)."""
    process = subprocess.Popen(
        [CLI, "chaos", *args, "--kubeconfig", str(cluster.kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    run = ""
    for line in process.stdout:
        print(line, end="")
        found = re.match(r"chaos run (\S+):", line)
        run = found.group(1) if found else run
        if "injected" in line:
            return process, run
    raise AssertionError(f"the run ended before injecting ({process.wait()})")


def admitted_gang(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    nodes: list[str],
    timeout: int,
    **pod_spec: Any,
) -> dict[str, object]:
    objects.queue("q", objects.team_quota(64), timeout=timeout)
    body = job("gang", queue="q", gpus=8, pods=2, nodes=nodes, backoff_limit=4, **pod_spec)
    create(cluster, namespace, body)
    return eventually(lambda: objects.phase("gang", "Running"), what="the gang to run")


def chaos_marks(cluster: Cluster) -> list[str]:
    """Every node that still carries a chaos label or taint."""
    return [
        node.metadata.name
        for node in cluster.core.list_node().items
        if LABEL in (node.metadata.labels or {})
        or any(t.key == TAINT_KEY for t in node.spec.taints or [])
    ]


@pytest.fixture
def faulty(cluster: Cluster, controller: ControllerProcess) -> Iterator[ControllerProcess]:
    """The session's controller swapped for one that never evicts, then back."""
    controller.stop()
    broken = ControllerProcess(
        kubeconfig=controller.kubeconfig,
        journal=controller.journal,
        logs=controller.logs,
        identity="qc-no-evictions",
        extra_args=(*controller.extra_args, "--fault", "skip-evictions"),
    )
    broken.start()
    try:
        yield broken
    finally:
        broken.stop()
        controller.start()


def test_partial_placement_recovers_and_prints_the_timeline(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    nodes = h100(4, 5, 6)
    admitted_gang(cluster, namespace, objects, nodes, timeout=5)
    result = chaos(cluster, "partial-placement", "--job", f"{namespace}/gang", "--members", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for phase in ("injected", "evicted", "quota back", "requeued", "readmitted"):
        assert re.search(rf"^{phase}\s+\d+\.\ds", out, re.M), f"no {phase} in the timeline"
    assert "recovered in" in out
    assert "every invariant held" in out
    assert chaos_marks(cluster) == []
    # Readmitted off the tainted node, and it runs whole there.
    tainted = re.search(r"taint Node (\S+)", out)
    assert tainted is not None
    running = eventually(
        lambda: (r := running_on(cluster, namespace, "gang")) and sum(r.values()) == 2 and r,
        what="the gang to run again",
    )
    assert tainted.group(1) not in running


# Common on GPU nodes: the pods tolerate every taint, the chaos taint included.
TOLERATE_EVERYTHING = [{"operator": "Exists"}]


def placeholders(cluster: Cluster, namespace: str) -> list[str]:
    """The chaos run's pods still in the namespace (and not on their way out)."""
    return [
        p.metadata.name
        for p in cluster.core.list_namespaced_pod(namespace).items
        if LABEL in (p.metadata.labels or {}) and p.metadata.deletion_timestamp is None
    ]


def test_partial_placement_of_members_that_tolerate_every_taint_uses_a_placeholder(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    # A timeout longer than the Job's backoff before it replaces a deleted pod: the
    # replacement is made while the gang may still wait for it, so a fault that does
    # not hold (the old taint) lets the gang run whole and it is never evicted.
    nodes = h100(4, 5, 6)
    admitted_gang(cluster, namespace, objects, nodes, timeout=30, tolerations=TOLERATE_EVERYTHING)
    result = chaos(cluster, "partial-placement", "--job", f"{namespace}/gang", "--members", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    placed = re.search(
        rf"create placeholder Pod {namespace}/(\S+) \(outside any queue, for Node (\S+) only\)", out
    )
    assert placed is not None, out
    assert "taint Node" not in out
    # Confirmed before the controller is judged: the replacement found no GPU on its node.
    confirmed = re.search(r"^confirmed\s+\d+\.\ds\s+Pod \S+ cannot start: (.*)$", out, re.M)
    assert confirmed is not None, out
    assert "nvidia.com/gpu" in confirmed.group(1)
    assert seconds_of(out, "confirmed") <= seconds_of(out, "evicted")
    assert re.search(r"^evicted\s+\S+\s+(PodsReadyTimeout|MembersLost)", out, re.M)
    for phase in ("quota back", "requeued", "readmitted"):
        assert re.search(rf"^{phase}\s+\d+\.\ds", out, re.M), f"no {phase} in the timeline"
    assert "every invariant held" in out
    assert f"undone: delete placeholder Pod {namespace}/{placed.group(1)}" in out
    assert placeholders(cluster, namespace) == []
    assert chaos_marks(cluster) == []
    running = eventually(
        lambda: (r := running_on(cluster, namespace, "gang")) and sum(r.values()) == 2 and r,
        what="the gang to run again",
    )
    assert placed.group(2) not in running


def test_partial_placement_that_cannot_take_hold_says_so_rather_than_failed(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    # The old way, forced: the taint, which these members tolerate.  The replacement
    # starts on the tainted node; the run must not blame the controller for that.
    admitted_gang(
        cluster, namespace, objects, h100(4, 5, 6), timeout=30, tolerations=TOLERATE_EVERYTHING
    )
    args = ("partial-placement", "--job", f"{namespace}/gang", "--method", "taint")
    result = chaos(cluster, *args)
    assert result.returncode == 3, result.stdout + result.stderr
    out = result.stdout
    assert re.search(
        rf"^could not inject: Pod {namespace}/gang-\S+ started on h100-\d+ all the same "
        r"\(method taint: asked for \(--method taint\), although the members tolerate",
        out,
        re.M,
    ), out
    assert "FAILED" not in out
    assert "not recovered" not in out
    assert chaos_marks(cluster) == []


def test_partial_placement_whose_placeholder_is_refused_reports_could_not_inject(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    # A namespace GPU quota the gang fills: there is no room for a placeholder, and the
    # members tolerate the taint, so neither method can take hold.  Nothing is deleted.
    quota = {
        "metadata": {"name": "gpus"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "16"}},
    }
    cluster.core.create_namespaced_resource_quota(namespace, quota)
    eventually(
        lambda: cluster.core.read_namespaced_resource_quota("gpus", namespace).status.hard or None,
        what="the quota to be counted",
    )
    admitted_gang(
        cluster, namespace, objects, h100(4, 5, 6), timeout=5, tolerations=TOLERATE_EVERYTHING
    )
    before = running_on(cluster, namespace, "gang")
    result = chaos(cluster, "partial-placement", "--job", f"{namespace}/gang", "-o", "json")
    assert result.returncode == 3, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "could not inject"
    assert report["method"] == "placeholder"
    assert "was refused" in report["notInjected"]
    assert "exceeded quota" in report["notInjected"]
    assert report["timeline"] == []
    assert "could not inject: " in result.stderr
    assert placeholders(cluster, namespace) == []
    assert chaos_marks(cluster) == []
    assert running_on(cluster, namespace, "gang") == before
    group = objects.pod_group("gang")
    assert group is not None
    assert group["status"].get("requeueCount", 0) == 0


def test_partial_placement_against_a_controller_that_never_evicts_names_the_invariant(
    cluster: Cluster, namespace: str, objects: Objects, faulty: ControllerProcess
) -> None:
    admitted_gang(cluster, namespace, objects, h100(4, 5, 6), timeout=5)
    result = chaos(
        cluster, "partial-placement", "--job", f"{namespace}/gang", "-o", "json", "--members", "1"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    broken = {v["invariant"] for v in report["violations"]}
    assert broken & {"PartiallyPlacedTooLong", "EvictedStillHolding"}, report
    assert report["passed"] is False
    # Confirmed (the replacement met the taint) or not yet when the invariant broke.
    assert [m["phase"] for m in report["timeline"] if m["phase"] != "confirmed"] == ["injected"]
    assert report["verdict"] == "failed"
    assert report["method"] == "taint"
    assert chaos_marks(cluster) == []


def test_dry_run_changes_nothing(cluster: Cluster, namespace: str, objects: Objects) -> None:
    admitted_gang(cluster, namespace, objects, h100(4, 5, 6), timeout=5)
    before = running_on(cluster, namespace, "gang")
    result = chaos(cluster, "partial-placement", "--job", f"{namespace}/gang", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "taint Node h100-000" in result.stdout
    assert "delete Pod" in result.stdout
    time.sleep(2)
    assert chaos_marks(cluster) == []
    assert running_on(cluster, namespace, "gang") == before


def test_sigint_undoes_and_cleanup_undoes_a_killed_run(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    # A long timeout: the runs are stopped long before the controller would act.
    admitted_gang(cluster, namespace, objects, h100(4, 5, 6), timeout=120)
    args = ("partial-placement", "--job", f"{namespace}/gang")
    process, _ = start_chaos(cluster, *args)
    assert chaos_marks(cluster) != []
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=60) == 130
    assert chaos_marks(cluster) == []

    eventually(
        lambda: sum(running_on(cluster, namespace, "gang").values()) == 2 or None,
        what="the gang whole again (its Job replaces the deleted member after a backoff)",
    )
    process, run = start_chaos(cluster, *args)
    process.kill()
    process.wait()
    left = chaos_marks(cluster)
    assert left != [], "a killed run cannot undo: its marks stay"
    result = chaos(cluster, "cleanup", "--run", run)
    assert result.returncode == 0
    assert f"remove taint {TAINT_KEY} from Node {left[0]}" in result.stdout
    assert chaos_marks(cluster) == []
    assert "nothing left" in chaos(cluster, "cleanup").stdout


def test_gpu_fault_evicts_with_gpu_unhealthy_and_readmits_on_healthy_gpus(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    first = admitted_gang(cluster, namespace, objects, h100(0, 1, 2), timeout=5)
    node = sorted(first["status"]["placement"])[0]  # type: ignore[index]
    result = chaos(cluster, "gpu-fault", "--node", node, "--xid", "79")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^evicted\s+\S+\s+GPUUnhealthy", result.stdout, re.M)
    assert "readmitted" in result.stdout
    restored = cluster.core.read_node(node)
    assert "queue-controller.io/gpu-health" not in (restored.metadata.annotations or {})
    assert all(c.type != "GPUHealthy" for c in restored.status.conditions)
    assert chaos_marks(cluster) == []


def test_node_loss_evicts_the_gang_whole_and_the_node_comes_back(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    first = admitted_gang(cluster, namespace, objects, h100(1, 2, 3), timeout=5)
    node = sorted(first["status"]["placement"])[0]  # type: ignore[index]
    result = chaos(cluster, "node-loss", "--job", f"{namespace}/gang", "--node", node)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "readmitted" in result.stdout

    def ready() -> bool | None:
        try:
            found = cluster.core.read_node(node)
        except ApiException:
            return None
        return (
            any(c.type == "Ready" and c.status == "True" for c in found.status.conditions) or None
        )

    eventually(ready, timeout=60, what="the node to come back Ready")
    assert chaos_marks(cluster) == []
    assert not [
        c
        for c in cluster.core.list_namespaced_config_map(namespace).items
        if LABEL in (c.metadata.labels or {})
    ]


def seconds_of(out: str, phase: str) -> float:
    found = re.search(rf"^{phase}\s+(\d+\.\d)s", out, re.M)
    assert found is not None, f"no {phase} in the timeline"
    return float(found.group(1))


def test_gpu_steal_evicts_the_gang_and_readmits_it_away_from_the_stolen_gpus(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    first = admitted_gang(cluster, namespace, objects, h100(1, 2, 3), timeout=5)
    node = sorted(first["status"]["placement"])[0]  # type: ignore[index]
    result = chaos(cluster, "gpu-steal", "--job", f"{namespace}/gang", "--node", node)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"placeholder Pod {namespace}/chaos-gpu-steal-" in out
    assert re.search(r"^evicted\s+\S+\s+(PodsReadyTimeout|MembersLost)", out, re.M)
    print({p: seconds_of(out, p) for p in ("evicted", "quota back", "requeued", "readmitted")})
    assert "every invariant held" in out
    assert "undone: delete placeholder Pod" in out
    assert chaos_marks(cluster) == []
    assert not [
        p
        for p in cluster.core.list_namespaced_pod(namespace).items
        if LABEL in (p.metadata.labels or {}) and p.metadata.deletion_timestamp is None
    ]
    running = eventually(
        lambda: (r := running_on(cluster, namespace, "gang")) and sum(r.values()) == 2 and r,
        what="the gang to run again",
    )
    assert node not in running


def restart_when_killed(controller: ControllerProcess) -> tuple[threading.Thread, list[float]]:
    """Start the session's controller again once the experiment kills it (the supervisor
    a real deployment has), so later tests keep theirs; how long it took, once done."""
    victim = controller.process
    assert victim is not None
    restarted: list[float] = []

    def watch() -> None:
        try:
            victim.wait(timeout=150)
        except subprocess.TimeoutExpired:
            return
        killed = time.monotonic()
        controller.process = None
        controller.start()
        restarted.append(time.monotonic() - killed)

    helper = threading.Thread(target=watch, daemon=True)
    helper.start()
    return helper, restarted


def test_controller_restart_at_admission_admits_once_and_the_gang_runs(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    # The gang waits for quota until the run is watching; then it is admitted.
    team = objects.team_quota(0)
    objects.queue("q", team, timeout=30)
    create(cluster, namespace, job("gang", queue="q", gpus=8, pods=2, nodes=h100(4, 5, 6)))
    assert controller.process is not None
    victim = controller.process
    helper, restarted = restart_when_killed(controller)
    args = ("controller-restart", "--job", f"{namespace}/gang", "--during", "admission")
    process = subprocess.Popen(
        [CLI, "chaos", *args, "--pid", str(victim.pid), "--kubeconfig", str(cluster.kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        print(first, end="")
        assert first.startswith("chaos run controller-restart-"), first
        objects.api.patch_cluster_custom_object(
            GROUP, VERSION, "teamquotas", team, {"spec": {"resources": {GPU: {"nominal": 64}}}}
        )
        out, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
        helper.join(timeout=120)
    print(out)
    assert process.returncode == 0, out
    # Caught while the PodGroup says Admitted (not yet Running): the controller is killed
    # before it has seen its gang run.  kwok starts pods within milliseconds of binding,
    # so the members may already run by then (a CI run caught "2 members made, 2
    # running"); what is under test is the controller's state across the kill.
    assert re.search(r"caught Job \S+ Admitted: [012] members made, [012] running", out), out
    assert not re.search(r"^evicted", out, re.M)
    print(f"controller back (ready and leading) {restarted[0]:.1f}s after the kill")
    print(f"gang running {seconds_of(out, 'running')}s after the kill")
    assert controller.process is not None
    assert controller.process.poll() is None
    group = objects.pod_group("gang")
    assert group is not None
    assert group["status"]["phase"] == "Running"
    assert group["status"].get("requeueCount", 0) == 0


def test_controller_restart_at_eviction_requeues_and_readmits_once(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    # partial-placement evicts the gang; controller-restart kills the controller right then.
    admitted_gang(cluster, namespace, objects, h100(4, 5, 6), timeout=5)
    assert controller.process is not None
    victim = controller.process
    helper, restarted = restart_when_killed(controller)
    args = ("controller-restart", "--job", f"{namespace}/gang", "--during", "eviction")
    process = subprocess.Popen(
        [CLI, "chaos", *args, "--pid", str(victim.pid), "--kubeconfig", str(cluster.kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        print(first, end="")
        assert first.startswith("chaos run controller-restart-"), first
        breaker = chaos(cluster, "partial-placement", "--job", f"{namespace}/gang")
        out, _ = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
        helper.join(timeout=120)
    print(out)
    assert process.returncode == 0, out
    assert breaker.returncode == 0, breaker.stdout + breaker.stderr
    assert re.search(r"caught Job \S+ (Evicted|Pending)", out), out
    print(f"controller back (ready and leading) {restarted[0]:.1f}s after the kill")
    print({p: seconds_of(out, p) for p in ("evicted", "requeued", "readmitted", "running")})
    assert controller.process is not None
    assert controller.process.poll() is None
    group = objects.pod_group("gang")
    assert group is not None
    assert group["status"].get("requeueCount", 0) == 1
    assert chaos_marks(cluster) == []
