"""A thousand queued Jobs at once on the real control plane: the controller admits what
fits, holds the rest, then goes quiet (no hot requeue loop), and the API writes an
admission costs are counted from its own /metrics and reported."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import GROUP, VERSION, Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster

JOBS = 1000


def total(controller: ControllerProcess, name: str) -> float:
    """A metric summed over all its labels."""
    out = 0.0
    for line in controller.metrics().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            sample, _, value = line.rpartition(" ")
            if sample == name or sample.startswith(name + "{"):
                out += float(value)
    return out


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_thousand_jobs_at_once(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    assert controller.process is not None
    pid = controller.process.pid
    # A production-like timeout: on this 2-core machine a thousand pods start slowly, and
    # the suite's 10 s default would evict gangs for being slow, not stuck.
    objects.queue("q", objects.team_quota(64), timeout=300)
    nodes = h100(*range(8))  # 64 GPUs
    writes_before = total(controller, "queue_controller_api_writes_total")
    admitted_before = total(controller, "queue_controller_admitted_gangs_total")
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda i: create(
                    cluster, namespace, job(f"j{i:04d}", queue="q", gpus=1, pods=1, nodes=nodes)
                ),
                range(JOBS),
            )
        )
    submitted = time.monotonic() - started

    def phases() -> dict[str, int]:
        groups = objects.api.list_namespaced_custom_object(GROUP, VERSION, namespace, "podgroups")
        counts: dict[str, int] = {}
        for group in groups["items"]:
            phase = group.get("status", {}).get("phase", "")
            counts[phase] = counts.get(phase, 0) + 1
        return counts

    settled = eventually(
        lambda: (p := phases()).get("Running", 0) == 64 and p.get("Pending", 0) == JOBS - 64 and p,
        timeout=600,
        what="64 running and the rest pending",
    )
    took = time.monotonic() - started
    writes = total(controller, "queue_controller_api_writes_total") - writes_before
    admitted = total(controller, "queue_controller_admitted_gangs_total") - admitted_before
    # Quiet once settled: few writes and little CPU over 15 s with nothing changing.
    cpu_before, quiet_writes_before = (
        cpu_seconds(pid),
        total(controller, "queue_controller_api_writes_total"),
    )
    time.sleep(15)
    idle_cpu = cpu_seconds(pid) - cpu_before
    idle_writes = total(controller, "queue_controller_api_writes_total") - quiet_writes_before
    figures = {
        "jobs": JOBS,
        "submitted_s": round(submitted, 1),
        "settled_s": round(took, 1),
        "admitted": admitted,
        "phases": settled,
        "api_writes": writes,
        "api_writes_per_gang": round(writes / JOBS, 2),
        "api_writes_per_admitted_gang": round(writes / max(admitted, 1), 2),
        "idle_writes_15s": idle_writes,
        "idle_cpu_share": round(idle_cpu / 15, 3),
    }
    print("scale:", json.dumps(figures))
    assert admitted == 64
    assert idle_writes <= 5, figures  # no hot requeue loop writing the same status again
    # Not spinning: a hot loop pegs a core.  What a settled controller spends is its tick
    # (1 s in this suite) re-translating every object, reported in the figures.
    assert idle_cpu / 15 < 0.9, figures
