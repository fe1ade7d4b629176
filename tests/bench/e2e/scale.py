"""The controller's cycle at scale, on the real local control plane (issue 16, item 5).

    python -m tests.bench.e2e.scale                       # 2,000 nodes, 20,000 pods, 5,000 gangs
    python -m tests.bench.e2e.scale --nodes 100 --pods 1000 --gangs 200 --window 20

A fresh local control plane with ``--nodes`` kwok nodes (bench-e2e's mixed GPU pools) is
filled with ``--pods`` running pods placed straight on the nodes (about three quarters of
the GPUs, the rest CPU-only pods, as a busy cluster holds), and ``--gangs`` queued Jobs
too big to fit in what is left, so that every one of them stays pending.  Then the
controller starts as `make run` starts it, creates a PodGroup for every gang, and
settles: until it writes fewer than ``--quiet-writes`` a second (the first pending reason
of thousands of gangs, each with its events, takes minutes).  Over the next ``--window``
seconds, while ``--churn`` filler pods a second end and are replaced, its own metrics say
how long each cycle spent in each phase:

* ``translate``: raw objects to the snapshot and the gang views (kube/snapshot.py);
* ``core``: the pure decisions (core.schedule);
* ``plan``: decisions to writes (controller/lifecycle.py);
* ``apply``: the writes.

The report (``scale.json`` and a table under ``--out``) gives each phase's mean, the
full cycle against the core's own time (target: at most 2x), and the controller's peak
RSS (target: under 1 GiB), read from /proc.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from queue_controller.localcluster import LocalCluster
from queue_controller.localcluster.state import State
from tests.bench.e2e import profile
from tests.bench.e2e.apiwatch import api_client
from tests.bench.e2e.cost import process_cost
from tests.bench.e2e.runner import RunConfig, start_cluster
from tests.bench.e2e.shape import GPU, shape
from tests.bench.e2e.systems import QueueController, apply, cycle_phases, namespaces
from tests.bench.e2e.teams import QUEUE_NAME, QueueSettings
from tests.bench.e2e.trace import OUR_QUEUE_LABEL, Trace, default_teams

PHASES = ("translate", "core", "plan", "apply")
FILL_THREADS = 16


def _filler(name: str, namespace: str, node: str, gpus: int) -> dict[str, Any]:
    resources = {GPU: str(gpus)} if gpus else {"cpu": "100m"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "filler"}},
        "spec": {
            "nodeName": node,  # placed straight on its node: no scheduler, no queue
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "work",
                    "image": "bench/filler:none",
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        },
    }


def _pending_job(name: str, namespace: str, pods: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {OUR_QUEUE_LABEL: QUEUE_NAME},
        },
        "spec": {
            "suspend": True,
            "parallelism": pods,
            "completions": pods,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "bench/worker:none",
                            "resources": {"limits": {GPU: "8"}, "requests": {GPU: "8"}},
                        }
                    ],
                }
            },
        },
    }


def _gpu_nodes(core: client.CoreV1Api) -> list[tuple[str, int]]:
    listed = json.loads(core.list_node(_preload_content=False).data)  # type: ignore[attr-defined]
    out = []
    for node in listed["items"]:
        allocatable = node.get("status", {}).get("allocatable") or {}
        out.append((str(node["metadata"]["name"]), int(allocatable.get(GPU, "0"))))
    return sorted(out)


def fillers(nodes: list[tuple[str, int]], count: int, teams: list[str]) -> list[dict[str, Any]]:
    """``count`` pods spread over ``nodes``: 1-GPU pods up to three quarters of each node's
    GPUs, CPU-only pods for the rest."""
    out: list[dict[str, Any]] = []
    per_node = max(1, -(-count // max(len(nodes), 1)))
    for index, (node, gpus) in enumerate(nodes):
        gpu_pods = gpus * 3 // 4
        for slot in range(per_node):
            if len(out) == count:
                return out
            team = teams[(index + slot) % len(teams)]
            out.append(_filler(f"fill-{index}-{slot}", team, node, 1 if slot < gpu_pods else 0))
    return out


def _create_all(objects: list[dict[str, Any]], create: Any, progress: Any, what: str) -> list[str]:
    errors: list[str] = []
    done = 0
    lock = threading.Lock()

    def one(obj: dict[str, Any]) -> None:
        nonlocal done
        meta = obj["metadata"]
        for attempt in range(5):
            try:
                create(meta["namespace"], obj)
                break
            except ApiException as error:
                if error.status == 409:
                    break
                if attempt == 4:
                    errors.append(f"{meta['name']}: {error.status} {error.reason}")
            except Exception as error:  # the API server busy: try again
                if attempt == 4:
                    errors.append(f"{meta['name']}: {error}")
            time.sleep(0.5 * (attempt + 1))
        with lock:
            done += 1
            if done % 1000 == 0 or done == len(objects):
                progress(f"created {done:,}/{len(objects):,} {what}")

    with ThreadPoolExecutor(FILL_THREADS) as pool:
        list(pool.map(one, objects))
    return errors


def _metrics(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {**cycle_phases(text), "writes": writes_total(text)}


def writes_total(text: str) -> float:
    """Every write the controller has sent (queue_controller_api_writes_total, summed)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "queue_controller_api_writes"
        for sample in family.samples
        if sample.name.endswith("_total")
    )


