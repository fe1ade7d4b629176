"""Fixtures for tests on the real local control plane.

The session starts its own cluster (state in ``.cluster-test/``, random
loopback ports) and stops it when the session ends, whether tests passed or
failed.  Set ``QC_TEST_KUBECONFIG`` to run against a cluster that is already
up instead; it is then left running.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from queue_controller import nodepools
from queue_controller.localcluster import Layout, LocalCluster
from tests.cluster.controller_harness import LEASE_NAMESPACE, ControllerProcess
from tests.cluster.invariants import BackgroundCheck
from tests.cluster.workloads import Objects

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "local-cluster"


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    kubectl_binary: Path
    api: client.ApiClient
    local: LocalCluster | None  # None when the session did not start it

    def kubectl(self, *args: str) -> str:
        result = subprocess.run(
            [str(self.kubectl_binary), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return result.stdout

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    kubectl = DEPLOY / "bin" / "kubectl"
    existing = os.environ.get("QC_TEST_KUBECONFIG")
    if existing:
        api = config.new_client_from_config(config_file=existing)
        yield Cluster(Path(existing), kubectl, api, None)
        return
    layout = Layout(
        bin_dir=DEPLOY / "bin",
        # QC_TEST_CLUSTER_STATE: a second state folder, so two sessions (two checkouts'
        # worth of work on one machine) can each run a cluster at once.
        state_dir=Path(os.environ.get("QC_TEST_CLUSTER_STATE", ROOT / ".cluster-test")),
        stages=DEPLOY / "kwok-stages.yaml",
    )
    if not kubectl.exists():
        pytest.fail("the local control plane is not built: run `make cluster-build`")
    local = LocalCluster(layout, report=print)
    pools = nodepools.load(DEPLOY / "nodes.yaml")
    local.up(pools)
    try:
        api = config.new_client_from_config(config_file=str(layout.kubeconfig))
        yield Cluster(layout.kubeconfig, kubectl, api, local)
    finally:
        local.down()


OPERATORS = ("kuberay", "training-operator")


@pytest.fixture(scope="session")
def operators(cluster: Cluster) -> None:
    """KubeRay and Kubeflow's training-operator, running against the session's cluster
    (started on first use; they stop with the cluster)."""
    if cluster.local is None:
        pytest.skip("the operators run only on a cluster this session started")
    for name in OPERATORS:
        if not (DEPLOY / "bin" / "crds" / name).is_dir():
            pytest.fail(
                f"{name} is not built: run `deploy/local-cluster/operators/build.sh "
                f"{' '.join(OPERATORS)}` (make cluster-test does)"
            )
    cluster.local.start_operators(OPERATORS)


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    """Our CRDs, installed and established."""
    cluster.kubectl("apply", "-f", str(ROOT / "crds"))
    for plural in ("teamquotas", "cohorts", "topologies", "queues", "podgroups"):
        cluster.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            f"crd/{plural}.queue-controller.io",
        )


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test.

    Its Jobs and pods are deleted, and waited for, before the namespace goes, so
    the GPUs they held are free for the next test.
    """
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    batch = cluster.batch
    for job in batch.list_namespaced_job(name).items:
        try:
            batch.delete_namespaced_job(job.metadata.name, name, propagation_policy="Background")
        except ApiException as error:
            if error.status != 404:  # already gone (the test deleted it, or the GC did)
                raise
    cluster.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    deadline = time.monotonic() + 30
    while cluster.core.list_namespaced_pod(name).items and time.monotonic() < deadline:
        time.sleep(0.2)
    cluster.core.delete_namespace(name)


# -- the controller, as a subprocess, for every test that needs it ------------------


@pytest.fixture(scope="session")
def journal_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('journal') / 'journal.db'}"


class FakeDcgmExporter:
    """A local HTTP server standing in for dcgm-exporter: tests set what /metrics says."""

    def __init__(self) -> None:
        self.body = ""  # no GPUs reported: DCGM changes nothing until a test says so
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                data = outer.body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"


@pytest.fixture(scope="session")
def dcgm() -> Iterator[FakeDcgmExporter]:
    exporter = FakeDcgmExporter()
    yield exporter
    exporter.server.shutdown()


@pytest.fixture(scope="session")
def controller(
    cluster: Cluster,
    crds: None,
    journal_url: str,
    dcgm: FakeDcgmExporter,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ControllerProcess]:
    try:
        cluster.core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=LEASE_NAMESPACE))
        )
    except ApiException as error:
        if error.status != 409:
            raise
    process = ControllerProcess(
        kubeconfig=cluster.kubeconfig,
        journal=journal_url,
        logs=tmp_path_factory.mktemp("controller-logs"),
        identity="qc-a",
        # GPU health from the fake exporter, read every second; a GPU is
        # trusted again 3 s after its last fault, so recovery fits in a test.
        # Gangs whose GPUs idle for 3 s are flagged.
        extra_args=(
            "--dcgm-urls",
            dcgm.url,
            "--dcgm-interval",
            "1",
            "--gpu-clear",
            "3",
            "--idle-window",
            "3",
            # Estimated starts written every 2 s (tests/cluster/test_eta.py).
            "--eta-interval",
            "2",
        ),
    )
    process.start()
    yield process
    process.stop()


@pytest.fixture
def objects(cluster: Cluster, namespace: str, controller: ControllerProcess) -> Iterator[Objects]:
    made = Objects(cluster, namespace)
    yield made
    made.cleanup()


@pytest.fixture(autouse=True)
def invariants(request: pytest.FixtureRequest) -> Iterator[None]:
    """``check`` in the background of every test that runs the controller (see
    tests/cluster/invariants.py); a broken invariant fails the test at teardown."""
    if "controller" not in request.fixturenames or "namespace" not in request.fixturenames:
        yield
        return
    if request.node.get_closest_marker("breaks_invariants") is not None:
        yield
        return
    cluster: Cluster = request.getfixturevalue("cluster")
    namespace: str = request.getfixturevalue("namespace")
    with BackgroundCheck(cluster.kubeconfig, namespace) as checker:
        yield
        checker.look_once()  # the state the test ended in, too
    broken = "\n".join(
        f"  {v.invariant.value}: {v.message} ({', '.join(v.objects)})"
        for v in checker.seen.values()
    )
    assert not checker.seen, f"invariants broken during the test:\n{broken}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report carries what the controller said and what its namespace
    held then: a failure that comes once in hundreds of runs must be readable from
    that one run's output."""
    report: pytest.TestReport = yield
    if report.when != "call" or not report.failed:
        return report
    funcargs = getattr(item, "funcargs", {})
    process = funcargs.get("controller")
    if isinstance(process, ControllerProcess):
        report.sections.append(("controller log, last 150 lines", process.log_tail(150)))
    cluster, namespace = funcargs.get("cluster"), funcargs.get("namespace")
    if isinstance(cluster, Cluster) and isinstance(namespace, str):
        try:
            state = cluster.kubectl(
                "get", "jobs,pods,podgroups,events", "-n", namespace, "-o", "wide"
            )
        except subprocess.CalledProcessError as error:
            state = f"(kubectl failed: {error.stderr})"
        report.sections.append((f"namespace {namespace}", state))
    return report
