"""kubectl as someone else: namespace users (``--as``, ``--as-group``), a service account, or a
bearer token, against the local control plane. Shared by the tests that try the chart's
policies as a tenant, the controller and the node agent would meet them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests.cluster.conftest import Cluster

AUTHENTICATED = "system:authenticated"


def kubectl(
    cluster: Cluster, *args: str, stdin: str | None = None, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.kubectl_binary), "--kubeconfig", str(kubeconfig or cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def as_user(
    cluster: Cluster, user: str, *args: str, groups: tuple[str, ...] = (), stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl as ``user``, in ``groups`` and system:authenticated, as a real login would be."""
    flags = [f"--as-group={g}" for g in (AUTHENTICATED, *groups)]
    return kubectl(cluster, f"--as={user}", *flags, *args, stdin=stdin)


def service_account_groups(namespace: str) -> tuple[str, ...]:
    """The groups the API server gives every token of a service account in ``namespace``."""
    return ("system:serviceaccounts", f"system:serviceaccounts:{namespace}")


def bind(cluster: Cluster, namespace: str, user: str, role: str) -> None:
    """A RoleBinding of the built-in ClusterRole ``role`` to ``user`` in ``namespace``."""
    client.RbacAuthorizationV1Api(cluster.api).create_namespaced_role_binding(
        namespace,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{user}-{role}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def token_kubeconfig(cluster: Cluster, token: str, path: Path) -> Path:
    """A kubeconfig that authenticates with ``token`` alone (no client certificate, which the
    API server would try first)."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": "local", "user": "token"}}],
        "current-context": "token",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def refused(result: subprocess.CompletedProcess[str], *words: str) -> bool:
    """Whether the API server said no, in a message carrying each of ``words``."""
    return (
        result.returncode != 0
        and "forbidden" in result.stderr.lower()
        and all(w in result.stderr for w in words)
    )


def allowed(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode == 0


def as_json(body: dict[str, Any]) -> str:
    return json.dumps(body)
