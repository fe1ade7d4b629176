"""One system's run: a fresh local control plane, the system, the trace replayed, measured.

The cluster is started with `queue-controller local-cluster up` in its own state
directory (under --out, never the repository's .cluster or the tests' .cluster-test) on
free loopback ports, with an audit log, and taken down afterwards whatever happened.
Systems run one after another: never two clusters at once from here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queue_controller.localcluster import Layout, LocalCluster
from tests.bench.e2e import profile
from tests.bench.e2e.apiwatch import ApiWatch, api_client
from tests.bench.e2e.cost import AUDIT_POLICY, ProcessCost, process_cost, requests_by_client
from tests.bench.e2e.shape import NODES_FILE, ROOT, ClusterShape
from tests.bench.e2e.systems import QueueController, System, apply, namespaces
from tests.bench.e2e.teams import QueueSettings
from tests.bench.e2e.trace import Gang, Trace, job_manifest
from tests.bench.e2e.watch import Episode, Recorder

DEPLOY = ROOT / "deploy" / "local-cluster"
SUBMIT_THREADS = 16
Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunConfig:
    out: Path
    shape: ClusterShape
    trace: Trace
    settings: QueueSettings
    timeout: float | None = None  # None: from the trace (deadline())
    profile: bool = False  # our controller's CPU and memory profiles (profile.py)
    bin_dir: Path = DEPLOY / "bin"
    stages: Path = DEPLOY / "kwok-stages.yaml"
    node_file: Path = NODES_FILE


@dataclass
class SystemRun:
    name: str
    recorder: Recorder
    episodes: list[Episode] = field(default_factory=list)
    end: float = 0.0  # seconds since the run started, when measuring stopped
    timed_out: bool = False
    cost: ProcessCost | None = None
    requests: dict[str, int] | None = None
    clients: tuple[str, ...] = ()
    cluster_seconds: float = 0.0  # starting the control plane and the system
    wall_seconds: float = 0.0
    submit_errors: list[str] = field(default_factory=list)
    watch_restarts: int = 0
    own_metrics: dict[str, Any] | None = None  # the system's own account (never compared)
    profile: list[str] = field(default_factory=list)  # the memory peak's text, with --profile
    # (seconds since the run started, CPU seconds so far, RSS bytes), once a second.
    usage: list[tuple[float, float, int]] = field(default_factory=list)


def deadline(trace: Trace, shape: ClusterShape) -> float:
    """Seconds to wait for the last gang: its arrival, three times the work's lower bound
    on the whole cluster, two longest runtimes, and two minutes of slack."""
    demand = sum(trace.gpus(g, shape) * g.runtime_seconds for g in trace.gangs)
    last = max((g.arrival_seconds for g in trace.gangs), default=0.0)
    longest = max((g.runtime_seconds for g in trace.gangs), default=0.0)
    return last + 3 * demand / max(shape.total_gpus, 1.0) + 2 * longest + 120


def start_cluster(config: RunConfig, state_dir: Path, log: Path) -> LocalCluster:
    """`queue-controller local-cluster up` for this run's nodes, with an audit log."""
    policy = config.out / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    sizes = [f"--size={pool}={count}" for pool, count in config.shape.sizes.items()]
    command = [
        sys.executable, "-m", "queue_controller", "local-cluster", "up",
        f"--state-dir={state_dir}", f"--bin-dir={config.bin_dir.resolve()}",
        f"--stages={config.stages.resolve()}", f"--nodes={config.node_file.resolve()}",
        *sizes, "--no-dra", "--timeout=900", f"--audit-policy={policy.resolve()}",
    ]  # fmt: skip
    with log.open("wb") as output:
        result = subprocess.run(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)
    cluster = LocalCluster(Layout(config.bin_dir, state_dir, config.stages), report=lambda _: None)
    if result.returncode != 0:
        cluster.down()
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError("local-cluster up failed:\n" + "\n".join(tail))
    return cluster


class Submitter(threading.Thread):
    """Creates each gang's Job at its arrival time; the submit time is taken client side,
    just before the create.

    Creates run on ``SUBMIT_THREADS`` threads: a create waits for the API server and for
    the queueing system's webhook (about 0.4 s each at 1,000 nodes on this machine), so one
    at a time the harness, not the system, would set the arrival rate.
    """

    def __init__(
        self,
        config: RunConfig,
        system: System,
        recorder: Recorder,
        clock: Callable[[], float],
        kubeconfig: Path,
    ) -> None:
        super().__init__(name="submitter", daemon=True)
        self.config, self.system, self.recorder, self.clock = config, system, recorder, clock
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.kubeconfig = kubeconfig
        self._local = threading.local()  # one API client per thread
        self._lock = threading.Lock()

    def run(self) -> None:
        with ThreadPoolExecutor(SUBMIT_THREADS, thread_name_prefix="submit") as pool:
            for gang in sorted(self.config.trace.gangs, key=lambda g: g.arrival_seconds):
                wait = gang.arrival_seconds - self.clock()
                if wait > 0 and self.stopping.wait(wait):
                    return
                pool.submit(self._submit, gang)

    @property
    def batch(self) -> client.BatchV1Api:
        api: client.BatchV1Api | None = getattr(self._local, "batch", None)
        if api is None:
            api = client.BatchV1Api(api_client(self.kubeconfig))
            self._local.batch = api
        return api

    def _submit(self, gang: Gang) -> None:
        if self.stopping.is_set():
            return  # the run timed out with this one still queued for a thread
        label = self.system.queue_label
        body = job_manifest(gang, queue_label=label)
        self.recorder.submitted(
            f"{gang.namespace}/{gang.name}",
            self.clock(),
            pods=gang.pods,
            gpus_per_pod=self.config.shape.gpus(gang.resource, gang.per_pod),
            suspended=label is not None,
        )
        key = f"{gang.namespace}/{gang.name}"
        for attempt in range(5):
            try:
                self.batch.create_namespaced_job(gang.namespace, body)  # type: ignore[arg-type]
                return
            except ApiException as error:
                if error.status == 409:
                    return
                why = f"{key}: {error.status} {error.reason}"
            except Exception as error:  # the API server busy or restarting
                why = f"{key}: {error}"
            time.sleep(0.5 * (attempt + 1))
        with self._lock:
            self.errors.append(why)
        self.recorder.withdraw(key)


