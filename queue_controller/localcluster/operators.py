"""Workload operators run against the local cluster: KubeRay and Kubeflow's training-operator.

Each is built from its pinned Go module by ``deploy/local-cluster/operators/build.sh``,
with its CRDs copied from the same module; it runs out of cluster, as the control
plane does, on loopback ports chosen at start-up, with the admin kubeconfig.  What a
pod of theirs needs that kwok does not give (a Ray head's dashboard, above all) is
written down in docs/workload-kinds.md.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The training-operator's webhook certificates: it looks for this namespace, Secret and
# ValidatingWebhookConfiguration (its manifests create them; its code names them).
KUBEFLOW_NAMESPACE = "kubeflow"
_TRAINING_WEBHOOK_SECRET = "training-operator-webhook-cert"
_TRAINING_WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"
# Where its webhook server reads its certificate: a fixed path in its code, where its
# Deployment mounts the Secret above.
_TRAINING_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


@dataclass(frozen=True, kw_only=True)
class SecretMount:
    """A Secret that an operator's Deployment would mount as a volume: out of cluster no
    kubelet does, so the cluster copies its keys into ``directory`` once they are there."""

    namespace: str
    name: str
    directory: Path


@dataclass(frozen=True, kw_only=True)
class Operator:
    """How to run one operator: its binary, flags, CRDs and what must exist first."""

    name: str  # as OPERATORS= and --operators say it
    binary: str  # under the bin directory; also its key among the cluster's PIDs
    flags: tuple[str, ...]  # each formatted with {kubeconfig}, {health} and the ports below
    ports: tuple[str, ...] = ("health", "metrics")
    environment: Mapping[str, str] = field(default_factory=dict)
    prerequisites: tuple[Mapping[str, Any], ...] = ()
    health_path: str = "/readyz"
    mounts: tuple[SecretMount, ...] = ()

    def crds(self, bin_dir: Path) -> Path:
        return bin_dir / "crds" / self.name

    def arguments(self, kubeconfig: Path, ports: Mapping[str, int]) -> list[str]:
        values = {"kubeconfig": str(kubeconfig), **{p: str(ports[p]) for p in self.ports}}
        return [flag.format(**values) for flag in self.flags]

    def healthy(self, ports: Mapping[str, int]) -> bool:
        url = f"http://127.0.0.1:{ports['health']}{self.health_path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False


KUBERAY = Operator(
    name="kuberay",
    binary="ray-operator",
    flags=(
        "--kubeconfig={kubeconfig}",
        "--health-probe-bind-address=127.0.0.1:{health}",
        "--metrics-addr=127.0.0.1:{metrics}",
        # Out of cluster nothing can dial a head's service: ask through the API server
        # (which has no route to a kwok pod either; see docs/workload-kinds.md).
        "--use-kubernetes-proxy",
        "--enable-leader-election=false",
    ),
    health_path="/healthz",
)

TRAINING_OPERATOR = Operator(
    name="training-operator",
    binary="training-operator",
    flags=(
        "--kubeconfig={kubeconfig}",
        "--health-probe-bind-address=127.0.0.1:{health}",
        "--metrics-bind-address=127.0.0.1:{metrics}",
        "--webhook-server-port={webhook}",
    ),
    ports=("health", "metrics", "webhook"),
    environment={"MY_POD_NAMESPACE": KUBEFLOW_NAMESPACE},
    # Its certificate rotation fills the Secret, then waits for the files to appear.
    mounts=(
        SecretMount(
            namespace=KUBEFLOW_NAMESPACE,
            name=_TRAINING_WEBHOOK_SECRET,
            directory=_TRAINING_CERT_DIR,
        ),
    ),
    prerequisites=(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUBEFLOW_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": _TRAINING_WEBHOOK_SECRET, "namespace": KUBEFLOW_NAMESPACE},
        },
        # A webhook that no request matches: its certificate names the in-cluster
        # Service (training-operator.kubeflow.svc), which an operator on loopback outside
        # the cluster is not, so the API server could not call it; its validation does
        # not run here.  The object must exist, with a webhook to take the CA, for the
        # operator's certificate rotation to report ready.
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": _TRAINING_WEBHOOK_CONFIG},
            "webhooks": [
                {
                    "name": "validate-nothing.training-operator.kubeflow.org",
                    "clientConfig": {"url": "https://127.0.0.1:9/never-called"},
                    "rules": [],
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        },
    ),
)

OPERATORS: Mapping[str, Operator] = {op.name: op for op in (KUBERAY, TRAINING_OPERATOR)}


def named(names: list[str] | tuple[str, ...]) -> list[Operator]:
    """The operators ``names`` asks for, in order; ValueError naming any unknown one."""
    unknown = [name for name in names if name not in OPERATORS]
    if unknown:
        raise ValueError(f"unknown operator {', '.join(unknown)}; one of {', '.join(OPERATORS)}")
    return [OPERATORS[name] for name in dict.fromkeys(names)]
