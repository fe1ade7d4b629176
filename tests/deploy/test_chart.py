"""The Helm chart and the manifests rendered from it, without a cluster.

helm is the one ``make cluster-build`` builds (deploy/local-cluster/bin/helm); without it
these tests fail and say so. tests/cluster/test_deploy_manifests.py puts the same
objects before a real API server.
"""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from queue_controller.controller.settings import Settings
from queue_controller.kube import kinds as workload_kinds
from queue_controller.kube.kinds import KUEUE_QUEUE_LABEL, QUEUE_LABEL, WebhookRule
from tests.deploy.chart import (
    CHART,
    CONTROLLER,
    JUSTIFIED_EXTRAS,
    MANIFESTS,
    RENDER,
    ROOT,
    Doc,
    container,
    env,
    gateway_methods,
    granted,
    helm,
    one,
    render,
    render_error,
    required_rules,
)

SETTINGS = Settings.model_fields
DEFAULT_KINDS = [
    "ClusterRole",  # the controller's, then the user, quota-viewer and quota-admin roles
    "ClusterRole",
    "ClusterRole",
    "ClusterRole",
    "ClusterRoleBinding",  # the controller's, then quota-viewer's to system:authenticated
    "ClusterRoleBinding",
    "Deployment",
    "MutatingWebhookConfiguration",
    "PodDisruptionBudget",
    "Role",
    "RoleBinding",
    "Secret",
    "Service",
    "Service",
    "ServiceAccount",
    *["ValidatingAdmissionPolicy"] * 7,  # admission-policies.yaml: one per rule
    *["ValidatingAdmissionPolicyBinding"] * 7,
]
# Cluster-scoped objects: no namespace.
CLUSTER_KINDS = (
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)


