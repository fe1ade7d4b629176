"""deploy/manifests/ (controller and node agent) and the chart's RBAC, before a real API server.

The manifests are checked with a server-side dry run (after their CRDs and namespace are
made for real), so nothing that would change other tests' cluster, such as a webhook
that holds every queued Job, is left behind. The RBAC is created for real in a test
namespace and questioned with ``kubectl auth can-i --as`` the controller's account.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from cryptography import x509

from queue_controller.kube import kinds
from tests.cluster.conftest import ROOT, Cluster
from tests.deploy.chart import CHART, MANIFESTS, Doc, helm, one, render, required_rules

# One webhook per workload kind and queue label (ours, then Kueue's).
WEBHOOKS = len(kinds.KINDS) * len(kinds.QUEUE_LABELS)

pytestmark = pytest.mark.cluster
SYSTEM = "queue-controller-system"


def run_kubectl(
    cluster: Cluster, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.kubectl_binary), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def as_yaml(docs: list[Doc]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


@pytest.fixture
def system_namespace(cluster: Cluster) -> Iterator[list[Doc]]:
    """The manifests' CRDs and Namespace applied for real; the namespace goes afterwards."""
    docs = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    existed = run_kubectl(cluster, "get", "namespace", SYSTEM).returncode == 0
    first = [d for d in docs if d["kind"] in ("CustomResourceDefinition", "Namespace")]
    applied = run_kubectl(
        cluster, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=as_yaml(first)
    )
    assert applied.returncode == 0, applied.stderr
    for crd in (d for d in first if d["kind"] == "CustomResourceDefinition"):
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
        )
    yield docs
    if not existed:
        run_kubectl(cluster, "delete", "namespace", SYSTEM, "--wait=false")


def test_manifests_and_the_node_agent_pass_a_server_side_dry_run(
    cluster: Cluster, system_namespace: list[Doc]
) -> None:
    docs = system_namespace
    assert "ServiceMonitor" not in {d["kind"] for d in docs}
    result = run_kubectl(
        cluster, "apply", "--server-side", "--dry-run=server", "-f", str(MANIFESTS)
    )
    assert result.returncode == 0, result.stderr
    # Every object was accepted, and the pods would pass the namespace's restricted
    # Pod Security profile (the API server warns on the Deployment otherwise).
    assert len(result.stdout.splitlines()) == len(docs), result.stdout
    assert "serverside-applied (server dry run)" in result.stdout
    assert "PodSecurity" not in result.stderr, result.stderr
    # The node agent's DaemonSet, RBAC and account go into the same namespace.
    agent = MANIFESTS.with_name("node-agent.yaml")
    agent_docs = [d for d in yaml.safe_load_all(agent.read_text()) if d]
    assert sorted(d["kind"] for d in agent_docs) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",  # the agent writes only its own Node
        "ValidatingAdmissionPolicyBinding",
    ]
    result = run_kubectl(cluster, "apply", "--server-side", "--dry-run=server", "-f", str(agent))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(agent_docs), result.stdout


@pytest.fixture
def controller_account(cluster: Cluster, namespace: str) -> Iterator[tuple[str, str]]:
    """The chart's ServiceAccount, ClusterRole, Role and bindings, made for real."""
    release = f"qc-rbac-{secrets.token_hex(3)}"
    # The roles for people are tried in test_user_rbac.py. GPU health checking on (DCGM): the
    # controller's Node writes are granted only then, and required_rules() holds them.
    docs = render(
        "userRoles.enabled=false",
        "settings.dcgmUrls=http://dcgm-exporter:9400/metrics",
        namespace=namespace,
        release=release,
    )
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    rbac = [d for d in docs if d["kind"] in kinds]
    applied = run_kubectl(cluster, "apply", "-f", "-", stdin=as_yaml(rbac))
    assert applied.returncode == 0, applied.stderr
    account = one(docs, "ServiceAccount")["metadata"]["name"]
    lease = one(docs, "Role")["rules"][0]["resourceNames"][0]
    try:
        yield f"system:serviceaccount:{namespace}:{account}", lease
    finally:
        for kind in ("ClusterRoleBinding", "ClusterRole"):
            gone = run_kubectl(cluster, "delete", kind.lower(), one(docs, kind)["metadata"]["name"])
            assert gone.returncode == 0, gone.stderr


def can_i(cluster: Cluster, user: str, verb: str, what: str, *flags: str) -> bool:
    result = run_kubectl(cluster, "auth", "can-i", verb, what, f"--as={user}", *flags)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), result.stderr
    return answer == "yes"


def test_controller_account_can_do_what_the_code_does(
    cluster: Cluster,
    crds: None,
    operators: None,
    namespace: str,
    controller_account: tuple[str, str],
) -> None:
    # With our CRDs and the operators' served: `kubectl auth can-i` answers no for a
    # resource the API server does not know, whatever the ClusterRole grants.
    user, lease = controller_account
    refused = []
    for group, res, verb in sorted(required_rules()):
        name, _, sub = res.partition("/")
        what = f"{name}.{group}" if group else name
        flags = ["--all-namespaces", *([f"--subresource={sub}"] if sub else [])]
        if not can_i(cluster, user, verb, what, *flags):
            refused.append((verb, res, group))
    assert not refused
    assert can_i(cluster, user, "update", "jobs.batch", "-A", "--subresource=finalizers")
    assert can_i(cluster, user, "watch", "customresourcedefinitions.apiextensions.k8s.io")
    assert can_i(cluster, user, "get", f"leases.coordination.k8s.io/{lease}", "-n", namespace)
    assert can_i(cluster, user, "update", f"leases.coordination.k8s.io/{lease}", "-n", namespace)
    assert can_i(cluster, user, "create", "leases.coordination.k8s.io", "-n", namespace)