def _settle_writes(port: int, args: argparse.Namespace, progress: Any) -> float:
    """Wait until the controller writes fewer than ``--quiet-writes`` a second (its first
    pending reasons for thousands of gangs take minutes); the seconds waited."""
    started = time.monotonic()
    last = _metrics(port)["writes"]
    while time.monotonic() - started < args.settle_timeout:
        time.sleep(args.quiet)
        now = _metrics(port)["writes"]
        rate = (now - last) / args.quiet
        progress(f"the controller writes {rate:,.1f} a second")
        if rate < args.quiet_writes:
            break
        last = now
    return time.monotonic() - started


def _window(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Cycles and each phase's mean seconds between two readings of the metrics."""
    cycles = after["cycles"] - before["cycles"]
    spent = {
        phase: after["phase_seconds"].get(phase, 0.0) - before["phase_seconds"].get(phase, 0.0)
        for phase in PHASES
    }
    mean = {phase: round(spent[phase] / cycles, 4) if cycles else None for phase in PHASES}
    return {"cycles": cycles, "phase_seconds": spent, "phase_mean_seconds": mean}


def run(args: argparse.Namespace) -> dict[str, Any]:
    def progress(line: str) -> None:
        print(f"scale: {line}", file=sys.stderr, flush=True)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    cluster_shape = shape(args.nodes)
    teams = default_teams(cluster_shape)
    config = RunConfig(out=out, shape=cluster_shape, trace=Trace((), teams, "scale"),
                       settings=QueueSettings())  # fmt: skip
    progress(f"starting a local cluster of {args.nodes:,} nodes")
    started = time.monotonic()
    cluster = start_cluster(config, (out / "cluster").resolve(), out / "cluster-up.log")
    report: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "gangs": args.gangs}
    try:
        report.update(_measure(args, cluster, teams, config, progress))
    finally:
        cluster.down()
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    (out / "scale.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _measure(
    args: argparse.Namespace,
    cluster: LocalCluster,
    teams: Any,
    config: RunConfig,
    progress: Any,
) -> dict[str, Any]:
    apply(cluster, namespaces(teams))
    system = QueueController()
    system.install(cluster, teams, config.settings)
    api = api_client(cluster.layout.kubeconfig)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    names = [t.namespace for t in teams]
    nodes = _gpu_nodes(core)
    pods = fillers(nodes, args.pods, names)
    fill_started = time.monotonic()
    errors = _create_all(pods, core.create_namespaced_pod, progress, "pods")
    rng = random.Random(args.seed)
    jobs = [
        _pending_job(f"wait-{i:05d}", names[i % len(names)], rng.choice((2, 4, 8, 16)))
        for i in range(args.gangs)
    ]
    errors += _create_all(jobs, batch.create_namespaced_job, progress, "pending Jobs")
    fill_seconds = time.monotonic() - fill_started
    if args.profile:
        system.launcher = profile.memray_launcher(config.out)
    pid = system.start(cluster)
    assert pid is not None
    state = State.load(cluster.layout.state_file)
    assert state is not None
    port = state.ports["queue-controller"]
    progress("controller started; waiting for a PodGroup of every gang")
    settle_started = time.monotonic()
    while True:
        listed: Any = client.CustomObjectsApi(api).list_cluster_custom_object(
            "queue-controller.io", "v1alpha1", "podgroups"
        )
        groups = len(listed.get("items", []))
        progress(f"{groups:,}/{args.gangs:,} PodGroups")
        if groups >= args.gangs or time.monotonic() - settle_started > args.settle_timeout:
            break
        time.sleep(5)
    settle_seconds = time.monotonic() - settle_started
    quiet_seconds = _settle_writes(port, args, progress)
    before = _metrics(port)
    churn = _Churn(core, pods, args.churn)
    churn.start()
    progress(f"measuring for {args.window:.0f} s ({args.churn} filler pods replaced a second)")
    cpu = profile.CpuProfile.start(pid, config.out) if args.profile else None
    time.sleep(args.window)
    churn.stop()
    after = _metrics(port)
    cost = process_cost(pid)
    peak: list[str] = []
    if cpu is not None:
        cpu.stop()
        progress("stopping the controller for its memory profile")
        profile.stop_process(pid)
        peak = profile.memory_report(config.out)
    window = _window(before, after)
    mean = window["phase_mean_seconds"]
    cycle = sum(v for v in mean.values() if v is not None)
    planning = sum(mean[phase] or 0.0 for phase in ("translate", "core", "plan"))
    core_mean = mean["core"] or 0.0
    window["writes"] = after["writes"] - before["writes"]
    return {
        "objects_created_errors": errors[:20],
        "fill_seconds": round(fill_seconds, 1),
        "settle_seconds": round(settle_seconds, 1),
        "quiet_seconds": round(quiet_seconds, 1),
        "pod_groups": groups,
        "window_seconds": args.window,
        "churn_pods_per_second": args.churn,
        "churned_pods": churn.replaced,
        "window": window,
        "cycle_mean_seconds": round(cycle, 4),
        "cycle_over_core": round(cycle / core_mean, 2) if core_mean else None,
        "planning_over_core": round(planning / core_mean, 2) if core_mean else None,
        "peak_rss_bytes": cost.peak_rss_bytes if cost else None,
        # With --profile: the memory peak's largest sites (profile.py); files beside it.
        "profile": peak,
        "cpu_seconds": cost.cpu_seconds if cost else None,
        "since_start": after,
    }