def kinds(docs: list[Doc]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def setting_of(name: str) -> str:
    """QC_FOO_BAR -> foo_bar."""
    assert name.startswith("QC_"), f"{name} is not a QC_* setting"
    return name.removeprefix("QC_").lower()


# -- the chart as a whole ----------------------------------------------------------------


def test_chart_crds_are_copies_of_the_repository_crds() -> None:
    ours = {p.name: p.read_bytes() for p in (ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert sorted(chart) == sorted(ours), "copy crds/*.yaml into the chart's crds/"
    for name, text in ours.items():
        assert chart[name] == text, f"{name} differs from crds/: copy it again"


def test_committed_manifests_are_a_fresh_render() -> None:
    helm("version")  # fails the test, naming make cluster-build, when helm is not built
    fresh = subprocess.run(
        [str(RENDER)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert MANIFESTS.read_text() == fresh, "deploy/manifests is stale: run make manifests"


def test_committed_manifests_carry_no_key_material() -> None:
    text = MANIFESTS.read_text()
    assert "PRIVATE KEY" not in text
    assert "caBundle" not in text
    docs = render("createNamespace=true", "webhook.generateCertificate=false")
    assert "Secret" not in kinds(docs)


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="defaults"),
        pytest.param(
            (
                "metrics.serviceMonitor.enabled=true",
                "webhook.certManager.enabled=true",
                "journal.existingSecret=journal-db",
                "replicas=1",
            ),
            id="everything-on",
        ),
        pytest.param(("webhook.enabled=false", "metrics.enabled=false"), id="everything-off"),
    ],
)
def test_helm_lint_passes(sets: tuple[str, ...]) -> None:
    flags = [item for pair in sets for item in ("--set", pair)]
    result = helm("lint", "--strict", str(CHART), *flags, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_default_render() -> None:
    docs = render()
    assert kinds(docs) == DEFAULT_KINDS
    for doc in docs:
        if doc["kind"] not in CLUSTER_KINDS:
            assert doc["metadata"]["namespace"] == "queue-controller-system", doc["kind"]
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    c = container(docs)
    assert c["command"] == ["queue-controller"]
    assert c["args"] == ["run"]
    assert c["image"] == "queue-controller:0.1.0"


def test_namespace_object_only_when_asked() -> None:
    assert "Namespace" not in kinds(render())
    ns = one(render("createNamespace=true", namespace="team-x"), "Namespace")
    assert ns["metadata"]["name"] == "team-x"


# -- the Deployment ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((), id="defaults"),
        pytest.param(("journal.existingSecret=journal-db",), id="journal-secret"),
        pytest.param(("webhook.enabled=false",), id="no-webhook"),
        pytest.param(
            (
                "settings.tickSeconds=2",
                "settings.batchSeconds=0.5",
                "settings.cyclePeriodSeconds=2",
                "settings.podsReadyTimeoutSeconds=600",
                "settings.statusWritesPerCycle=50",
            ),
            id="settings",
        ),
        pytest.param(
            (
                "settings.dcgmUrls=http://dcgm:9400/metrics",
                "settings.dcgmIntervalSeconds=15",
                "settings.gpuClearSeconds=300",
                "settings.gpuTaint=true",
                "settings.idleThreshold=0.1",
                "settings.idleWindowSeconds=600",
            ),
            id="gpu-health-settings",
        ),
    ],
)
def test_every_environment_variable_is_a_setting(sets: tuple[str, ...]) -> None:
    variables = env(render(*sets))
    unknown = [name for name in variables if setting_of(name) not in SETTINGS]
    assert not unknown, f"not fields of Settings: {unknown}"


def test_settings_map_sets_each_extra_setting() -> None:
    variables = env(render("settings.podsReadyTimeoutSeconds=600", "settings.tickSeconds=2.5"))
    assert variables["QC_PODS_READY_TIMEOUT_SECONDS"]["value"] == "600"
    assert variables["QC_TICK_SECONDS"]["value"] == "2.5"


def test_settings_map_refuses_what_the_controller_would_ignore() -> None:
    error = render_error("settings.podsReadyTimout=600")
    assert "settings.podsReadyTimout is not a setting" in error


def test_environment_sets_identity_lease_and_servers() -> None:
    variables = env(render())
    assert variables["QC_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert variables["QC_IDENTITY"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    values = {name: v.get("value") for name, v in variables.items()}
    assert values["QC_LEADER_ELECTION"] == "true"
    assert values["QC_LEASE_DURATION_SECONDS"] == "15"
    assert values["QC_RENEW_DEADLINE_SECONDS"] == "10"
    assert values["QC_RETRY_PERIOD_SECONDS"] == "2"
    assert values["QC_JOURNAL_URL"] == "sqlite:////var/lib/queue-controller/journal.db"
    assert values["QC_METRICS_HOST"] == "0.0.0.0"
    assert values["QC_METRICS_PORT"] == "8080"
    assert values["QC_WEBHOOK"] == "service"
    assert values["QC_WEBHOOK_PORT"] == "9443"
    assert values["QC_WEBHOOK_CERT_DIR"] == "/etc/queue-controller/webhook"
    assert values["QC_LOG_LEVEL"] == "INFO"
    # The values the chart passes are ones Settings accepts.
    Settings(
        namespace="ns",
        identity="pod",
        **{
            setting_of(name): value
            for name, value in values.items()
            if value is not None and name not in ("QC_NAMESPACE", "QC_IDENTITY")
        },
    )


def test_journal_url_from_a_secret() -> None:
    variables = env(render("journal.existingSecret=journal-db", "journal.secretKey=dsn"))
    assert variables["QC_JOURNAL_URL"] == {
        "name": "QC_JOURNAL_URL",
        "valueFrom": {"secretKeyRef": {"name": "journal-db", "key": "dsn"}},
    }


def test_journal_on_a_claim_when_persistent() -> None:
    docs = render("journal.persistence.enabled=true", "replicas=1")
    claim = one(docs, "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["journal"] == {
        "name": "journal",
        "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
    }
    assert "PersistentVolumeClaim" not in kinds(render())


def test_security_context_and_writable_mounts() -> None:
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container(docs)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in container(docs)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    journal = env(docs)["QC_JOURNAL_URL"]["value"].removeprefix("sqlite:///")
    assert "emptyDir" in volumes[mounts[str(Path(journal).parent)]]


def test_probes_on_the_metrics_port() -> None:
    c = container(render("metrics.port=9090"))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == 9090
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


def test_single_replica_has_no_disruption_budget() -> None:
    docs = render("replicas=1")
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    assert "PodDisruptionBudget" not in kinds(docs)


def test_replicas_without_leader_election_are_refused() -> None:
    assert "needs leaderElection.enabled" in render_error("leaderElection.enabled=false")
    docs = render("leaderElection.enabled=false", "replicas=1")
    assert env(docs)["QC_LEADER_ELECTION"]["value"] == "false"


def test_scheduling_knobs_pass_through() -> None:
    docs = render(
        "priorityClassName=high",
        "nodeSelector.pool=system",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "podAnnotations.team=infra",
        "imagePullSecrets[0].name=regcred",
        "image.repository=registry.example/qc",
        "image.tag=1.2.3",
    )
    template = one(docs, "Deployment")["spec"]["template"]
    pod = template["spec"]
    assert pod["priorityClassName"] == "high"
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert template["metadata"]["annotations"] == {"team": "infra"}
    assert container(docs)["image"] == "registry.example/qc:1.2.3"
    assert "priorityClassName" not in one(render(), "Deployment")["spec"]["template"]["spec"]


# -- metrics -----------------------------------------------------------------------------


def test_service_monitor_only_when_enabled() -> None:
    assert "ServiceMonitor" not in kinds(render())
    docs = render(
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.interval=15s",
        "metrics.serviceMonitor.labels.release=prometheus",
    )
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s"}
    ]
    service = one(docs, "Service", "queue-controller-metrics")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["name"] == "metrics"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["queue-controller-system"]}


