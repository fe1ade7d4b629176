"""Start, inspect and stop the local control plane.

Every process binds to 127.0.0.1 on a port chosen free at start-up and runs
in its own session, so it outlives ``make cluster-up``.  Its PID, port and log
live under the state directory (``.cluster/``), with an admin kubeconfig;
``down`` stops exactly those PIDs (after checking each is still our binary)
and removes the directory.  A lock file beside the state directory keeps two
``up`` from racing.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from queue_controller.errors import QueueControllerError
from queue_controller.localcluster import components, devices, operators
from queue_controller.localcluster import pki as pki_module
from queue_controller.localcluster.components import COMPONENTS
from queue_controller.localcluster.state import (
    Layout,
    State,
    Status,
    controller_alive,
    free_ports,
    ours,
)
from queue_controller.nodepools import NodePools

BINARIES = (*COMPONENTS, "kubectl")

Report = Callable[[str], None]


class ClusterError(QueueControllerError):
    """The local cluster could not be started, inspected or stopped."""


class LocalCluster:
    def __init__(self, layout: Layout, *, report: Report = print) -> None:
        self.layout = layout.absolute()
        self.report = report

    # -- inspecting ----------------------------------------------------------

    def status(self) -> Status:
        state = State.load(self.layout.state_file)
        if state is None:
            return Status({}, None)
        running = {
            name: ours(pid, self.layout.binary(name).resolve()) for name, pid in state.pids.items()
        }
        return Status(running, state)

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        result = subprocess.run(
            [
                str(self.layout.binary("kubectl")),
                "--kubeconfig",
                str(self.layout.kubeconfig),
                *args,
            ],
            capture_output=True,
            text=True,
            check=False,
            input=stdin,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    # -- starting --------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.layout.lock_file.parent.mkdir(parents=True, exist_ok=True)
        with self.layout.lock_file.open("w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ClusterError(
                    f"another cluster-up or cluster-down holds {self.layout.lock_file}"
                ) from None
            yield

    def up(
        self,
        pools: NodePools,
        *,
        timeout: float = 180.0,
        dra: bool = True,
        audit_policy: Path | None = None,
        operators: tuple[str, ...] = (),
    ) -> Status:
        """Start everything and wait until the nodes are Ready; a running cluster is left
        alone, but for the ``operators`` it does not run yet (operators.py), started.

        ``dra``: also publish each GPU node's devices as a ResourceSlice (see devices.py).
        ``audit_policy``: the API server keeps an audit log under logs/ by this policy.
        """
        wanted = self._operators(operators)
        with self._locked():
            current = self.status()
            if current.up:
                self.report(
                    f"a local cluster is already running (kubeconfig {self.layout.kubeconfig})"
                )
                if current.state is not None and wanted:
                    self._start_operators(current.state, wanted, time.monotonic() + timeout)
                    return self.status()
                return current
            if current.partly_up:
                down = [n for n, alive in current.running.items() if not alive]
                raise ClusterError(
                    f"a local cluster is partly running ({', '.join(down)} stopped); "
                    "run `make cluster-down` first"
                )
            missing = [b for b in BINARIES if not self.layout.binary(b).exists()]
            if missing:
                raise ClusterError(
                    f"missing {', '.join(missing)} in {self.layout.bin_dir}; "
                    "run `make cluster-build`"
                )
            if self.layout.state_dir.exists():
                shutil.rmtree(self.layout.state_dir)  # a stale, fully stopped cluster
            started = time.monotonic()
            state = State(
                started=time.time(),
                audit_policy=str(audit_policy.resolve()) if audit_policy else None,
            )
            try:
                self._start(state, pools, deadline=started + timeout, dra=dra)
                self._start_operators(state, wanted, started + timeout)
            except BaseException:
                self._stop(state)
                state.save(self.layout.state_file)
                raise
            state.startup_seconds = round(time.monotonic() - started, 1)
            state.save(self.layout.state_file)
            self.report(
                f"local cluster up in {state.startup_seconds}s: {state.nodes} nodes; "
                f"export KUBECONFIG={self.layout.kubeconfig.resolve()}"
            )
            return self.status()

    def _start(self, state: State, pools: NodePools, *, deadline: float, dra: bool) -> None:
        layout = self.layout
        layout.logs.mkdir(parents=True)
        pki = pki_module.create(layout.state_dir / "pki")
        state.ports = free_ports(components.PORTS)
        layout.kubeconfig.write_text(
            json.dumps(components.kubeconfig(pki, state.ports["kube-apiserver"]), indent=2)
        )
        layout.kubeconfig.chmod(0o600)
        wiring = self._wiring(state, pki)
        state.save(layout.state_file)
        for name in COMPONENTS:
            state.pids[name] = self._spawn(name, components.arguments(name, wiring))
            state.save(layout.state_file)
            self._wait_healthy(name, state, pki, deadline)
            self.report(f"  {name} is up (pid {state.pids[name]}, port {state.ports[name]})")
        self._create_nodes(pools, state, deadline)
        if dra:
            self._publish_devices(pools)
        self._wait_for(
            "the default service account",
            lambda: bool(
                self.kubectl(
                    "get",
                    "serviceaccount",
                    "default",
                    "-n",
                    "default",
                    "--ignore-not-found",
                    "-o",
                    "name",
                )
            ),
            deadline,
        )

    def _wiring(self, state: State, pki: pki_module.Pki) -> components.Wiring:
        layout = self.layout
        return components.Wiring(
            state.ports,
            pki,
            layout.kubeconfig,
            layout.state_dir,
            layout.stages,
            Path(state.audit_policy) if state.audit_policy else None,
        )

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> int:
        # Appended to: a restarted component's log keeps what it said before.
        log = (self.layout.logs / f"{name}.log").open("ab")
        process = subprocess.Popen(
            [str(self.layout.binary(name).resolve()), *args],
            env={**os.environ, **env} if env else None,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.layout.state_dir,
            start_new_session=True,  # outlive `make cluster-up` and its Ctrl-C
        )
        log.close()
        return process.pid

    def restart(self, name: str, *, timeout: float = 60.0) -> int:
        """Stop one running component and start it again with the same arguments and
        ports (a fault for tests: restarting kube-apiserver drops every watch); its new PID."""
        if name not in COMPONENTS:
            raise ClusterError(f"unknown component {name!r}; one of {', '.join(COMPONENTS)}")
        with self._locked():
            state = State.load(self.layout.state_file)
            if state is None or not self.status().running.get(name):
                raise ClusterError(f"{name} is not running in {self.layout.state_dir}")
            self._stop_component(name, state.pids[name])
            pki = pki_module.Pki(self.layout.state_dir / "pki")
            state.pids[name] = self._spawn(
                name, components.arguments(name, self._wiring(state, pki))
            )
            state.save(self.layout.state_file)
            self._wait_healthy(name, state, pki, time.monotonic() + timeout)
            self.report(f"  {name} restarted (pid {state.pids[name]}, port {state.ports[name]})")
            return state.pids[name]

    # -- operators -------------------------------------------------------------

    def start_operators(self, names: tuple[str, ...], *, timeout: float = 120.0) -> Status:
        """Start the named operators against the running cluster (each not running yet)."""
        wanted = self._operators(names)
        with self._locked():
            state = State.load(self.layout.state_file)
            if state is None or not self.status().up:
                raise ClusterError(f"no local cluster is running in {self.layout.state_dir}")
            self._start_operators(state, wanted, time.monotonic() + timeout)
            return self.status()

    def _operators(self, names: tuple[str, ...]) -> list[operators.Operator]:
        try:
            wanted = operators.named(names)
        except ValueError as error:
            raise ClusterError(str(error)) from None
        missing = [
            f"{op.binary} or {op.crds(self.layout.bin_dir)}"
            for op in wanted
            if not self.layout.binary(op.binary).exists()
            or not op.crds(self.layout.bin_dir).is_dir()
        ]
        if missing:
            raise ClusterError(
                f"missing {', '.join(missing)}; run `make cluster-build OPERATORS="
                f"{','.join(op.name for op in wanted)}`"
            )
        return wanted

    def _start_operators(
        self, state: State, wanted: list[operators.Operator], deadline: float
    ) -> None:
        for op in wanted:
            pid = state.pids.get(op.binary)
            if pid is not None and ours(pid, self.layout.binary(op.binary).resolve()):
                continue
            crds = op.crds(self.layout.bin_dir)
            # Server-side: KubeRay's CRDs are too large for kubectl's last-applied annotation.
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
            if op.prerequisites:
                items = {"apiVersion": "v1", "kind": "List", "items": list(op.prerequisites)}
                self.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(items))
            ports = free_ports(f"{op.binary}-{p}" for p in op.ports)
            state.ports.update(ports)
            own = {p: ports[f"{op.binary}-{p}"] for p in op.ports}
            state.pids[op.binary] = self._spawn(
                op.binary,
                op.arguments(self.layout.kubeconfig, own),
                {"KUBECONFIG": str(self.layout.kubeconfig), **op.environment},
            )
            state.operators = [*dict.fromkeys([*state.operators, op.name])]
            state.save(self.layout.state_file)

            def ready(op: operators.Operator = op, own: dict[str, int] = own) -> bool:
                return all(self._mounted(m) for m in op.mounts) and op.healthy(own)

            self._wait_started(op.binary, state, ready, f"{op.name} to report ready", deadline)
            self.report(f"  {op.name} is up (pid {state.pids[op.binary]}, CRDs from {crds})")

    def _mounted(self, mount: operators.SecretMount) -> bool:
        """Copy the Secret's keys into the directory, as a kubelet's volume would; whether
        it has any yet (an operator may create the Secret's keys itself)."""
        secret = json.loads(
            self.kubectl(
                "get", "secret", mount.name, "-n", mount.namespace, "-o", "json", check=False
            )
            or "{}"
        )
        data: dict[str, str] = secret.get("data") or {}
        if not data:
            return False
        mount.directory.mkdir(parents=True, exist_ok=True)
        for key, value in data.items():
            (mount.directory / key).write_bytes(base64.b64decode(value))
        return True

    # -- waiting ---------------------------------------------------------------

    def _wait_healthy(self, name: str, state: State, pki: pki_module.Pki, deadline: float) -> None:
        url = components.health_url(name, state.ports)
        self._wait_started(
            name,
            state,
            partial(components.healthy, name, state.ports, pki),
            f"{name} to report healthy at {url}",
            deadline,
        )

    def _wait_started(
        self, name: str, state: State, probe: Callable[[], bool], what: str, deadline: float
    ) -> None:
        """Wait for ``probe()``; a ClusterError with its log's tail if ``name`` exits first."""
        binary = self.layout.binary(name).resolve()

        def healthy() -> bool:
            if not ours(state.pids[name], binary):
                log = self.layout.logs / f"{name}.log"
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                raise ClusterError(
                    f"{name} exited during start-up; last lines of {log}:\n" + "\n".join(tail)
                )
            return probe()

        self._wait_for(what, healthy, deadline)

    def _wait_for(self, what: str, ready: Callable[[], bool], deadline: float) -> None:
        while not ready():
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what} (logs in {self.layout.logs})")
            time.sleep(0.25)

    def _create_nodes(self, pools: NodePools, state: State, deadline: float) -> None:
        nodes = pools.nodes()
        manifest = self.layout.state_dir / "nodes.json"
        manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
        self.kubectl("create", "-f", str(manifest))
        state.nodes = len(nodes)
        expected = sum(1 for n in nodes if n["metadata"]["annotations"])

        def all_ready() -> bool:
            listed: dict[str, Any] = json.loads(self.kubectl("get", "nodes", "-o", "json"))
            ready = sum(
                1
                for node in listed["items"]
                for c in node.get("status", {}).get("conditions", [])
                if c["type"] == "Ready" and c["status"] == "True"
            )
            return ready >= expected

        self._wait_for(f"{expected} nodes to become Ready", all_ready, deadline)
        self.report(f"  {len(nodes)} nodes created, {expected} Ready")

    def _publish_devices(self, pools: NodePools) -> None:
        """Write what NVIDIA's DRA driver would publish: no driver runs on kwok nodes.

        About 1 s for the default 23 nodes, 13 s for 1,000 (on 2 cores), hence --no-dra.
        Writing them while kwok makes the nodes Ready was slower still: both wait on
        the API server.
        """
        made = devices.objects(pools.pools)
        manifest = self.layout.state_dir / "devices.json"
        manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": made}))
        self.kubectl("create", "-f", str(manifest))
        slices = sum(1 for o in made if o["kind"] == "ResourceSlice")
        self.report(f"  {slices} ResourceSlices of {devices.DRIVER} published (DRA)")

    # -- stopping --------------------------------------------------------------

    def _stop(self, state: State) -> list[str]:
        stopped = []
        # The controller first: it unregisters its webhook while the API is still there.
        if controller_alive(state.controller_pid):
            assert state.controller_pid is not None
            os.kill(state.controller_pid, signal.SIGTERM)
            limit = time.monotonic() + 20
            while controller_alive(state.controller_pid) and time.monotonic() < limit:
                time.sleep(0.1)
            if controller_alive(state.controller_pid):
                os.kill(state.controller_pid, signal.SIGKILL)
            stopped.append("queue-controller")
        # Then the operators, while the API server they would complain about is still up.
        others = [name for name in state.pids if name not in COMPONENTS]
        for name in [*others, *reversed(COMPONENTS)]:
            pid = state.pids.get(name)
            binary = self.layout.binary(name).resolve()
            if pid is None or not ours(pid, binary):
                continue
            os.kill(pid, signal.SIGTERM)
            stopped.append(name)
        for name in (name for name in stopped if name in state.pids):
            self._wait_stopped(name, state.pids[name])
        return stopped

    def _stop_component(self, name: str, pid: int) -> None:
        if ours(pid, self.layout.binary(name).resolve()):
            os.kill(pid, signal.SIGTERM)
            self._wait_stopped(name, pid)

    def _wait_stopped(self, name: str, pid: int) -> None:
        """Wait up to 15 s for a SIGTERMed component to go, then SIGKILL it."""
        binary = self.layout.binary(name).resolve()
        limit = time.monotonic() + 15
        while ours(pid, binary) and time.monotonic() < limit:
            time.sleep(0.1)
        if ours(pid, binary):
            os.kill(pid, signal.SIGKILL)

    def down(self) -> list[str]:
        """Stop every process this cluster started, by PID, and remove its state."""
        with self._locked():
            state = State.load(self.layout.state_file)
            if state is None and not self.layout.state_dir.exists():
                self.report("no local cluster is running")
                return []
            stopped = self._stop(state) if state is not None else []
            shutil.rmtree(self.layout.state_dir, ignore_errors=True)
            self.report(
                f"local cluster down: stopped {', '.join(stopped) or 'nothing'}; state removed"
            )
            return stopped
