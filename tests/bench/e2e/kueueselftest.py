"""``python -m tests.bench.e2e.kueue --selftest``: Kueue built, installed and run on a fresh
small local cluster of its own, a gang that fits admitted whole and one too big held, and
everything taken away again (kueue.py)."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.bench.e2e.kueue import DEPLOY, QUEUE_LABEL, Kueue, KueueError, Report, build
from tests.bench.e2e.kueueobjects import WEBHOOK_PREFIX
from tests.bench.e2e.teams import QUEUE_NAME, QueueSettings, TeamSpec


def gang_job(
    name: str,
    namespace: str,
    *,
    pods: int,
    gpus: int,
    product: str,
    delay: str = "10s",
) -> dict[str, Any]:
    """A suspended Job of ``pods`` pods with ``gpus`` GPUs each, queued for Kueue."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: QUEUE_NAME}},
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": delay}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"nvidia.com/gpu.product": product},
                    "containers": [
                        {
                            "name": "worker",
                            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"nvidia.com/gpu": gpus, "memory": "1Gi"},
                            },
                        }
                    ],
                },
            },
        },
    }


class SelftestError(KueueError):
    """The selftest saw Kueue do something other than expected."""


@contextlib.contextmanager
def _own_cluster(state_dir: Path, report: Report) -> Iterator[Path]:
    """A fresh local cluster of 2 H100 nodes (no other pool), stopped whatever happens."""
    from queue_controller import nodepools
    from queue_controller.localcluster import Layout, LocalCluster

    layout = Layout(bin_dir=DEPLOY / "bin", state_dir=state_dir, stages=DEPLOY / "kwok-stages.yaml")
    pools = nodepools.load(DEPLOY / "nodes.yaml")
    pools = pools.resized({p.name: 0 for p in pools.pools} | {"h100": 2})
    local = LocalCluster(layout, report=report)
    try:
        local.up(pools, dra=False)
        yield layout.kubeconfig
    except BaseException:
        # down() removes the state directory: keep the components' logs beside it.
        with contextlib.suppress(OSError):
            shutil.copytree(layout.logs, state_dir.with_name("cluster-logs"), dirs_exist_ok=True)
        raise
    finally:
        local.down()


def selftest(*, keep: bool = False, report: Report = print) -> dict[str, float]:
    """Build, install and start Kueue on a fresh 2-node cluster; one 2x4-GPU gang must be
    admitted, run and complete, a 3x4-GPU gang (12 > the team's 8 GPUs) must stay suspended.
    Returns timings; raises SelftestError (or KueueError) otherwise.  Everything it started is
    stopped, pass or fail; its files are removed unless it fails or ``keep``."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    binary = build(DEPLOY / "bin", report=report)
    timings["build_s"] = round(time.monotonic() - started, 1)
    work = Path(tempfile.mkdtemp(prefix="kueue-selftest-"))
    product = "NVIDIA-H100-80GB-HBM3"
    team = TeamSpec(name="selftest", namespace="kueue-selftest", nominal={"nvidia.com/gpu": 8})
    ok = False
    try:
        with _own_cluster(work / "cluster", report) as kubeconfig:
            kueue = Kueue(
                kubeconfig=kubeconfig, workdir=work / "kueue", binary=binary, report=report
            )
            try:
                t = time.monotonic()
                kueue.install([team], QueueSettings(), [product])
                kueue.start()
                timings["install_start_s"] = round(time.monotonic() - t, 1)
                _check_gangs(kueue, team.namespace, product, timings, report)
                kueue.kubectl("delete", "jobs", "--all", "-n", team.namespace, "--wait=true")
            finally:
                t = time.monotonic()
                kueue.stop()
                timings["stop_s"] = round(time.monotonic() - t, 1)
            left = kueue.kubectl(
                "get", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "-o", "name"
            )
            if WEBHOOK_PREFIX in left:
                raise SelftestError(f"webhook configurations left after stop: {left}")
            if kueue._remaining():
                raise SelftestError(f"Kueue objects left after stop: {kueue._remaining()}")
        ok = True
    finally:
        if ok and not keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            report(f"selftest files kept in {work}")
    timings["total_s"] = round(time.monotonic() - started, 1)
    return timings


def _check_gangs(
    kueue: Kueue, namespace: str, product: str, timings: dict[str, float], report: Report
) -> None:
    fits = gang_job("fits", namespace, pods=2, gpus=4, product=product)
    too_big = gang_job("too-big", namespace, pods=3, gpus=4, product=product)
    submitted = time.monotonic()
    kueue.kubectl("create", "-f", "-", stdin=json.dumps(fits))
    kueue.kubectl("create", "-f", "-", stdin=json.dumps(too_big))

    def job(name: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(
            kueue.kubectl("get", "job", name, "-n", namespace, "-o", "json")
        )
        return out

    def wait(what: str, ready: Callable[[], bool], seconds: float) -> float:
        deadline = time.monotonic() + seconds
        while not ready():
            if time.monotonic() > deadline:
                raise SelftestError(f"timed out after {seconds:.0f}s waiting for {what}")
            time.sleep(0.2)
        return round(time.monotonic() - submitted, 2)

    timings["admitted_s"] = wait(
        "Job fits to be unsuspended", lambda: not job("fits")["spec"].get("suspend"), 60
    )

    def running() -> bool:
        listed = json.loads(
            kueue.kubectl("get", "pods", "-n", namespace, "-l", "job-name=fits", "-o", "json")
        )
        phases = [p["status"].get("phase") for p in listed["items"]]
        return phases.count("Running") + phases.count("Succeeded") >= 2

    timings["pods_running_s"] = wait("both pods of fits to run", running, 60)

    def workload_condition(job_name: str, kind: str) -> dict[str, Any] | None:
        listed = json.loads(kueue.kubectl("get", "workloads", "-n", namespace, "-o", "json"))
        for item in listed["items"]:
            owners = item["metadata"].get("ownerReferences", [])
            if any(o.get("name") == job_name for o in owners):
                for condition in item.get("status", {}).get("conditions", []):
                    if condition["type"] == kind:
                        found: dict[str, Any] = condition
                        return found
        return None

    def pods_ready() -> bool:
        condition = workload_condition("fits", "PodsReady")
        return condition is not None and condition["status"] == "True"

    timings["pods_ready_s"] = wait("fits' Workload to report PodsReady", pods_ready, 30)

    def complete() -> bool:
        conditions = job("fits").get("status", {}).get("conditions", [])
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

    timings["complete_s"] = wait("Job fits to complete", complete, 90)
    time.sleep(3)  # fits' quota is back: too-big still must not fit 8 GPUs
    if not job("too-big")["spec"].get("suspend"):
        raise SelftestError("Job too-big (12 GPUs) was unsuspended against a quota of 8")
    reserved = workload_condition("too-big", "QuotaReserved")
    if reserved is None or reserved["status"] != "False":
        raise SelftestError(f"too-big's Workload should be pending for quota: {reserved}")
    report(f"too-big pending as expected: {reserved.get('message', '')}")
