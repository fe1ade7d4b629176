"""The controller runs from its image against the local control plane, with the chart's rights.

As a pod would get them, without a kubelet: the chart's ServiceAccount, roles, bindings and
admission policies are rendered and created for real, a token is made for the account, and
the token, the cluster's CA and the namespace are mounted where the service-account volume
goes; ``KUBERNETES_SERVICE_HOST``/``PORT`` name the API server. ``queue-controller run`` is
then started from the image with ``buildah run``, as user 65532, with exactly the
Deployment's environment and its webhook certificate. So a right the chart lacks fails a
test here, the way it would fail in a cluster (fix the chart, not the test).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster import people
from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import free_port
from tests.cluster.workloads import Objects, create, eventually, h100, job, running_on
from tests.deploy.chart import Doc, one, render
from tests.image.conftest import Image

pytestmark = pytest.mark.image

RELEASE = "qc-image"
# Where a pod's service-account volume goes (/var/run/...): /var/run is a link to /run in the
# image, and buildah mounts a volume only at a path without links in it.
ACCOUNT_PATH = "/run/secrets/kubernetes.io/serviceaccount"
POD_NAME = f"{RELEASE}-queue-controller-6f9c-image"
# The rendered objects that a pod of the chart relies on: its identity and rights.
RIGHTS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
# What buildah itself writes into a container it runs, beside the chart's emptyDirs.
WRITABLE = ("/tmp/", "/var/lib/queue-controller/")
BUILDAH_OWN = ("/etc/hosts", "/etc/resolv.conf", "/etc/hostname", "/run/.containerenv")


@dataclass
class Running:
    namespace: str
    docs: list[Doc]
    metrics_port: int
    webhook_port: int
    container: str
    process: subprocess.Popen[bytes]
    log: Path
    started: float

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def kubectl(cluster: Cluster, *args: str, stdin: str | None = None) -> str:
    result = people.kubectl(cluster, *args, stdin=stdin)
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


def service_account_folder(cluster: Cluster, folder: Path, namespace: str, account: str) -> Path:
    """What the kubelet projects into a pod: a token of the account, the CA and the namespace."""
    token = kubectl(cluster, "create", "token", account, "-n", namespace, "--duration=2h")
    kubeconfig = yaml.safe_load(cluster.kubeconfig.read_text())
    ca = Path(kubeconfig["clusters"][0]["cluster"]["certificate-authority"]).read_text()
    folder.mkdir(mode=0o755)
    for name, text in (("token", token.strip()), ("ca.crt", ca), ("namespace", namespace)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o644)  # the image's user, 65532, reads them
    return folder


def webhook_certificate_folder(docs: list[Doc], folder: Path) -> Path:
    """The chart's own certificate Secret, as its volume would hold it."""
    secret = next(d for d in docs if d["kind"] == "Secret" and d["type"] == "kubernetes.io/tls")
    folder.mkdir(mode=0o755)
    for key, value in secret["data"].items():
        (folder / key).write_bytes(base64.b64decode(value))
        (folder / key).chmod(0o644)
    return folder


def container_environment(docs: list[Doc], namespace: str) -> dict[str, str]:
    """The Deployment's environment, with the downward API's fields filled as a kubelet would."""
    deployment = one(docs, "Deployment", f"{RELEASE}-queue-controller")
    fields = {"metadata.namespace": namespace, "metadata.name": POD_NAME}
    env: dict[str, str] = {}
    for variable in deployment["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            env[variable["name"]] = fields[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def api_server(cluster: Cluster) -> tuple[str, str]:
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    return host, port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture(scope="module")
def running(cluster: Cluster, crds: None, image: Image) -> Iterator[Running]:
    namespace = f"qc-image-{secrets.token_hex(3)}"
    metrics_port, webhook_port = free_port(), free_port()
    docs = render(
        f"metrics.port={metrics_port}",
        f"webhook.port={webhook_port}",
        namespace=namespace,
        release=RELEASE,
    )
    rights = [d for d in docs if d["kind"] in RIGHTS]
    kubectl(cluster, "create", "namespace", namespace)
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(rights))
    account = one(docs, "ServiceAccount", f"{RELEASE}-queue-controller")["metadata"]["name"]
    # Not under pytest's own temporary folder: that is private to its owner, and the image's
    # user must reach the mounted files through every folder above them.
    folder = Path(tempfile.mkdtemp(prefix="qc-image-run-"))
    folder.chmod(0o755)
    tokens = service_account_folder(cluster, folder / "serviceaccount", namespace, account)
    env = container_environment(docs, namespace)
    certificate_dir = env["QC_WEBHOOK_CERT_DIR"]
    certificates = webhook_certificate_folder(docs, folder / "webhook")
    host, port = api_server(cluster)
    env |= {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}

    container = subprocess.run(
        ["buildah", "from", "--name", f"qc-image-test-{secrets.token_hex(3)}", image.name],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    log = folder / "controller.log"
    started = time.time()
    command = ["buildah", "run", "--isolation", "chroot", "--user", "65532:65532"]
    command += [item for name, value in env.items() for item in ("--env", f"{name}={value}")]
    command += ["--volume", f"{tokens}:{ACCOUNT_PATH}:ro"]
    command += ["--volume", f"{certificates}:{certificate_dir}:ro"]
    # The image's own command, as the Deployment runs it (command and args).
    deployment = one(docs, "Deployment", f"{RELEASE}-queue-controller")
    main = deployment["spec"]["template"]["spec"]["containers"][0]
    command += [container, "--", *main["command"], *main["args"]]
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    state = Running(namespace, docs, metrics_port, webhook_port, container, process, log, started)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the controller exited:\n{state.log_text()[-4000:]}")
            return get(f"http://127.0.0.1:{metrics_port}/readyz")[0] == 200

        eventually(ready, timeout=120, what="/readyz of the controller in the image")
        yield state
    finally:
        stop(process)
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
        cluster_scoped_docs = [d for d in rights if "namespace" not in d["metadata"]]
        cluster_scoped = yaml.safe_dump_all(cluster_scoped_docs)
        people.kubectl(
            cluster, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=cluster_scoped
        )
        kubectl(cluster, "delete", "namespace", namespace, "--wait=false")
        shutil.rmtree(folder, ignore_errors=True)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to buildah run and the controller under it (their own session), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait)


