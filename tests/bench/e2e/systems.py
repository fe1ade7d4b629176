"""The systems under test, each installed on a freshly started local control plane.

* ``queue-controller``: our CRDs, a TeamQuota and a Queue per team, and the controller
  started as `make run` starts it (Demo.start_controller).
* ``kueue``: Kueue v0.17.0, from tests/bench/e2e/kueue.py (written apart); optional.
* ``no-queue``: nothing: the Jobs start unsuspended and kube-scheduler alone places pods.

Each system gets the same kwok nodes, teams and waiting rules (teams.py); only the queue
label on the Jobs differs (trace.job_manifest).
"""

from __future__ import annotations

import importlib
import json
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from queue_controller.localcluster import LocalCluster
from queue_controller.localcluster.demo import LEASE_NAMESPACE, Demo
from queue_controller.localcluster.state import State
from tests.bench.e2e.shape import ROOT, ClusterShape
from tests.bench.e2e.teams import QUEUE_NAME, QueueSettings, TeamSpec
from tests.bench.e2e.trace import OUR_QUEUE_LABEL

SYSTEMS = ("queue-controller", "kueue", "no-queue")
Report = Callable[[str], None]


class SystemUnavailable(Exception):
    """The system cannot run on this branch or machine (said in the report, then skipped)."""


class System(Protocol):
    name: str
    queue_label: str | None  # None: Jobs are created unsuspended and unlabelled
    clients: tuple[str, ...]  # its user agents' names in the audit log (cost.client_of)

    def prepare(self) -> None:
        """Whatever is needed before any cluster starts (a build); may raise
        SystemUnavailable."""

    def install(
        self, cluster: LocalCluster, teams: Sequence[TeamSpec], settings: QueueSettings
    ) -> None: ...

    def start(self, cluster: LocalCluster) -> int | None:
        """Start it; the PID whose CPU and memory are its cost (None: no process)."""

    def stop(self) -> None: ...

    def own_metrics(self, cluster: LocalCluster) -> dict[str, Any] | None:
        """What the system says of itself (for the report's diagnostics, never compared)."""


def apply(cluster: LocalCluster, objects: Sequence[dict[str, Any]]) -> None:
    if objects:
        cluster.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
        )


def namespaces(teams: Sequence[TeamSpec]) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        for ns in sorted({t.namespace for t in teams})
    ]


# -- queue-controller -------------------------------------------------------------------


def team_quota(team: TeamSpec) -> dict[str, Any]:
    resources: dict[str, dict[str, int]] = {}
    for resource, nominal in team.nominal.items():
        resources[resource] = {"nominal": nominal}
        if resource in team.borrowing_limit:
            resources[resource]["borrowingLimit"] = team.borrowing_limit[resource]
    spec: dict[str, Any] = {"resources": resources}
    if team.cohort:
        spec["cohort"] = team.cohort
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "TeamQuota",
        "metadata": {"name": team.name},
        "spec": spec,
    }


def queue(team: TeamSpec, settings: QueueSettings) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "teamQuota": team.name,
        "podsReadyTimeoutSeconds": settings.pods_ready_timeout_seconds,
        "requeue": {
            "backoffBaseSeconds": settings.backoff_base_seconds,
            "backoffMaxSeconds": settings.backoff_max_seconds,
        },
    }
    if settings.reservation_after_seconds is not None:
        spec["reservation"] = {"afterSeconds": settings.reservation_after_seconds}
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": QUEUE_NAME, "namespace": team.namespace},
        "spec": spec,
    }


class QueueController:
    name = "queue-controller"
    queue_label: str | None = OUR_QUEUE_LABEL
    # kopf watches (user agent kopf/...); the Python client writes (OpenAPI-Generator/...).
    clients: tuple[str, ...] = ("python-client", "kopf")
    # What runs the controller's module: a profiler's (profile.memray_launcher) or ours.
    launcher: tuple[str, ...] = ()

    def prepare(self) -> None:
        pass

    def install(
        self, cluster: LocalCluster, teams: Sequence[TeamSpec], settings: QueueSettings
    ) -> None:
        cluster.kubectl("apply", "-f", str(ROOT / "crds"))
        for plural in ("teamquotas", "cohorts", "topologies", "queues", "podgroups"):
            cluster.kubectl(
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                f"crd/{plural}.queue-controller.io",
            )
        lease = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}}
        apply(cluster, [lease, *(team_quota(t) for t in teams)])
        apply(cluster, [queue(t, settings) for t in teams])

    def start(self, cluster: LocalCluster) -> int | None:
        return Demo(cluster, root=ROOT, report=lambda _: None).start_controller(self.launcher)

    def stop(self) -> None:
        pass  # LocalCluster.down stops the controller first, by the PID in its state

    def own_metrics(self, cluster: LocalCluster) -> dict[str, Any] | None:
        """The controller's cycles: count, and seconds in each phase (sum, mean)."""
        state = State.load(cluster.layout.state_file)
        port = state.ports.get("queue-controller") if state is not None else None
        if port is None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text = r.read().decode()
        except OSError as error:
            return {"error": f"metrics not read: {error}"}
        return cycle_phases(text)


