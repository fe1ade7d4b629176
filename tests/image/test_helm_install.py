"""``helm install`` of the chart, with the image just built, on the local cluster.

Every object the chart renders is created, and the Deployment rolls out as far as kwok's
pretend pods go (kwok marks them Running and Ready; nothing runs inside them, so the image
itself is exercised by test_image_run.py). In place of ``helm test``, whose pod kwok would
never finish, the checks a test pod would make from inside are made from here: the release
is deployed, its Services have the pods behind them, and the webhook's certificate chains
to the caBundle the API server is given. A mistyped value is refused before anything is
created.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml
from cryptography import x509

from tests.cluster.conftest import Cluster
from tests.cluster.people import kubectl
from tests.deploy.chart import CHART, HELM, Doc
from tests.image.conftest import Image

pytestmark = pytest.mark.image

RELEASE = "qc-helm"
FULL_NAME = f"{RELEASE}-queue-controller"


@dataclass(frozen=True)
class Release:
    namespace: str
    repository: str
    tag: str
    manifest: list[Doc]


def helm(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HELM), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def kubectl_json(cluster: Cluster, *args: str) -> Doc:
    result = kubectl(cluster, "get", "-o", "json", *args)
    assert result.returncode == 0, result.stderr
    parsed: Doc = json.loads(result.stdout)
    return parsed


def controller_pods(cluster: Cluster, release: Release) -> list[Doc]:
    """The pods the Deployment's own selector picks."""
    deployment = kubectl_json(cluster, f"deployment/{FULL_NAME}", "-n", release.namespace)
    labels = deployment["spec"]["selector"]["matchLabels"]
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    pods: list[Doc] = kubectl_json(cluster, "pods", "-n", release.namespace, "-l", selector)[
        "items"
    ]
    return pods


@pytest.fixture(scope="module")
def release(cluster: Cluster, image: Image) -> Iterator[Release]:
    repository, tag = image.name.rsplit(":", 1)
    namespace = f"qc-helm-{secrets.token_hex(3)}"
    installed = helm(
        cluster,
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--set",
        f"image.repository={repository},image.tag={tag},image.pullPolicy=Never",
        "--wait",
        "--timeout",
        "180s",
    )
    try:
        assert installed.returncode == 0, installed.stderr
        manifest = helm(cluster, "get", "manifest", RELEASE, "--namespace", namespace)
        assert manifest.returncode == 0, manifest.stderr
        docs = [d for d in yaml.safe_load_all(manifest.stdout) if d]
        yield Release(namespace, repository, tag, docs)
    finally:
        # The chart's webhook (failurePolicy Fail) and policies must not outlive the test:
        # kwok's pods serve nothing, so they would refuse every queued Job after it.
        helm(cluster, "uninstall", RELEASE, "--namespace", namespace, "--wait")
        kubectl(cluster, "delete", "namespace", namespace, "--wait=false")


def test_every_rendered_object_exists(cluster: Cluster, release: Release) -> None:
    kinds = {d["kind"] for d in release.manifest}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "Role", "Service"} <= kinds
    assert {"MutatingWebhookConfiguration", "ValidatingAdmissionPolicy"} <= kinds
    listed = kubectl(
        cluster, "get", "-f", "-", "-o", "name", stdin=yaml.safe_dump_all(release.manifest)
    )
    assert listed.returncode == 0, listed.stderr
    assert len(listed.stdout.split()) == len(release.manifest)
    status = json.loads(
        helm(cluster, "status", RELEASE, "-n", release.namespace, "-o", "json").stdout
    )
    assert status["info"]["status"] == "deployed"


def test_the_deployment_rolls_out_with_the_built_image(cluster: Cluster, release: Release) -> None:
    rolled = kubectl(
        cluster,
        "rollout",
        "status",
        f"deployment/{FULL_NAME}",
        "-n",
        release.namespace,
        "--timeout=90s",
    )
    assert rolled.returncode == 0, rolled.stderr
    deployment = kubectl_json(cluster, f"deployment/{FULL_NAME}", "-n", release.namespace)
    pods = controller_pods(cluster, release)
    assert len(pods) == deployment["spec"]["replicas"] == 2
    for pod in pods:
        container = pod["spec"]["containers"][0]
        assert container["image"] == f"{release.repository}:{release.tag}"
        assert pod["spec"]["serviceAccountName"] == FULL_NAME
        assert pod["status"]["phase"] == "Running"


def test_the_services_have_the_pods_behind_them(cluster: Cluster, release: Release) -> None:
    pods = controller_pods(cluster, release)
    pod_ips = {p["status"]["podIP"] for p in pods}
    for service in (f"{FULL_NAME}-metrics", f"{FULL_NAME}-webhook"):
        slices = kubectl_json(
            cluster,
            "endpointslices",
            "-n",
            release.namespace,
            "-l",
            f"kubernetes.io/service-name={service}",
        )["items"]
        addresses = {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}
        assert addresses == pod_ips, service


def test_the_webhook_certificate_chains_to_the_ca_bundle(
    cluster: Cluster, release: Release
) -> None:
    hooks = kubectl_json(cluster, f"mutatingwebhookconfiguration/{FULL_NAME}")
    bundles = {w["clientConfig"]["caBundle"] for w in hooks["webhooks"]}
    assert len(bundles) == 1
    ca = x509.load_pem_x509_certificate(base64.b64decode(bundles.pop()))
    secret = kubectl_json(cluster, f"secret/{FULL_NAME}-webhook-cert", "-n", release.namespace)
    served = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    served.verify_directly_issued_by(ca)
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{FULL_NAME}-webhook.{release.namespace}.svc" in names.get_values_for_type(x509.DNSName)


def test_a_mistyped_value_is_refused_before_anything_is_created(
    cluster: Cluster, image: Image
) -> None:
    namespace = f"qc-helm-typo-{secrets.token_hex(3)}"
    refused = helm(
        cluster,
        "install",
        "qc-typo",
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--set",
        "replicas=two",
    )
    assert refused.returncode != 0
    assert "replicas" in refused.stderr, refused.stderr
    assert helm(cluster, "status", "qc-typo", "-n", namespace).returncode != 0
    assert kubectl(cluster, "get", "namespace", namespace).returncode != 0