def test_a_queued_gang_is_admitted_whole_through_the_charts_rights(
    cluster: Cluster, running: Running, namespace: str
) -> None:
    objects = Objects(cluster, namespace)
    try:
        team = objects.team_quota(8)
        queue = objects.queue("gpus", team)
        nodes = h100(0, 1)
        create(cluster, namespace, job("trainer", queue=queue, gpus=4, pods=2, nodes=nodes))
        # Created suspended, as the webhook would; the controller alone unsuspends it (the
        # chart's job-suspend policy refuses anyone else).
        placed = eventually(
            lambda: sum(running_on(cluster, namespace, "trainer").values()) == 2,
            timeout=90,
            what="both pods of the gang running",
        )
        assert placed
        # The PodGroup's status may land a moment after the pods it released run.
        eventually(
            lambda: objects.reason("trainer") == "Admitted",
            timeout=30,
            what="the PodGroup's reason Admitted",
        )
    finally:
        objects.cleanup()
    log = running.log_text()
    assert "forbidden" not in log.lower(), log[-4000:]


def test_metrics_and_health_answer_from_the_image(running: Running) -> None:
    base = f"http://127.0.0.1:{running.metrics_port}"
    assert get(f"{base}/healthz")[0] == 200
    assert get(f"{base}/readyz")[0] == 200
    status, metrics = get(f"{base}/metrics")
    assert status == 200
    assert "queue_controller_scheduling_cycle_seconds_count" in metrics
    leads = "\nqueue_controller_leader 1.0\n"
    assert eventually(lambda: leads in get(f"{base}/metrics")[1], timeout=30, what="the lease")


def admission_review(namespace: str) -> dict[str, Any]:
    queued = job("held", queue="gpus", gpus=1, pods=1, nodes=h100(0))
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "5d3c5f30-8b0f-4b8e-9a55-0a4f5f3c1a01",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "requestKind": {"group": "batch", "version": "v1", "kind": "Job"},
            "requestResource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": "held",
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": queued,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def test_the_webhook_serves_from_the_image_with_the_charts_certificate(running: Running) -> None:
    """The API server's call, made by hand: TLS checked against the chart's caBundle for the
    webhook Service's name, and the queued Job comes back suspended."""
    configuration = one(running.docs, "MutatingWebhookConfiguration", f"{RELEASE}-queue-controller")
    hook = next(
        w for w in configuration["webhooks"] if w["name"] == "hold-jobs.queue-controller.io"
    )
    service = hook["clientConfig"]["service"]
    context = ssl.create_default_context(
        cadata=base64.b64decode(hook["clientConfig"]["caBundle"]).decode()
    )
    body = json.dumps(admission_review(running.namespace)).encode()
    request = (
        f"POST {service['path']} HTTP/1.1\r\nHost: {service['name']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    server_name = f"{service['name']}.{service['namespace']}.svc"
    with (
        socket.create_connection(("127.0.0.1", running.webhook_port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        tls.sendall(request)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    response = json.loads(payload)["response"]
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch or any(
        op["path"] == "/spec/suspend" and op["value"] is True for op in patch
    ), patch


def test_the_process_writes_only_where_the_chart_mounts_empty_dirs(running: Running) -> None:
    """A read-only root filesystem would do: every file the running controller wrote into
    its container lies under the chart's emptyDirs (/tmp, /var/lib/queue-controller)."""
    mounted = subprocess.run(
        ["buildah", "mount", running.container], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        found = subprocess.run(
            ["find", mounted, "-xdev", "-type", "f", "-newermt", f"@{running.started:.0f}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    finally:
        subprocess.run(["buildah", "umount", running.container], capture_output=True, check=False)
    written = sorted("/" + str(Path(f).relative_to(mounted)) for f in found)
    assert any(w.startswith("/var/lib/queue-controller/journal.db") for w in written), written
    stray = [w for w in written if not w.startswith(WRITABLE) and w not in BUILDAH_OWN]
    assert stray == []
