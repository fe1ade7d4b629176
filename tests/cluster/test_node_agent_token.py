"""Nodes trust only themselves: the node agent's token writes only its own Node.

The chart's node-agent ServiceAccount, ClusterRole, binding and policy are rendered
(nodeAgent.enabled) and created for real. Two pods of that account are bound to two kwok
nodes, A and B, and a token is made for the pod on A (``kubectl create token
--bound-object-kind Pod``: the API server writes A's name into the token, and so into
``userInfo.extra['authentication.kubernetes.io/node-name']``). With that token alone:

- the agent writes A's annotation, label and status condition, as it does;
- it cannot write B's (a compromised node marking every other GPU unhealthy);
- a token of the same account bound to no pod is refused every Node write.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes import config as config_loader
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import Cluster
from tests.cluster.people import allowed, as_json, kubectl, refused, token_kubeconfig
from tests.cluster.workloads import eventually, h100
from tests.deploy.chart import one, render

pytestmark = pytest.mark.cluster

RELEASE = "qc-agents"
POLICY = f"{RELEASE}-queue-controller-node-agent-own-node"
NODE_NAME = "authentication.kubernetes.io/node-name"
PROBE = "queue-controller.io/test-agent-probe"
CONDITION = "QcTestAgentProbe"  # a condition nothing else reads


@pytest.fixture(scope="module")
def agent(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """The chart's node agent account, role, binding and policy, in a namespace of its own:
    (namespace, service account)."""
    namespace = f"qc-agents-{secrets.token_hex(3)}"
    docs = render("nodeAgent.enabled=true", namespace=namespace, release=RELEASE)
    kinds = (
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    )
    agent_docs = [
        d
        for d in docs
        if d["kind"] in kinds
        and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "node-agent"
    ]
    assert sorted(d["kind"] for d in agent_docs) == sorted(kinds)
    assert one(agent_docs, "ValidatingAdmissionPolicy")["metadata"]["name"] == POLICY
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    applied = kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(agent_docs))
    assert applied.returncode == 0, applied.stderr
    account = one(agent_docs, "ServiceAccount")["metadata"]["name"]
    try:
        yield namespace, account
    finally:
        for doc in agent_docs:
            if doc["kind"] != "ServiceAccount":
                kubectl(cluster, "delete", doc["kind"].lower(), doc["metadata"]["name"])
        cluster.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        cluster.core.delete_namespace(namespace)


def agent_pod(cluster: Cluster, namespace: str, account: str, node: str) -> str:
    """A pod of the agent's account bound to ``node`` (as the DaemonSet's would be)."""
    name = f"agent-{node}"
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": account,
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "agent", "image": "queue-controller"}],
        },
    }
    made = kubectl(cluster, "create", "-n", namespace, "-f", "-", stdin=as_json(body))
    assert made.returncode == 0, made.stderr
    return name


def token(cluster: Cluster, namespace: str, account: str, *bound_to: str) -> str:
    bound = ["--bound-object-kind=Pod", f"--bound-object-name={bound_to[0]}"] if bound_to else []
    made = kubectl(cluster, "create", "token", account, "-n", namespace, *bound)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


@pytest.fixture
def nodes(cluster: Cluster) -> Iterator[tuple[str, str]]:
    """Two nodes, A and B; the test's marks on them are taken off afterwards."""
    a, b = h100(6, 7)
    yield a, b
    for node in (a, b):
        kubectl(cluster, "annotate", "node", node, f"{PROBE}-")
        kubectl(cluster, "label", "node", node, f"{PROBE}-")
        gone = {"status": {"conditions": [{"type": CONDITION, "$patch": "delete"}]}}
        kubectl(
            cluster, "patch", "node", node, "--subresource=status",
            "--type=strategic", "-p", json.dumps(gone),
        )  # fmt: skip


