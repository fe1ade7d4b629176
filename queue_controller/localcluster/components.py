"""What each component of the local control plane runs with, and how it is probed.

All of it binds to 127.0.0.1.  The controller manager and the scheduler use
the admin kubeconfig (as kwokctl does): this cluster is for tests, and RBAC
for the components themselves would only add start-up time.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from queue_controller.localcluster.pki import Pki
from queue_controller.nodepools import KWOK_ANNOTATION

# Start order; stopped in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
PORTS = (*COMPONENTS, "etcd-peer")
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.128.0.1/12"
_ALWAYS_ALLOW = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"


@dataclass(frozen=True)
class Wiring:
    """What the components need to find each other."""

    ports: dict[str, int]
    pki: Pki
    kubeconfig: Path
    data_dir: Path
    stages: Path
    # An audit policy file: the API server then logs each request, with its user agent,
    # to logs/audit.log (`make bench-e2e` counts requests per client from it).
    audit_policy: Path | None = None


AUDIT_LOG = Path("logs") / "audit.log"  # under the state directory


def arguments(name: str, wiring: Wiring) -> list[str]:
    ports, pki, kubeconfig = wiring.ports, wiring.pki, str(wiring.kubeconfig)
    if name == "etcd":
        client = f"http://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        return [
            "--name=node0",
            f"--data-dir={wiring.data_dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=node0={peer}",
            "--unsafe-no-fsync",  # a throwaway test store: durability buys nothing
            "--auto-compaction-retention=1",
            "--quota-backend-bytes=8589934592",
        ]
    if name == "kube-apiserver":
        audit = (
            [
                f"--audit-policy-file={wiring.audit_policy.resolve()}",
                f"--audit-log-path={wiring.data_dir / AUDIT_LOG}",
                "--audit-log-format=json",
                # Batched: a blocking write per request would slow the API server measured.
                "--audit-log-mode=batch",
                "--audit-log-batch-max-wait=1s",  # on disk within a second of the request
                "--audit-log-maxsize=0",  # one file, never rotated
            ]
            if wiring.audit_policy is not None
            else []
        )
        return [
            *audit,
            f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['kube-apiserver']}",
            f"--tls-cert-file={pki.server_cert}",
            f"--tls-private-key-file={pki.server_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            # Endpoints reject loopback addresses, so nothing reconciles them.
            "--endpoint-reconciler-type=none",
        ]
    common = [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports[name]}",
        "--leader-elect=false",  # one instance: no lease to wait for after a restart
        # The defaults (20 and 50 requests/s) throttle the Job controller to 20 pod creates a
        # second: 400 gangs released at once by `make bench-e2e` waited over a minute for
        # their pods, and PodsReady timeouts evicted them.  The API server is local.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        _ALWAYS_ALLOW,
    ]
    if name == "kube-controller-manager":
        return [
            *common,
            f"--root-ca-file={pki.ca_cert}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--cluster-signing-cert-file={pki.ca_cert}",
            f"--cluster-signing-key-file={pki.ca_key}",
        ]
    if name == "kube-scheduler":
        return common
    if name == "kwok":
        return [
            f"--kubeconfig={kubeconfig}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
            f"--config={wiring.stages.resolve()}",
            f"--server-address=127.0.0.1:{ports['kwok']}",
            "--node-ip=10.0.0.1",
            f"--cidr={POD_CIDR}",
            # kwok renews a Lease per node, which is what keeps nodes Ready.
            "--node-lease-duration-seconds=40",
        ]
    raise ValueError(f"unknown component {name!r}")


def kubeconfig(pki: Pki, port: int) -> dict[str, Any]:
    """An admin kubeconfig for the API server on ``port``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local-gpu",
                "cluster": {
                    "server": f"https://127.0.0.1:{port}",
                    "certificate-authority": str(pki.ca_cert.resolve()),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {
                    "client-certificate": str(pki.admin_cert.resolve()),
                    "client-key": str(pki.admin_key.resolve()),
                },
            }
        ],
        "contexts": [{"name": "local-gpu", "context": {"cluster": "local-gpu", "user": "admin"}}],
        "current-context": "local-gpu",
    }


def health_url(name: str, ports: dict[str, int]) -> str:
    port = ports[name]
    if name == "etcd":
        return f"http://127.0.0.1:{port}/health"
    if name == "kwok":
        return f"http://127.0.0.1:{port}/healthz"
    path = "/readyz" if name == "kube-apiserver" else "/healthz"
    return f"https://127.0.0.1:{port}{path}"


def healthy(name: str, ports: dict[str, int], pki: Pki) -> bool:
    """One health probe; False on any failure."""
    url = health_url(name, ports)
    context: ssl.SSLContext | None = None
    if url.startswith("https://"):
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        if name != "kube-apiserver":
            # The controller manager and scheduler serve with self-signed
            # certificates; this is a liveness probe on loopback, nothing more.
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            code: int = response.status
            return code == 200
    except (urllib.error.URLError, OSError):
        return False
