"""``queue-controller eta`` against the live control plane, and PodGroup status.eta.

A gang runs on one node with an expected runtime; a second gang that needs the same
node waits for it.  ``eta`` (reading the live cluster through the controller's own
translation) estimates its start at the first gang's admission plus its expected
runtime, and names the gang it waits behind; the controller writes the same start to
the waiting gang's PodGroup (``status.eta.start``, the ETA column).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.workloads import Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster

RUNTIME = "queue-controller.io/expected-runtime-seconds"
CLI = Path(sys.executable).parent / "queue-controller"


def eta_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), "eta", *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_eta_of_a_gang_behind_a_running_gang(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    team = objects.team_quota(16)
    objects.queue("q", team)
    node = h100(7)
    first = job("first", queue="q", gpus=8, pods=1, nodes=node, runs_for="2h")
    first["spec"]["template"]["metadata"]["annotations"][RUNTIME] = "3600"
    create(cluster, namespace, first)
    admitted = eventually(
        lambda: objects.phase("first", "Admitted", "Running"), what="first admitted"
    )
    admitted_at = seconds(admitted["status"]["admittedAt"])
    second = job("second", queue="q", gpus=8, pods=1, nodes=node, runs_for="10m")
    second["spec"]["template"]["metadata"]["annotations"][RUNTIME] = "600"
    create(cluster, namespace, second)
    eventually(lambda: objects.reason("second") == "NoNodeFit" or None, what="second waits")

    done = eta_cli(cluster, f"{namespace}/second", "-o", "json")
    assert done.returncode == 0, done.stderr
    payload: dict[str, Any] = json.loads(done.stdout)
    [eta] = payload["etas"]
    assert eta["workload"] == f"{namespace}/second"
    assert eta["reason"] == "Estimated", eta
    assert abs(seconds(eta["estimatedStart"]) - (admitted_at + 3600)) <= 2
    assert eta["after"] == [f"{namespace}/first"]
    assert eta["waitsFor"]["reason"] == "NoNodeFit"
    assert eta["runtime"]["source"] == "Annotation"

    table = eta_cli(cluster, "-n", namespace)
    assert table.returncode == 0, table.stderr
    assert f"{namespace}/second" in table.stdout
    assert re.search(r"\bin (59m|60m|1h) \(", table.stdout), table.stdout

    # The controller writes the same estimate to the waiting gang's PodGroup.
    group = eventually(
        lambda: (g := objects.pod_group("second")) and (g.get("status") or {}).get("eta") and g,
        timeout=30,
        what="status.eta written",
    )
    written = group["status"]["eta"]
    assert written["reason"] == "Estimated"
    assert abs(seconds(written["start"]) - (admitted_at + 3600)) <= 60
    assert written["after"] == [f"{namespace}/first"]
    columns = cluster.kubectl("get", "podgroups", "-n", namespace, "second")
    assert "ETA" in columns.splitlines()[0]

    # Bad input: one line, exit code 2.
    admitted_one = eta_cli(cluster, f"{namespace}/first")
    assert admitted_one.returncode == 2
    assert "not pending" in admitted_one.stderr
    missing = eta_cli(cluster, f"{namespace}/nobody")
    assert missing.returncode == 2
    assert "no such gang" in missing.stderr