def test_metrics_service_selects_the_pods() -> None:
    docs = render()
    service = one(docs, "Service", "queue-controller-metrics")
    labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


# -- the webhook -------------------------------------------------------------------------


def handler_ids() -> list[tuple[str, WebhookRule]]:
    """(kopf handler id, rule) for every webhook, by handlers.py's own formula and the
    registry of workload kinds, in the order the chart renders them."""
    formula = "id=f\"hold-{resource.plural}-{label.split('/')[0]}\""
    assert formula in (CONTROLLER / "controller" / "handlers.py").read_text(), (
        "handlers.py names its webhook handlers differently now: update the chart's "
        "webhook paths (templates/webhook.yaml) and this test"
    )
    return [
        (f"hold-{kind.webhook.resource.plural}-{label.split('/')[0]}", kind.webhook)
        for kind in workload_kinds.KINDS
        for label in (QUEUE_LABEL, KUEUE_QUEUE_LABEL)
    ]


def test_webhook_paths_are_the_handler_ids() -> None:
    docs = render()
    config = one(docs, "MutatingWebhookConfiguration")
    webhooks = config["webhooks"]
    expected = handler_ids()
    assert [w["clientConfig"]["service"]["path"] for w in webhooks] == [
        f"/{i}" for i, _ in expected
    ]
    labels = [w["objectSelector"]["matchExpressions"] for w in webhooks]
    assert labels == [
        [{"key": label, "operator": "Exists"}]
        for _ in workload_kinds.KINDS
        for label in (QUEUE_LABEL, KUEUE_QUEUE_LABEL)
    ]
    for w, (_, rule) in zip(webhooks, expected, strict=True):
        assert w["rules"] == [
            {
                "apiGroups": [rule.resource.group],
                "apiVersions": [rule.resource.version],
                "resources": [rule.resource.plural],
                "operations": list(rule.operations),
                "scope": "Namespaced",
            }
        ]
    service = one(docs, "Service", "queue-controller-webhook")
    for w in webhooks:
        assert w["clientConfig"]["service"] == {
            "name": "queue-controller-webhook",
            "namespace": "queue-controller-system",
            "port": 443,
            "path": w["clientConfig"]["service"]["path"],
        }
        assert w["failurePolicy"] == "Fail"
        assert w["sideEffects"] == "None"
        assert w["admissionReviewVersions"] == ["v1"]
        assert w["timeoutSeconds"] == 10
        assert w["matchPolicy"] == "Equivalent"
        assert w["namespaceSelector"] == {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system"],
                }
            ]
        }
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    ports = {p["name"]: p["containerPort"] for p in container(docs)["ports"]}
    assert ports["webhook"] == int(env(docs)["QC_WEBHOOK_PORT"]["value"])


def _verify(cert: x509.Certificate, issuer: x509.Certificate) -> None:
    key = issuer.public_key()
    assert cert.signature_hash_algorithm is not None
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(
            cert.signature,
            cert.tbs_certificate_bytes,
            padding.PKCS1v15(),
            cert.signature_hash_algorithm,
        )
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(
            cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm)
        )