def condition_patch() -> str:
    now = "2026-01-01T00:00:00Z"
    condition = {
        "type": CONDITION,
        "status": "True",
        "reason": "Probe",
        "message": "written by the node agent's token",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return json.dumps({"status": {"conditions": [condition]}})


def writes(cluster: Cluster, config: Path, node: str) -> list[Any]:
    """The agent's three writes on ``node`` (NodeHealthPublisher's: an annotation, a taint or
    label on the object, a condition on its status), each as the token."""
    return [
        kubectl(cluster, "annotate", "node", node, "--overwrite", f"{PROBE}=x", kubeconfig=config),
        kubectl(cluster, "label", "node", node, "--overwrite", f"{PROBE}=x", kubeconfig=config),
        status_patch(config, node),
    ]


def status_patch(config: Path, node: str) -> subprocess.CompletedProcess[str]:
    """The GPUHealthy-style condition patch, as the agent sends it: a strategic merge PATCH of
    nodes/status and nothing else (``kubectl patch --subresource=status`` would GET first,
    which the agent's role does not grant)."""
    api = client.CoreV1Api(config_loader.new_client_from_config(config_file=str(config)))
    args = ["patch", "nodes/status", node]
    try:
        api.patch_node_status(
            node,
            json.loads(condition_patch()),
            _content_type="application/strategic-merge-patch+json",
        )
    except ApiException as error:
        reason = json.loads(error.body).get("message", error.body) if error.body else error.reason
        return subprocess.CompletedProcess(args, 1, "", f"Error from server (Forbidden): {reason}")
    return subprocess.CompletedProcess(args, 0, "", "")


def wait_for_the_policy(cluster: Cluster, config: Path, node: str, message: str) -> None:
    """Wait until the API server enforces the policy on this token's writes to ``node``.

    A new policy and binding reach the API server's admission cache a moment after they
    are created; a write before that is let through.  A server-side dry run goes through
    admission but changes nothing, so the wait leaves no mark for the test to trip on."""
    last: list[Any] = []

    def in_force() -> bool:
        last[:] = [
            kubectl(
                cluster, "annotate", "node", node, "--overwrite", f"{PROBE}=x",
                "--dry-run=server", kubeconfig=config,
            )
        ]  # fmt: skip
        return refused(last[0], POLICY, message)

    try:
        eventually(in_force, timeout=30, what=f"the policy {POLICY} to be in force")
    except AssertionError as error:
        raise AssertionError(f"{error}: {[r.stderr or r.stdout for r in last]}") from None


def test_a_node_agent_writes_its_own_node_and_no_other(
    cluster: Cluster, agent: tuple[str, str], nodes: tuple[str, str], tmp_path: Path
) -> None:
    namespace, account = agent
    a, b = nodes
    on_a = agent_pod(cluster, namespace, account, a)
    config = token_kubeconfig(cluster, token(cluster, namespace, account, on_a), tmp_path / "a")
    # The token carries its pod's node: what the policy reads.
    whoami = kubectl(cluster, "auth", "whoami", "-o", "json", kubeconfig=config)
    assert whoami.returncode == 0, whoami.stderr
    extra = json.loads(whoami.stdout)["status"]["userInfo"].get("extra", {})
    assert extra.get(NODE_NAME) == [a], extra
    user = f"system:serviceaccount:{namespace}:{account}"
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == user

    wait_for_the_policy(cluster, config, b, f"node agent on {a} cannot write Node {b}")
    last: list[Any] = []

    def own_node_written() -> bool:
        last[:] = writes(cluster, config, a)
        return all(allowed(r) for r in last)

    # RBAC and the policy both need a moment to reach the API server's caches.
    try:
        eventually(own_node_written, timeout=30, what="the agent's token to write its own Node")
    except AssertionError as error:
        raise AssertionError(f"{error}: {[r.stderr for r in last]}") from None
    node = cluster.core.read_node(a)
    assert node.metadata.annotations[PROBE] == "x"
    assert any(c.type == CONDITION for c in node.status.conditions)
    for result in writes(cluster, config, b):
        assert refused(result, POLICY, f"node agent on {a} cannot write Node {b}"), result.stderr
    node = cluster.core.read_node(b)
    assert PROBE not in (node.metadata.annotations or {})
    assert PROBE not in (node.metadata.labels or {})
    assert all(c.type != CONDITION for c in node.status.conditions)


def test_a_token_bound_to_no_pod_writes_no_node(
    cluster: Cluster, agent: tuple[str, str], nodes: tuple[str, str], tmp_path: Path
) -> None:
    namespace, account = agent
    a, _ = nodes
    config = token_kubeconfig(cluster, token(cluster, namespace, account), tmp_path / "unbound")
    # RBAC lets the account read Nodes (a sign the token works at all) ...
    eventually(
        lambda: allowed(kubectl(cluster, "get", "node", a, kubeconfig=config)),
        timeout=30,
        what="the token to authenticate",
    )
    # ... and the policy refuses every write.
    wait_for_the_policy(cluster, config, a, "bound to no pod on a node")
    for result in writes(cluster, config, a):
        assert refused(result, POLICY, "bound to no pod on a node"), result.stderr
    assert PROBE not in (cluster.core.read_node(a).metadata.annotations or {})