def cycle_phases(text: str) -> dict[str, Any]:
    """From the controller's Prometheus text: cycles run, and per phase its total and
    mean seconds (queue_controller_scheduling_cycle_phase_seconds)."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "queue_controller_scheduling_cycle_phase_seconds":
            continue
        for sample in family.samples:
            phase = sample.labels.get("phase", "")
            if sample.name.endswith("_sum"):
                sums[phase] = sample.value
            elif sample.name.endswith("_count"):
                counts[phase] = sample.value
    cycles = int(max(counts.values(), default=0))
    return {
        "cycles": cycles,
        "phase_seconds": {phase: round(total, 3) for phase, total in sorted(sums.items())},
        "phase_mean_seconds": {
            phase: round(total / counts[phase], 4)
            for phase, total in sorted(sums.items())
            if counts.get(phase)
        },
    }


# -- no queue ----------------------------------------------------------------------------


class NoQueue:
    name = "no-queue"
    queue_label: str | None = None
    clients: tuple[str, ...] = ()

    def prepare(self) -> None:
        pass

    def install(
        self, cluster: LocalCluster, teams: Sequence[TeamSpec], settings: QueueSettings
    ) -> None:
        pass

    def start(self, cluster: LocalCluster) -> int | None:
        return None

    def stop(self) -> None:
        pass

    def own_metrics(self, cluster: LocalCluster) -> dict[str, Any] | None:
        return None


# -- Kueue --------------------------------------------------------------------------------


class KueueSystem:
    """Kueue v0.17.0 through tests/bench/e2e/kueue.py, imported only when asked for."""

    name = "kueue"
    queue_label: str | None = "kueue.x-k8s.io/queue-name"  # kueue.QUEUE_LABEL, once imported
    clients: tuple[str, ...] = ("kueue", "manager")

    def __init__(self, bin_dir: Path, workdir: Path, gpu_products: Sequence[str]) -> None:
        self.bin_dir, self.workdir, self.gpu_products = bin_dir, workdir, gpu_products
        self.module: Any = None
        self.binary: Path | None = None
        self.instance: Any = None

    def prepare(self) -> None:
        try:
            self.module = importlib.import_module("tests.bench.e2e.kueue")
        except ModuleNotFoundError as error:
            if error.name != "tests.bench.e2e.kueue":
                raise
            raise SystemUnavailable("kueue: not available on this branch") from None
        self.queue_label = str(self.module.QUEUE_LABEL)
        try:
            self.binary = self.module.build(self.bin_dir)
        except Exception as error:  # a failed go install: say why, run the others
            raise SystemUnavailable(f"kueue: build failed: {error}") from error

    def install(
        self, cluster: LocalCluster, teams: Sequence[TeamSpec], settings: QueueSettings
    ) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.instance = self.module.Kueue(
            kubeconfig=cluster.layout.kubeconfig, workdir=self.workdir, binary=self.binary
        )
        self.instance.install(teams, settings, self.gpu_products)

    def start(self, cluster: LocalCluster) -> int | None:
        self.instance.start()
        return int(self.instance.pid)

    def stop(self) -> None:
        if self.instance is not None:
            self.instance.stop()

    def own_metrics(self, cluster: LocalCluster) -> dict[str, Any] | None:
        return None


def make(name: str, *, shape: ClusterShape, workdir: Path) -> System:
    if name == "queue-controller":
        return QueueController()
    if name == "no-queue":
        return NoQueue()
    if name == "kueue":
        return KueueSystem(ROOT / "deploy" / "local-cluster" / "bin", workdir, shape.products)
    raise ValueError(f"unknown system {name!r}; one of {', '.join(SYSTEMS)}")