def test_helm_generated_certificate_serves_the_webhook_service() -> None:
    docs = render(namespace="qc")
    secret = one(docs, "Secret")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert secret["type"] == "kubernetes.io/tls"
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    _verify(cert, ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    svc = "queue-controller-webhook"
    assert sorted(names.get_values_for_type(x509.DNSName)) == sorted(
        [svc, f"{svc}.qc", f"{svc}.qc.svc", f"{svc}.qc.svc.cluster.local"]
    )
    assert b"PRIVATE KEY" in data["tls.key"]
    for webhook in one(docs, "MutatingWebhookConfiguration")["webhooks"]:
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == data["ca.crt"]
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    cert_volume = next(v for v in volumes if v["name"] == "webhook-cert")
    assert cert_volume["secret"]["secretName"] == secret["metadata"]["name"]
    mount = next(m for m in container(docs)["volumeMounts"] if m["name"] == "webhook-cert")
    assert mount["mountPath"] == env(docs)["QC_WEBHOOK_CERT_DIR"]["value"]


def test_helm_reuses_the_certificate_secret_on_upgrade() -> None:
    text = (CHART / "templates" / "webhook.yaml").read_text()
    assert re.search(r'lookup "v1" "Secret" \.Release\.Namespace \$secretName', text)


def test_cert_manager_issues_the_certificate() -> None:
    docs = render("webhook.certManager.enabled=true")
    assert "Secret" not in kinds(docs)
    issuer = one(docs, "Issuer")
    certificate = one(docs, "Certificate")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    svc = "queue-controller-webhook"
    assert f"{svc}.queue-controller-system.svc" in certificate["spec"]["dnsNames"]
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    cert_volume = next(v for v in volumes if v["name"] == "webhook-cert")
    assert cert_volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    config = one(docs, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "queue-controller-system/"
        + certificate["metadata"]["name"]
    }
    assert all("caBundle" not in w["clientConfig"] for w in config["webhooks"])


def test_cert_manager_with_an_issuer_of_your_own() -> None:
    docs = render(
        "webhook.certManager.enabled=true",
        "webhook.certManager.issuerRef.name=corp-ca",
        "webhook.certManager.issuerRef.kind=ClusterIssuer",
    )
    assert "Issuer" not in kinds(docs)
    assert one(docs, "Certificate")["spec"]["issuerRef"] == {
        "group": "cert-manager.io",
        "name": "corp-ca",
        "kind": "ClusterIssuer",
    }


def test_certificate_made_outside_the_chart() -> None:
    docs = render("webhook.generateCertificate=false", "webhook.caBundle=Q0E=")
    assert "Secret" not in kinds(docs)
    for webhook in one(docs, "MutatingWebhookConfiguration")["webhooks"]:
        assert webhook["clientConfig"]["caBundle"] == "Q0E="


def test_webhook_off() -> None:
    docs = render("webhook.enabled=false")
    assert "MutatingWebhookConfiguration" not in kinds(docs)
    assert "Secret" not in kinds(docs)
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Service"] == [
        "queue-controller-metrics"
    ]
    assert env(docs)["QC_WEBHOOK"]["value"] == "off"
    assert "QC_WEBHOOK_CERT_DIR" not in env(docs)
    assert all(m["name"] != "webhook-cert" for m in container(docs)["volumeMounts"])


# -- RBAC --------------------------------------------------------------------------------


def test_gateway_issues_only_methods_this_test_maps() -> None:
    http = {m for methods, _ in gateway_methods().values() for m in methods}
    assert http <= {"GET", "POST", "PATCH", "DELETE"}, (
        f"gateway.py issues {http}: map the new method to an RBAC verb in tests/deploy/chart.py"
    )


# GPU health checking on: the controller's DCGM reader publishes health on Nodes.
DCGM = "settings.dcgmUrls=http://dcgm-exporter:9400/metrics"
NODE_WRITES = {("", "nodes", "patch"), ("", "nodes/status", "patch")}


