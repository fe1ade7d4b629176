"""Kueue v0.17.0, built from its released Go module and run out of cluster against the local
control plane, given the same teams and waiting rules as queue-controller (teams.py).

Use: ``build(bin_dir)`` once, then ``Kueue(...).install(teams, settings, gpu_products)``,
``start()``, submit Jobs labelled ``QUEUE_LABEL: QUEUE_NAME`` (created suspended, as Kueue's
own docs do), and ``stop()``.  ``python -m tests.bench.e2e.kueue --selftest`` checks all of it
on a fresh small local cluster of its own (never the one the cluster tests run our controller
on: queue-controller accepts Kueue's queue label as an alias, so both would act on one Job).

How teams map to Kueue objects: see kueueobjects.py.

What the research notes (shared/reference/kueue-side-by-side.md) said, checked against the
v0.17.0 tag (K: = kubernetes-sigs/kueue@v0.17.0) and on the local cluster
---------------------------------------------------------------------------------------------
True:
* K:go.mod has no replace/exclude; ``go install sigs.k8s.io/kueue/cmd/kueue@v0.17.0`` builds
  it, ``go 1.25.0`` (our local Go 1.26 is used as is under GOTOOLCHAIN=auto).
* 11 CRD bases, v1beta1 and v1beta2 served, v1beta2 stored, no ``conversion:`` stanza: we
  write v1beta2 only.  ``config/components/webhook/manifests.yaml`` is in the module zip; we
  read the CRDs and the webhook entries from the module cache (``go mod download -json``),
  never copy them into the repository.  (The zip is 4.6 MB, 24 MB unpacked, not the notes'
  "about 107 MiB".)
* Config is decoded strictly; ``waitForPodsReady`` is enabled by presence
  (K:pkg/util/waitforpodsready: ``cfg != nil``) and ``timeout`` is then required
  (K:pkg/config/validation.go); recoveryTimeout defaults to timeout.
* With ``internalCertManagement`` off, K:cmd/kueue/main.go reads the metrics certificate from
  the hard-coded ``/etc/kueue/metrics/certs/tls.{crt,key}`` (certwatcher.New fails at start-up
  without it).  We write our serving certificate there if the directory is writable, and remove
  what we wrote on stop.  The metrics server is HTTPS with TokenReview/SubjectAccessReview
  authentication (``filters.WithAuthenticationAndAuthorization``); we bind it to 127.0.0.1 and
  do not scrape it (the harness measures from outside).
* The webhook server always starts; readyz (K:main.go setupProbeEndpoints) passes only once
  it listens.  We serve it with a certificate for IP 127.0.0.1 from our own CA
  (queue_controller.tls) and register ``url:`` webhooks with that caBundle.
* VisibilityOnDemand (beta, on), MultiKueue (beta, on), TopologyAwareScheduling (beta, on):
  turned off in ``featureGates``.
* The ClusterQueue/ResourceFlavor mutating webhooks add the resource-in-use finalizer; so do
  the controllers (K:pkg/controller/core/clusterqueue_controller.go, resourceflavor_controller.go)
  -- the notes' "lost without webhooks" is only half true.  Either way stop() deletes Kueue's
  objects while Kueue still runs.
* Leader election is on by default: we set ``leaderElect: false``.
* A negative ``clientConnection.qps`` skips Kueue's token-bucket limiter (K:main.go), and
  controller-runtime v0.23.3's GetConfig leaves the rest config at QPS -1 (no limit): so
  ``qps=-1`` (our default here) means no client-side rate limit, as our Python client has none.
False or not applicable here:
* "kwok nodes are tainted ``kwok.x-k8s.io/node=fake:NoSchedule``": not ours.  Our nodes
  (queue_controller/nodepools.py) carry only the pool's own taints (the gb200 pool's
  ``queue-controller.io/gb200``), which the Jobs tolerate themselves for both systems; the
  flavor needs no tolerations.
* The notes' config sample: fine, but ``visibilityServer`` (bindAddress/bindPort) also exists
  in v0.17.0's Configuration; irrelevant with VisibilityOnDemand off.
* ``--kubeconfig`` works (controller-runtime v0.23.3 registers it in an ``init``); we pass the
  ``KUBECONFIG`` environment variable, which ``ctrl.GetConfigOrDie`` reads as well.
Seen at run time (2 cores, Kubernetes v1.37.2 local cluster, 2026-12):
* The build took 570 s with Go 1.26.8 (GOTOOLCHAIN=auto kept it), Kueue's dependencies not yet
  in the module cache; the binary is 87 MB.  A rebuild with the stamp in place is skipped.
* Without /etc/kueue/metrics/certs Kueue exits 1 at once ("Unable to initialize metrics
  certificate watcher ... no such file").  With it, start-up to readyz plus webhook
  registration takes about 5 s (install included).
* One error line at start-up is expected and harmless: "Skipping admission check controller
  setup: Provisioning Requests not supported" (no cluster-autoscaler CRD).
* The selftest: a 2x4-GPU gang is unsuspended about 1 s after creation, its Workload reports
  PodsReady (kwok marks pods Ready), it completes after its 10 s; a 3x4-GPU gang stays
  suspended: "insufficient quota for nvidia.com/gpu in flavor default-flavor ... (12) >
  maximum capacity (8)"; cpu/memory requests are ignored as configured.  stop() takes about
  3 s and Kueue releases every finalizer itself; no webhook configuration is left.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from queue_controller.tls import serving_certificate
from tests.bench.e2e.kueueobjects import (
    FLAVOR,
    WEBHOOK_PREFIX,
    configuration,
    excluded_prefixes,
    queue_objects,
    webhook_configurations,
)
from tests.bench.e2e.teams import QUEUE_NAME, QueueSettings, TeamSpec

# Pinned here, not in deploy/local-cluster/pins.env: build.sh hashes pins.env into its stamp, so
# a Kueue pin there would rebuild every control-plane binary, none of which depends on it.
KUEUE_VERSION = "v0.17.0"
KUEUE_MODULE = "sigs.k8s.io/kueue"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

FIELD_MANAGER = "kueue-bench"
# Hard-coded in K:cmd/kueue/main.go when internalCertManagement is off.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# Kueue's kinds that carry finalizers it removes itself; deleted in stop() while it runs.
KUEUE_KINDS = (
    "workloads.kueue.x-k8s.io",
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io",
    "resourceflavors.kueue.x-k8s.io",
)

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy" / "local-cluster"

Report = Callable[[str], None]


class KueueError(RuntimeError):
    """Kueue could not be built, installed, started or stopped."""


# -- building ----------------------------------------------------------------------------


def _go_env() -> dict[str, str]:
    env = dict(os.environ, GOTOOLCHAIN="auto", CGO_ENABLED="0")
    # `go install pkg@version` refuses -mod=mod (deploy/local-cluster/build.sh exports it).
    flags = [f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod=")]
    env["GOFLAGS"] = " ".join(flags)
    return env


def _run(
    command: list[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=env, cwd=cwd)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
        raise KueueError(f"`{' '.join(command)}` failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def build(bin_dir: Path, *, report: Report = print) -> Path:
    """``GOBIN=<bin_dir> GOTOOLCHAIN=auto go install sigs.k8s.io/kueue/cmd/kueue@<pin>``, skipped
    when <bin_dir>/kueue exists and the stamp file <bin_dir>/.kueue-pin names the same pin.
    Returns the binary; raises KueueError naming the command and its output's tail."""
    bin_dir = bin_dir.resolve()
    binary, stamp = bin_dir / "kueue", bin_dir / ".kueue-pin"
    package = f"{KUEUE_MODULE}/cmd/kueue@{KUEUE_VERSION}"
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == package:
        return binary
    bin_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    version = f"-X {KUEUE_MODULE}/pkg/version.GitVersion={KUEUE_VERSION}"
    command = ["go", "install", "-trimpath", f"-ldflags=-s -w {version}", package]
    report(f"building Kueue {KUEUE_VERSION} ({' '.join(command)})")
    started = time.monotonic()
    # Outside any module: deploy/local-cluster's go.mod must not be the main module.
    _run(command, env={**_go_env(), "GOBIN": str(bin_dir)}, cwd=Path(tempfile.gettempdir()))
    stamp.write_text(package + "\n")
    report(f"Kueue {KUEUE_VERSION} built in {time.monotonic() - started:.0f}s: {binary}")
    return binary


