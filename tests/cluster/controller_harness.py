"""Run ``queue-controller run`` as a real subprocess against the local cluster.

Tests start, stop, kill and restart it like an operator would, and read its
``/metrics`` and ``/readyz`` over HTTP.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LEASE_NAMESPACE = "queue-controller-test"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ControllerProcess:
    def __init__(
        self,
        *,
        kubeconfig: Path,
        journal: str,
        logs: Path,
        identity: str,
        webhook: str = "local",
        timeout_seconds: int = 10,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.extra_args = extra_args
        self.kubeconfig, self.journal, self.logs = kubeconfig, journal, logs
        self.identity, self.webhook = identity, webhook
        self.timeout_seconds = timeout_seconds
        self.metrics_port = free_port()
        self.webhook_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, *, expect_leader: bool = True, wait: float = 60, ready: bool = True) -> None:
        """Start it and wait until it is ready (and leads, if ``expect_leader``); with
        ``ready=False``, only until it serves /readyz, ready or not."""
        assert self.process is None, "already running"
        self.starts += 1
        log = (self.logs / f"{self.identity}-{self.starts}.log").open("wb")
        env = {
            # The tests' own QC_TEST_* variables are no settings: the controller refuses them.
            **{k: v for k, v in os.environ.items() if not k.startswith("QC_TEST_")},
            "QC_IDENTITY": self.identity,
            # Short leases so that failover fits in a test.
            "QC_LEASE_DURATION_SECONDS": "4",
            "QC_RENEW_DEADLINE_SECONDS": "3",
            "QC_RETRY_PERIOD_SECONDS": "1",
        }
        self.process = subprocess.Popen(
            [
                str(ROOT / ".venv/bin/queue-controller"),
                "run",
                "--kubeconfig",
                str(self.kubeconfig),
                "--namespace",
                LEASE_NAMESPACE,
                "--metrics-port",
                str(self.metrics_port),
                "--webhook",
                self.webhook,
                "--webhook-port",
                str(self.webhook_port),
                "--journal",
                self.journal,
                "--tick",
                "1",
                "--pods-ready-timeout",
                str(self.timeout_seconds),
                "--log-level",
                "DEBUG",
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"controller exited {self.process.returncode}: {self.log_tail()}"
                )
            answer = self.readyz()
            if answer is not None and not ready:
                return
            if (
                answer is not None
                and answer.get("ready")
                and (answer.get("leader") or not expect_leader)
            ):
                if self.webhook == "local" and not self._webhook_registered():
                    time.sleep(0.2)
                    continue
                return
            time.sleep(0.2)
        raise AssertionError(f"controller not ready in {wait}s: {self.log_tail()}")

    def _webhook_registered(self) -> bool:
        result = subprocess.run(
            [
                str(ROOT / "deploy/local-cluster/bin/kubectl"),
                "--kubeconfig",
                str(self.kubeconfig),
                "get",
                "mutatingwebhookconfiguration",
                "queue-controller.io",
                "-o",
                "jsonpath={.webhooks[*].clientConfig.url}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        return f":{self.webhook_port}/" in result.stdout

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def _get(self, path: str) -> tuple[int, str] | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2
            ) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            return None

    def readyz(self) -> dict[str, Any] | None:
        answer = self._get("/readyz")
        if answer is None:
            return None
        try:
            parsed: dict[str, Any] = json.loads(answer[1])
        except json.JSONDecodeError:
            return None
        return parsed

    def metrics(self) -> str:
        answer = self._get("/metrics")
        assert answer is not None, "the metrics endpoint does not answer"
        assert answer[0] == 200, answer
        return answer[1]

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample, 0 if absent."""
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            metric_name, _, rest = sample.partition("{")
            found = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
            if metric_name == name and found == wanted:
                return float(value)
        return 0.0

    def log_tail(self, lines: int = 30) -> str:
        # The latest start's log: by start number, not by name ("-10" sorts before "-9").
        logs = sorted(
            self.logs.glob(f"{self.identity}-*.log"),
            key=lambda path: int(path.stem.rsplit("-", 1)[1]),
        )
        if not logs:
            return "(no log)"
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-lines:])