def test_cluster_role_covers_what_the_controller_does() -> None:
    role = one(render(DCGM), "ClusterRole", "queue-controller")
    missing = required_rules() - granted(role)
    assert not missing, f"the ClusterRole lacks {sorted(missing)}"


def test_node_writes_only_with_health_checking_on() -> None:
    # The only Node writes in the controller are its DCGM reader's (NodeHealthPublisher).
    assert required_rules() >= NODE_WRITES
    role = one(render(), "ClusterRole", "queue-controller")
    assert not NODE_WRITES & granted(role)
    assert required_rules() - NODE_WRITES <= granted(role)
    assert ("", "nodes", "get") in granted(role)  # still reads them, to place gangs
    assert granted(one(render(DCGM), "ClusterRole", "queue-controller")) >= NODE_WRITES


def test_cluster_role_grants_nothing_unexplained() -> None:
    role = one(render(), "ClusterRole", "queue-controller")
    extra = granted(role) - required_rules() - JUSTIFIED_EXTRAS
    assert not extra, f"the ClusterRole grants {sorted(extra)}, which no code path needs"


def test_every_rbac_rule_says_why() -> None:
    lines = (CHART / "templates" / "rbac.yaml").read_text().splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    assert len(rules) >= 10
    for i in rules:
        assert lines[i - 1].strip().startswith("#"), f"rbac.yaml:{i + 1} has no comment above it"


def test_lease_role_is_namespaced_and_names_the_lease() -> None:
    docs = render("leaderElection.leaseName=qc-leader", namespace="ops")
    role = one(docs, "Role")
    assert role["metadata"]["namespace"] == "ops"
    assert env(docs)["QC_LEASE_NAME"]["value"] == "qc-leader"
    rules: list[dict[str, Any]] = role["rules"]
    assert rules == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["qc-leader"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
    binding = one(docs, "RoleBinding")
    account = one(docs, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "ops"}
    ]
    cluster_binding = one(docs, "ClusterRoleBinding", "queue-controller")
    assert cluster_binding["subjects"] == binding["subjects"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]


# -- RBAC for people (templates/user-rbac.yaml) -----------------------------------------

AGGREGATE = [f"rbac.authorization.k8s.io/aggregate-to-{r}" for r in ("view", "edit", "admin")]
READ = ["get", "list", "watch"]
USER_ROLES = (
    "queue-controller-user",
    "queue-controller-quota-viewer",
    "queue-controller-quota-admin",
)


def user_roles(docs: list[Doc]) -> dict[str, Doc]:
    return {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == "ClusterRole"
        and d["metadata"]["name"].endswith(("-user", "-quota-viewer", "-quota-admin"))
    }


def aggregated_to(role: Doc) -> list[str]:
    labels = role["metadata"]["labels"]
    return [label for label in AGGREGATE if labels.get(label) == "true"]


def test_user_roles_grant_what_the_readme_says() -> None:
    roles = user_roles(render())
    assert sorted(roles) == sorted(USER_ROLES)
    group = ["queue-controller.io"]
    user = roles["queue-controller-user"]
    assert user["rules"] == [
        {"apiGroups": group, "resources": ["queues", "podgroups"], "verbs": READ}
    ]
    assert aggregated_to(user) == AGGREGATE
    viewer = roles["queue-controller-quota-viewer"]
    assert viewer["rules"] == [
        {"apiGroups": group, "resources": ["teamquotas", "cohorts", "topologies"], "verbs": READ}
    ]
    assert aggregated_to(viewer) == AGGREGATE
    admin = roles["queue-controller-quota-admin"]
    writes = [*READ, "create", "update", "patch", "delete", "deletecollection"]
    assert admin["rules"] == [
        {
            "apiGroups": group,
            "resources": ["teamquotas", "cohorts", "topologies", "queues"],
            "verbs": writes,
        },
        {"apiGroups": group, "resources": ["podgroups"], "verbs": READ},
    ]
    assert aggregated_to(admin) == []  # bound only to whom the values name