class _Churn(threading.Thread):
    """Filler pods end and come back, ``rate`` a second: what a live cluster's cycles see."""

    def __init__(self, core: client.CoreV1Api, pods: list[dict[str, Any]], rate: int) -> None:
        super().__init__(name="churn", daemon=True)
        self.core, self.pods, self.rate = core, pods, rate
        self._stopping = threading.Event()
        self.replaced = 0

    def run(self) -> None:
        index = 0
        while self.rate and self.pods and not self._stopping.wait(1.0):
            for _ in range(self.rate):
                pod = self.pods[index % len(self.pods)]
                index += 1
                meta = pod["metadata"]
                try:
                    self.core.delete_namespaced_pod(
                        meta["name"], meta["namespace"], grace_period_seconds=0
                    )
                    renamed = {**pod, "metadata": {**meta, "name": f"{meta['name']}-r{index}"}}
                    self.core.create_namespaced_pod(meta["namespace"], renamed)  # type: ignore[arg-type]
                    self.replaced += 1
                except ApiException:
                    continue

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)


def table(report: dict[str, Any]) -> str:
    mean = report["window"]["phase_mean_seconds"]
    rss = report["peak_rss_bytes"]
    lines = [
        f"controller cycle at {report['nodes']:,} nodes, {report['pods']:,} running pods, "
        f"{report['gangs']:,} pending gangs ({report['window']['cycles']} cycles over "
        f"{report['window_seconds']:.0f} s, {report['churned_pods']} filler pods replaced)",
        "",
        "| phase | mean seconds a cycle |",
        "|---|---:|",
        *(f"| {phase} | {mean[phase]} |" for phase in PHASES),
        f"| full cycle | {report['cycle_mean_seconds']} |",
        "",
        f"- full cycle / core: {report['cycle_over_core']}x (target: at most 2x); without "
        f"the writes (translate + core + plan): {report.get('planning_over_core')}x; "
        f"{report['window'].get('writes', 0):,.0f} writes in the window",
        f"- controller peak RSS: {rss / 2**20:,.0f} MiB (target: under 1 GiB)"
        if rss
        else "- controller peak RSS: not read",
        f"- wall: {report['wall_seconds']} s (fill {report['fill_seconds']} s, "
        f"PodGroups {report['settle_seconds']} s, settling {report.get('quiet_seconds', 0)} s)",
    ]
    if report.get("profile"):
        lines += [
            "",
            "Profiles (--profile: the costs above are the profiled run's): "
            f"CPU [flame graph]({profile.CPU_SVG}), [speedscope]({profile.CPU_SPEEDSCOPE}); "
            f"memory at the peak [flame graph]({profile.MEMORY_HTML}), "
            f"[as text]({profile.MEMORY_PEAK})",
            "",
            "```",
            *report["profile"],
            "```",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.bench.e2e.scale",
        description="The controller's cycle at scale on the real local control plane: "
        "each phase timed, against the core's own time, plus peak RSS.",
    )
    parser.add_argument("--nodes", type=int, default=2000, help="kwok nodes (default 2000)")
    parser.add_argument("--pods", type=int, default=20000, help="running pods (default 20000)")
    parser.add_argument("--gangs", type=int, default=5000, help="pending gangs (default 5000)")
    parser.add_argument("--window", type=float, default=60, help="seconds measured (default 60)")
    parser.add_argument("--churn", type=int, default=5, help="filler pods replaced a second")
    parser.add_argument(
        "--quiet", type=float, default=20, help="seconds between looks while settling"
    )
    parser.add_argument(
        "--quiet-writes",
        type=float,
        default=5,
        help="settled once the controller writes fewer than this a second",
    )
    parser.add_argument("--settle-timeout", type=float, default=600, help="for the PodGroups")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy's CPU profile of the measured window and memray's memory peak, beside "
        "the report (the profiled run's costs are then not comparable)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-e2e-scale"), help="report folder")
    args = parser.parse_args(argv)
    if min(args.nodes, args.gangs) < 1 or args.pods < 0:
        parser.error("--nodes and --gangs must be at least 1, --pods at least 0")
    report = run(args)
    text = table(report)
    (args.out / "scale.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