def run_system(system: System, config: RunConfig, progress: Progress) -> SystemRun:
    wall = time.monotonic()
    folder = config.out / system.name
    folder.mkdir(parents=True, exist_ok=True)
    state_dir = (config.out / "clusters" / system.name).resolve()
    progress(f"{system.name}: starting a local cluster of {config.shape.nodes} nodes")
    cluster = start_cluster(config, state_dir, folder / "cluster-up.log")
    recorder = Recorder()
    outcome = SystemRun(system.name, recorder, clients=system.clients)
    try:
        teams = config.trace.teams
        apply(cluster, namespaces(teams))
        since = time.time()  # requests from here on: the system's and the run's
        system.install(cluster, teams, config.settings)
        # Only our controller is profiled: Kueue is Go, and no-queue runs nothing.
        profiling = config.profile and isinstance(system, QueueController)
        if isinstance(system, QueueController) and profiling:
            system.launcher = profile.memray_launcher(folder)
        pid = system.start(cluster)
        cpu = profile.CpuProfile.start(pid, folder) if profiling and pid is not None else None
        outcome.cluster_seconds = round(time.monotonic() - wall, 1)
        _replay(system, config, cluster, recorder, outcome, progress, pid)
        outcome.cost = process_cost(pid) if pid is not None else None
        outcome.own_metrics = system.own_metrics(cluster)
        time.sleep(2)  # the audit log is written in batches, at most a second apart
        outcome.requests = requests_by_client(cluster.layout.logs / "audit.log", since)
        if cpu is not None and pid is not None:
            cpu.stop()
            progress(f"{system.name}: stopping the controller for its memory profile")
            profile.stop_process(pid)
            outcome.profile = profile.memory_report(folder)
    finally:
        try:
            system.stop()
        finally:
            _keep_logs(cluster, folder)
            cluster.down()
    outcome.wall_seconds = round(time.monotonic() - wall, 1)
    return outcome


def _replay(
    system: System,
    config: RunConfig,
    cluster: LocalCluster,
    recorder: Recorder,
    outcome: SystemRun,
    progress: Progress,
    pid: int | None = None,
) -> None:
    started = time.monotonic()

    def clock() -> float:
        return time.monotonic() - started

    watcher = ApiWatch(
        cluster.layout.kubeconfig, recorder, clock, {t.namespace for t in config.trace.teams}
    )
    watcher.start()
    submitter = Submitter(config, system, recorder, clock, cluster.layout.kubeconfig)
    limit = config.timeout if config.timeout is not None else deadline(config.trace, config.shape)
    total = len(config.trace.gangs)
    submitter.start()
    try:
        while True:
            counts = recorder.counts()
            alloc = recorder.allocated / max(config.shape.total_gpus, 1.0)
            progress(
                f"{system.name}: {clock():6.0f}s  submitted {counts['submitted']}/{total}  "
                f"admitted {counts['admitted']}  placed {counts['placed']}  "
                f"done {counts['completed']}  evictions {counts['evictions']}  "
                f"allocated {alloc:4.0%}"
            )
            now = process_cost(pid) if pid is not None else None
            if now is not None:
                outcome.usage.append((round(clock(), 2), now.cpu_seconds, now.rss_bytes))
            if not submitter.is_alive() and counts["completed"] >= counts["submitted"]:
                break
            if clock() > limit:
                outcome.timed_out = True
                break
            time.sleep(1)
    finally:
        submitter.stopping.set()
        outcome.end = clock()
        watcher.stop()
    outcome.episodes = recorder.close(outcome.end)
    outcome.submit_errors = submitter.errors
    outcome.watch_restarts = watcher.restarts


def _keep_logs(cluster: LocalCluster, folder: Path) -> None:
    """The system's own log (the control plane's are large and say nothing of it)."""
    logs = cluster.layout.logs
    for name in ("queue-controller.log",):
        if (logs / name).exists():
            shutil.copy(logs / name, folder / name)