def test_no_user_role_grants_status_podgroup_writes_or_wildcards() -> None:
    """Only the controller writes status, and PodGroups are the controller's own."""
    sets = (
        "userRoles.quotaAdmin.subjects[0].kind=Group",
        "userRoles.quotaAdmin.subjects[0].name=x",
    )
    for name, role in user_roles(render(*sets)).items():
        for rule in role["rules"]:
            assert rule["apiGroups"] == ["queue-controller.io"], name
            assert "resourceNames" not in rule, name
            assert "*" not in rule["verbs"] + rule["resources"], name
            assert not [r for r in rule["resources"] if "/" in r], f"{name} grants a subresource"
            if "podgroups" in rule["resources"]:
                assert rule["verbs"] == READ, name
        if name != "queue-controller-quota-admin":
            assert all(rule["verbs"] == READ for rule in role["rules"]), name


def test_quota_viewer_is_bound_to_every_authenticated_user_unless_turned_off() -> None:
    binding = one(render(), "ClusterRoleBinding", "queue-controller-quota-viewer")
    assert binding["roleRef"]["name"] == "queue-controller-quota-viewer"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
    ]
    docs = render("userRoles.quotaViewer.bindAuthenticated=false")
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"] == [
        "queue-controller"
    ]
    assert "queue-controller-quota-viewer" in user_roles(docs)


def test_quota_admin_is_bound_only_to_the_subjects_given() -> None:
    assert "queue-controller-quota-admin" not in {
        d["metadata"]["name"] for d in render() if d["kind"] == "ClusterRoleBinding"
    }
    docs = render(
        "userRoles.quotaAdmin.subjects[0].kind=Group",
        "userRoles.quotaAdmin.subjects[0].name=platform-admins",
        "userRoles.quotaAdmin.subjects[0].apiGroup=rbac.authorization.k8s.io",
    )
    binding = one(docs, "ClusterRoleBinding", "queue-controller-quota-admin")
    assert binding["roleRef"]["name"] == "queue-controller-quota-admin"
    assert binding["subjects"] == [
        {"kind": "Group", "name": "platform-admins", "apiGroup": "rbac.authorization.k8s.io"}
    ]


def test_user_roles_can_be_left_out_or_kept_out_of_the_built_in_roles() -> None:
    docs = render("userRoles.aggregate=false")
    assert all(aggregated_to(role) == [] for role in user_roles(docs).values())
    docs = render("userRoles.enabled=false")
    assert user_roles(docs) == {}
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"] == [
        "queue-controller"
    ]


def test_user_roles_are_named_for_the_release() -> None:
    names = sorted(user_roles(render(release="gpu-queue")))
    assert names == [
        n.replace("queue-controller", "gpu-queue-queue-controller") for n in sorted(USER_ROLES)
    ]


def test_every_user_rbac_rule_says_why() -> None:
    lines = (CHART / "templates" / "user-rbac.yaml").read_text().splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip().startswith("- apiGroups:")]
    assert len(rules) == 4
    for i in rules:
        assert lines[i - 1].strip().startswith("#"), f"user-rbac.yaml:{i + 1} has no comment"


def test_everything_on_at_once() -> None:
    docs = render(
        "metrics.serviceMonitor.enabled=true",
        "webhook.certManager.enabled=true",
        "journal.existingSecret=journal-db",
        "replicas=1",
    )
    assert kinds(docs) == sorted(
        [k for k in DEFAULT_KINDS if k not in ("PodDisruptionBudget", "Secret")]
        + ["Certificate", "Issuer", "ServiceMonitor"]
    )
    assert "secretKeyRef" in env(docs)["QC_JOURNAL_URL"]["valueFrom"]


# -- managed namespaces (managedJobsNamespaceSelector) ----------------------------------

MANAGED = (
    r"managedJobsNamespaceSelector.matchLabels.queue-controller\.io/managed=true",
    "managedJobsNamespaceSelector.matchExpressions[0].key=kubernetes.io/metadata.name",
    "managedJobsNamespaceSelector.matchExpressions[0].operator=NotIn",
    "managedJobsNamespaceSelector.matchExpressions[0].values={kube-system,queue-controller-system}",
    "managedJobsNamespaceSelector.matchExpressions[1].key=legacy",
    "managedJobsNamespaceSelector.matchExpressions[1].operator=DoesNotExist",
)
MANAGED_SELECTOR = {
    "matchLabels": {"queue-controller.io/managed": "true"},
    "matchExpressions": [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "queue-controller-system"],
        },
        {"key": "legacy", "operator": "DoesNotExist"},
    ],
}