@pytest.mark.parametrize(
    ("verb", "what", "flags"),
    [
        ("delete", "nodes", ()),
        ("create", "jobs.batch", ("-A",)),
        ("update", "jobs.batch", ("-A",)),
        ("delete", "jobs.batch", ("-A",)),
        ("get", "secrets", ("-A",)),
        ("update", "secrets", ("-A",)),
        ("update", "namespaces", ()),
        ("delete", "namespaces", ()),
        ("patch", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ()),
        ("create", "mutatingwebhookconfigurations.admissionregistration.k8s.io", ()),
        ("update", "podgroups.queue-controller.io", ("-A",)),
        ("patch", "queues.queue-controller.io", ("-A",)),
        ("update", "teamquotas.queue-controller.io", ("-A", "--subresource=status")),
        ("patch", "events", ("-A",)),
        ("create", "leases.coordination.k8s.io", ("-n", "default")),
        ("bind", "clusterroles.rbac.authorization.k8s.io", ()),
    ],
)
def test_controller_account_is_denied_the_rest(
    cluster: Cluster,
    controller_account: tuple[str, str],
    verb: str,
    what: str,
    flags: tuple[str, ...],
) -> None:
    user, _ = controller_account
    assert not can_i(cluster, user, verb, what, *flags)


def test_controller_account_may_not_touch_another_lease(
    cluster: Cluster, namespace: str, controller_account: tuple[str, str]
) -> None:
    user, _ = controller_account
    for verb in ("get", "update", "delete"):
        assert not can_i(cluster, user, verb, "leases.coordination.k8s.io/other", "-n", namespace)


def test_webhook_certs_script_fills_secret_and_ca_bundle(cluster: Cluster, namespace: str) -> None:
    """deploy/manifests/webhook-certs.sh on a webhook configuration that matches no
    namespace (so no other test's Jobs go through it)."""
    release = f"qc-certs-{secrets.token_hex(3)}"
    docs = render(
        "webhook.generateCertificate=false",
        "webhook.namespaceSelector.matchLabels.queue-controller\\.io/never=match",
        namespace=namespace,
        release=release,
    )
    config = one(docs, "MutatingWebhookConfiguration")
    name = config["metadata"]["name"]  # the release's full name, as NAME wants it
    applied = run_kubectl(cluster, "apply", "-f", "-", stdin=as_yaml([config]))
    assert applied.returncode == 0, applied.stderr
    script = ROOT / "deploy" / "manifests" / "webhook-certs.sh"
    environment = {
        **os.environ,
        "NAMESPACE": namespace,
        "NAME": name,
        "KUBECTL": str(cluster.kubectl_binary),
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    try:
        made = subprocess.run(
            [str(script)], env=environment, capture_output=True, text=True, timeout=120
        )
        assert made.returncode == 0, made.stderr
        assert "made a new CA" in made.stdout
        secret = yaml.safe_load(
            cluster.kubectl("get", "secret", f"{name}-webhook-cert", "-n", namespace, "-o", "yaml")
        )
        data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        assert sorted(data) == ["ca.crt", "tls.crt", "tls.key"]
        cert = x509.load_pem_x509_certificate(data["tls.crt"])
        ca = x509.load_pem_x509_certificate(data["ca.crt"])
        assert cert.issuer == ca.subject
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert f"{name}-webhook.{namespace}.svc" in sans.get_values_for_type(x509.DNSName)

        def bundles() -> list[bytes]:
            live = yaml.safe_load(
                cluster.kubectl("get", "mutatingwebhookconfiguration", name, "-o", "yaml")
            )
            return [base64.b64decode(w["clientConfig"]["caBundle"]) for w in live["webhooks"]]

        assert bundles() == [data["ca.crt"]] * WEBHOOKS
        again = subprocess.run(
            [str(script)], env=environment, capture_output=True, text=True, timeout=120
        )
        assert again.returncode == 0, again.stderr
        assert "reusing the CA" in again.stdout
        assert bundles() == [data["ca.crt"]] * WEBHOOKS
    finally:
        run_kubectl(cluster, "delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")


def test_helm_reuses_the_certificate_secret_it_finds(cluster: Cluster, namespace: str) -> None:
    """What `helm upgrade` sees: a render that can look up keeps the existing certificate
    (and its CA in the caBundle) instead of making a new one."""
    release = f"qc-upgrade-{secrets.token_hex(3)}"
    first = one(render(namespace=namespace, release=release), "Secret")
    applied = run_kubectl(cluster, "apply", "-f", "-", stdin=as_yaml([first]))
    assert applied.returncode == 0, applied.stderr
    result = helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--dry-run=server",
        "--kubeconfig",
        str(cluster.kubeconfig),
    )
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert one(docs, "Secret")["data"] == first["data"]
    for webhook in one(docs, "MutatingWebhookConfiguration")["webhooks"]:
        assert webhook["clientConfig"]["caBundle"] == first["data"]["ca.crt"]
    # Without a lookup (helm template alone): a new CA every time.
    offline = helm("template", release, str(CHART), "--namespace", namespace).stdout
    fresh = one([d for d in yaml.safe_load_all(offline) if d], "Secret")
    assert fresh["data"]["ca.crt"] != first["data"]["ca.crt"]