def module_dir() -> Path:
    """Kueue's module source in the Go module cache (downloaded if missing): CRDs, webhooks."""
    command = ["go", "mod", "download", "-json", f"{KUEUE_MODULE}@{KUEUE_VERSION}"]
    info: dict[str, Any] = json.loads(_run(command, env=_go_env()))
    if info.get("Error") or not info.get("Dir"):
        raise KueueError(f"`{' '.join(command)}`: {info.get('Error', 'no Dir in its answer')}")
    return Path(info["Dir"])


def _free_ports(names: Sequence[str]) -> dict[str, int]:
    with contextlib.ExitStack() as stack:
        ports = {}
        for name in names:
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports[name] = int(sock.getsockname()[1])
        return ports


# -- running -----------------------------------------------------------------------------


class Kueue:
    """One Kueue process against one cluster; its files (config, certificates, log) in workdir."""

    def __init__(
        self,
        *,
        kubeconfig: Path,
        workdir: Path,
        binary: Path,
        kubectl: Path | None = None,
        qps: float = -1.0,  # negative: no client-side rate limit, as our Python client
        burst: int = 1000,
        report: Report = print,
    ) -> None:
        self.kubeconfig = kubeconfig.resolve()
        self.workdir = workdir.resolve()
        self.binary = binary.resolve()
        self.kubectl_binary = (kubectl or DEPLOY / "bin" / "kubectl").resolve()
        self.qps, self.burst = qps, burst
        self.report = report
        self.log = self.workdir / "kueue.log"
        self.config_file = self.workdir / "config.yaml"
        self.cert_dir = self.workdir / "certs"
        self._process: subprocess.Popen[bytes] | None = None
        self._ports: dict[str, int] = {}
        self._probe_namespace = "default"
        self._metrics_files: list[Path] = []
        self._metrics_dirs: list[Path] = []
        self._installed = False

    # kubectl --------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        command = [str(self.kubectl_binary), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(command, capture_output=True, text=True, input=stdin, check=False)
        if check and result.returncode != 0:
            raise KueueError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def _apply(self, objects: Sequence[Mapping[str, Any]]) -> None:
        listed = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            "-",
            stdin=json.dumps(listed),
        )

    # install --------------------------------------------------------------------------

    def install(
        self,
        teams: Sequence[TeamSpec],
        settings: QueueSettings,
        gpu_products: Sequence[str],
        *,
        extra_resources: Sequence[str] = (),
    ) -> None:
        """CRDs (all bases, server-side apply), namespace kueue-system, certificates, the
        Configuration file, one ResourceFlavor, per team a ClusterQueue and a LocalQueue
        QUEUE_NAME in its namespace (created if missing).

        The webhook configurations are registered by start(), once Kueue serves them: with
        failurePolicy Fail, registered any earlier they would make the API server refuse the
        ClusterQueues created here (nothing answers yet).  Mapping: see the module docstring.
        """
        for product in gpu_products:
            if not product or len(product) > 63 or "/" in product:
                raise KueueError(f"not a label value: {product!r}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        crds = module_dir() / "config" / "components" / "crd" / "bases"
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            str(crds),
        )
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
        self._apply(queue_objects(teams))
        if teams:
            self._probe_namespace = teams[0].namespace
        serving = serving_certificate(self.cert_dir, hosts=("127.0.0.1", "localhost"))
        self._ports = _free_ports(("webhook", "health", "metrics"))
        config = configuration(
            settings,
            ports=self._ports,
            cert_dir=self.cert_dir,
            excluded=excluded_prefixes(teams, extra_resources),
            qps=self.qps,
            burst=self.burst,
        )
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self._install_metrics_certificate(serving.certfile, serving.keyfile)
        record = {"version": KUEUE_VERSION, "teams": [t.name for t in teams]}
        record["gpu_products"] = list(gpu_products)
        (self.workdir / "install.json").write_text(json.dumps(record, indent=2))
        self._installed = True
        self.report(
            f"Kueue {KUEUE_VERSION} installed: {len(teams)} ClusterQueues, flavor {FLAVOR}, "
            f"excluded {config.get('resources', {}).get('excludeResourcePrefixes', [])}"
        )

    def _install_metrics_certificate(self, certfile: Path, keyfile: Path) -> None:
        missing = [d for d in (METRICS_CERT_DIR, *METRICS_CERT_DIR.parents) if not d.exists()]
        try:
            METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
            self._metrics_dirs = missing  # removed on stop, deepest first, if still empty
            for source in (certfile, keyfile):
                target = METRICS_CERT_DIR / source.name
                if not target.exists():
                    shutil.copyfile(source, target)
                    self._metrics_files.append(target)
        except OSError as error:
            raise KueueError(
                f"Kueue {KUEUE_VERSION} reads its metrics certificate from the hard-coded "
                f"{METRICS_CERT_DIR}/tls.{{crt,key}}, which cannot be written here: {error}"
            ) from None

    # start ----------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        if self._process is None:
            raise KueueError("Kueue is not started")
        return self._process.pid

    def start(self, *, timeout: float = 120.0) -> None:
        """Launch the binary (config in workdir, log in workdir/kueue.log), wait for readyz on
        127.0.0.1, register the webhook configurations, and wait until the API server calls
        them (a server-side dry-run Job comes back suspended)."""
        if not self._installed:
            raise KueueError("install() first")
        if self._process is not None and self._process.poll() is None:
            raise KueueError(f"Kueue already runs (pid {self._process.pid})")
        deadline = time.monotonic() + timeout
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [str(self.binary), f"--config={self.config_file}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=dict(os.environ, KUBECONFIG=str(self.kubeconfig)),
            )
        url = f"http://127.0.0.1:{self._ports['health']}/readyz"
        self._wait(f"Kueue to report ready at {url}", lambda: self._ready(url), deadline)
        manifests = module_dir() / "config" / "components" / "webhook" / "manifests.yaml"
        docs = list(yaml.safe_load_all(manifests.read_text()))
        ca = (self.cert_dir / "ca.crt").read_bytes()
        self._apply(webhook_configurations(docs, port=self._ports["webhook"], ca_bundle=ca))
        self._wait("the Job webhook to suspend a labelled Job", self._webhook_works, deadline)
        self.report(f"Kueue {KUEUE_VERSION} running (pid {self.pid}, log {self.log})")

    def _ready(self, url: str) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise KueueError(
                f"Kueue exited with {self._process.returncode} during start-up; "
                f"last lines of {self.log}:\n{self._log_tail()}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def _webhook_works(self) -> bool:
        job = probe_job(self._probe_namespace)
        out = self.kubectl(
            "create",
            "--dry-run=server",
            "-o",
            "json",
            "-f",
            "-",
            stdin=json.dumps(job),
            check=False,
        )
        if not out:
            return False
        return bool(json.loads(out).get("spec", {}).get("suspend"))

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @staticmethod
    def _wait(what: str, ready: Callable[[], bool], deadline: float) -> None:
        while not ready():
            if time.monotonic() > deadline:
                raise KueueError(f"timed out waiting for {what}")
            time.sleep(0.25)

    # stop -----------------------------------------------------------------------------

    def stop(self, *, timeout: float = 60.0) -> None:
        """Delete Kueue's objects while it still runs (it removes their finalizers), then its
        webhook configurations, then terminate it.  Safe to call more than once, and after a
        failed start; Jobs are the caller's (a Job still labelled gets a new Workload)."""
        running = self._process is not None and self._process.poll() is None
        if self._installed:
            self._delete_objects(timeout if running else 0.0)
            self.kubectl(
                "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                f"{WEBHOOK_PREFIX}mutating-webhook-configuration",
                f"{WEBHOOK_PREFIX}validating-webhook-configuration",
                "--ignore-not-found",
                check=False,
            )
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for path in self._metrics_files:
            path.unlink(missing_ok=True)
        self._metrics_files.clear()
        for directory in self._metrics_dirs:
            with contextlib.suppress(OSError):
                directory.rmdir()
        self._metrics_dirs = []

    def _remaining(self) -> list[tuple[str, str, str]]:
        """(kind, namespace, name) of Kueue objects still there."""
        out = []
        for kind in KUEUE_KINDS:
            text = self.kubectl("get", kind, "-A", "-o", "json", "--ignore-not-found", check=False)
            items = json.loads(text).get("items", []) if text.strip() else []
            for item in items:
                meta = item["metadata"]
                out.append((kind, meta.get("namespace", ""), meta["name"]))
        return out

    def _delete_objects(self, timeout: float) -> None:
        for kind in KUEUE_KINDS:
            self.kubectl(
                "delete", kind, "--all", "-A", "--wait=false", "--ignore-not-found", check=False
            )
        deadline = time.monotonic() + timeout
        left = self._remaining()
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = self._remaining()
        if not left:
            return
        self.report(f"stripping finalizers from {len(left)} Kueue objects Kueue did not release")
        for kind, namespace, name in left:
            where = ["-n", namespace] if namespace else []
            self.kubectl(
                "patch",
                kind,
                name,
                *where,
                "--type=merge",
                "-p",
                '{"metadata":{"finalizers":null}}',
                check=False,
            )


def probe_job(namespace: str, name: str = "kueue-webhook-probe") -> dict[str, Any]:
    """A labelled Job created unsuspended: Kueue's Job webhook must suspend it."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: QUEUE_NAME}},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "busybox"}],
                }
            }
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.e2e.kueue", description=__doc__)
    parser.add_argument("--selftest", action="store_true", help="run the selftest (see selftest)")
    parser.add_argument("--build", action="store_true", help="only build the binary")
    parser.add_argument("--keep", action="store_true", help="keep the selftest's files")
    args = parser.parse_args(argv)
    try:
        if args.build:
            build(DEPLOY / "bin")
            return 0
        if args.selftest:
            from tests.bench.e2e.kueueselftest import selftest  # it runs this module's Kueue

            print(json.dumps(selftest(keep=args.keep), indent=2))
            print("selftest passed")
            return 0
    except KueueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    parser.print_usage()
    return 2


if __name__ == "__main__":
    sys.exit(main())
