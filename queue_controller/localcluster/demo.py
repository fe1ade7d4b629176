"""`make run`: the local GPU cluster, the controller, and example gangs queued and admitted.

Idempotent: it starts what is not running yet, replays the example Jobs from
scratch, and watches the PodGroups for a while.  Everything it starts stays up
afterwards; `make cluster-down` stops it all.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from queue_controller.localcluster.cluster import ClusterError, LocalCluster
from queue_controller.localcluster.state import State, controller_alive
from queue_controller.nodepools import NodePools

LEASE_NAMESPACE = "queue-controller-system"
# Built by `make run` (deploy/local-cluster/operators/build.sh).
DEMO_OPERATORS = ("kuberay", "training-operator")
Report = Callable[[str], None]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _controller_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            body = json.loads(response.read())
    except (OSError, json.JSONDecodeError):
        return False
    return bool(body.get("ready") and body.get("leader"))


class Demo:
    def __init__(self, cluster: LocalCluster, *, root: Path, report: Report) -> None:
        self.cluster, self.root, self.report = cluster, root, report

    def run(self, pools: NodePools, *, watch_seconds: float, gap_seconds: float = 1.0) -> None:
        # The operators run the demo's RayJobs and PyTorchJob (examples/ray-jobs.yaml,
        # examples/training-jobs.yaml).
        self.cluster.up(pools, operators=DEMO_OPERATORS)
        self._install()
        self.start_controller()
        self._submit(gap_seconds)
        if watch_seconds > 0:
            self._watch(watch_seconds)
        kubeconfig = self.cluster.layout.kubeconfig
        self.report(
            "\nThe cluster and the controller keep running.  Look around with:\n"
            f"  export KUBECONFIG={kubeconfig} PATH={self.cluster.layout.bin_dir}:$PATH\n"
            "  kubectl get podgroups,queues -A; kubectl get teamquotas\n"
            "  kubectl describe podgroup -n research pretrain-llm\n"
            f"  .venv/bin/queue-controller eta -A --kubeconfig {kubeconfig}\n"
            "  kubectl get pytorchjobs -n research; "
            "kubectl describe podgroup -n research pytorchjob-ddp-resnet\n"
            "  kubectl get rayjobs,rayclusters -n research; "
            "kubectl describe podgroup -n research rayjob-tune-too-big\n"
            "  .venv/bin/queue-controller history --db "
            f"sqlite:///{self.cluster.layout.state_dir / 'journal.db'}\n"
            "Stop everything with `make cluster-down`."
        )

    def _install(self) -> None:
        kubectl = self.cluster.kubectl
        kubectl("apply", "-f", str(self.root / "crds"))
        for plural in ("teamquotas", "cohorts", "topologies", "queues", "podgroups"):
            kubectl(
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                f"crd/{plural}.queue-controller.io",
            )
        lease_namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": LEASE_NAMESPACE},
        }
        kubectl("apply", "-f", "-", stdin=json.dumps(lease_namespace))
        examples = self.root / "examples"
        for name in (
            "namespaces.yaml",
            "teamquotas.yaml",
            "cohorts.yaml",
            "queues.yaml",
            "topology.yaml",
        ):
            kubectl("apply", "-f", str(examples / name))
        self.report("CRDs, namespaces, TeamQuotas, the Cohort, Topologies and Queues installed")

    def start_controller(self, launcher: Sequence[str] = ()) -> int:
        """Start `queue-controller run` as `make run` does (also what `make bench-e2e`
        measures); its PID, kept in the cluster's state so that `down` stops it.
        ``launcher``: what runs ``-m queue_controller`` instead of this Python (a
        profiler's, ``python -m memray run ...``, for `make bench-e2e ... --profile`)."""
        layout = self.cluster.layout
        state = State.load(layout.state_file)
        if state is None:
            raise ClusterError("the local cluster is not running")
        if state.controller_pid is not None and controller_alive(state.controller_pid):
            self.report(f"the controller is already running (pid {state.controller_pid})")
            return state.controller_pid
        port = _free_port()
        log = (layout.logs / "queue-controller.log").open("wb")
        process = subprocess.Popen(
            [
                *(launcher or (sys.executable,)),
                "-m",
                "queue_controller",
                "run",
                "--kubeconfig",
                str(layout.kubeconfig),
                "--namespace",
                LEASE_NAMESPACE,
                "--metrics-port",
                str(port),
                "--webhook-port",
                str(_free_port()),
                "--journal",
                f"sqlite:///{layout.state_dir / 'journal.db'}",
                "--tick",
                "1",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # keeps running after `make run`
        )
        log.close()
        state.controller_pid = process.pid
        state.ports["queue-controller"] = port
        state.save(layout.state_file)
        deadline = time.monotonic() + 60
        while not _controller_ready(port):
            if process.poll() is not None or time.monotonic() > deadline:
                log_path = layout.logs / "queue-controller.log"
                raise ClusterError(f"the controller did not become ready; see {log_path}")
            time.sleep(0.25)
        self.report(f"controller running (pid {process.pid}, metrics on 127.0.0.1:{port}/metrics)")
        return process.pid

    def _submit(self, gap_seconds: float) -> None:
        # The Jobs, then a plain Pod gang made pod by pod, as an operator makes one, then
        # the gangs that must stay within one NVLink clique, then Jobs claiming GPUs by DRA,
        # then a PyTorchJob and two RayJobs, which their operators run once admitted.
        files = ("jobs.yaml", "pod-gang.yaml", "topology-jobs.yaml", "dra-jobs.yaml")
        for name in (*files, "training-jobs.yaml", "ray-jobs.yaml"):
            path = self.root / "examples" / name
            self.cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait=true")
            for doc in (d for d in yaml.safe_load_all(path.read_text()) if d):
                self.cluster.kubectl("create", "-f", "-", stdin=yaml.safe_dump(doc))
                meta = doc["metadata"]
                self.report(f"submitted {doc['kind']} {meta['namespace']}/{meta['name']}")
                time.sleep(gap_seconds)  # arrival order is queue order

    def _watch(self, seconds: float) -> None:
        self.report(f"\nkubectl get podgroups -A -w   (for {seconds:.0f}s)\n")
        watcher = subprocess.Popen(
            [
                str(self.cluster.layout.binary("kubectl")),
                "--kubeconfig",
                str(self.cluster.layout.kubeconfig),
                "get",
                "podgroups",
                "-A",
                "-w",
            ],
            stdout=sys.stdout,
            stderr=subprocess.STDOUT,
        )
        try:
            watcher.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            watcher.send_signal(signal.SIGINT)
            watcher.wait(timeout=5)
        self.report("")
        self.report(self.cluster.kubectl("get", "podgroups", "-A"))
        self._eta()

    def _eta(self) -> None:
        """When each gang still waiting should start: ``queue-controller eta -A``."""
        self.report("\nqueue-controller eta -A\n")
        shown = subprocess.run(
            [
                sys.executable,
                "-m",
                "queue_controller",
                "eta",
                "-A",
                "--kubeconfig",
                str(self.cluster.layout.kubeconfig),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        self.report((shown.stdout or shown.stderr).rstrip())