def default_webhooks(docs: list[Doc]) -> list[Doc]:
    config = one(docs, "MutatingWebhookConfiguration")
    return [w for w in config["webhooks"] if w["name"].startswith("default-")]


def test_managed_namespaces_are_off_by_default() -> None:
    docs = render()
    assert "QC_MANAGED_NAMESPACE_SELECTOR" not in env(docs)
    assert default_webhooks(docs) == []


def test_the_managed_selector_renders_into_the_setting_as_the_controller_reads_it() -> None:
    value = env(render(*MANAGED))["QC_MANAGED_NAMESPACE_SELECTOR"]["value"]
    assert value == (
        "queue-controller.io/managed=true,"
        "kubernetes.io/metadata.name notin (kube-system,queue-controller-system),!legacy"
    )
    selector = Settings(managed_namespace_selector=value).managed_namespaces
    assert selector is not None
    base = {"kubernetes.io/metadata.name": "team-a", "queue-controller.io/managed": "true"}
    assert selector.matches(base)
    assert not selector.matches({**base, "kubernetes.io/metadata.name": "kube-system"})
    assert not selector.matches({**base, "legacy": "yes"})
    assert not selector.matches({"kubernetes.io/metadata.name": "team-a"})


def test_the_managed_selector_renders_into_the_webhooks_for_unlabelled_objects() -> None:
    formula = 'id=f"default-{resource.plural}"'
    assert formula in (CONTROLLER / "controller" / "handlers.py").read_text(), (
        "handlers.py names its managed-namespace webhooks differently now: update "
        "templates/webhook.yaml and this test"
    )
    docs = render(*MANAGED)
    hooks = default_webhooks(docs)
    assert [w["clientConfig"]["service"]["path"] for w in hooks] == [
        f"/default-{kind.webhook.resource.plural}" for kind in workload_kinds.KINDS
    ]
    for hook, kind in zip(hooks, workload_kinds.KINDS, strict=True):
        resource = kind.webhook.resource
        assert hook["namespaceSelector"] == MANAGED_SELECTOR
        assert hook["objectSelector"] == {
            "matchExpressions": [
                {"key": QUEUE_LABEL, "operator": "DoesNotExist"},
                {"key": KUEUE_QUEUE_LABEL, "operator": "DoesNotExist"},
            ]
        }
        assert hook["rules"] == [
            {
                "apiGroups": [resource.group],
                "apiVersions": [resource.version],
                "resources": [resource.plural],
                "operations": ["CREATE"],
                "scope": "Namespaced",
            }
        ]
        assert hook["failurePolicy"] == "Fail"
        assert hook["clientConfig"]["service"]["name"] == "queue-controller-webhook"
    # The webhooks for labelled objects are unchanged.
    config = one(docs, "MutatingWebhookConfiguration")
    assert len(config["webhooks"]) == len(handler_ids()) + len(hooks)


def test_every_namespace_is_an_exists_selector_and_a_bad_operator_is_refused() -> None:
    everywhere = (
        "managedJobsNamespaceSelector.matchExpressions[0].key=kubernetes.io/metadata.name",
        "managedJobsNamespaceSelector.matchExpressions[0].operator=Exists",
    )
    docs = render(*everywhere)
    assert env(docs)["QC_MANAGED_NAMESPACE_SELECTOR"]["value"] == "kubernetes.io/metadata.name"
    assert len(default_webhooks(docs)) == len(workload_kinds.KINDS)
    error = render_error(
        "managedJobsNamespaceSelector.matchExpressions[0].key=team",
        "managedJobsNamespaceSelector.matchExpressions[0].operator=Gt",
    )
    assert "managedJobsNamespaceSelector.matchExpressions" in error
    assert '"Gt"' in error


def test_a_boolean_label_value_reaches_every_managed_selector_as_a_string() -> None:
    """``managed: true`` in a values file is a YAML bool; a LabelSelector's values are strings,
    so the API server would refuse the object that carried the bool."""
    docs = render("managedJobsNamespaceSelector.matchLabels.managed=true")
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "queue-controller-managed-namespaces")
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "managed": "true"
    }
    for hook in default_webhooks(docs):
        assert hook["namespaceSelector"]["matchLabels"] == {"managed": "true"}
