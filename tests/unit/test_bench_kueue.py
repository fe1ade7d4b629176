"""The Kueue side of `make bench-e2e` (tests/bench/e2e/kueue.py), without a cluster or Go:
how teams become ClusterQueues, the Configuration, the webhook entries, the build stamp."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.bench.e2e import kueue, kueueobjects
from tests.bench.e2e.teams import QUEUE_NAME, QueueSettings, TeamSpec

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
RESEARCH = TeamSpec(
    "research", "research", cohort="pool", nominal={GPU: 16, MIG: 4}, borrowing_limit={GPU: 8}
)
PROD = TeamSpec("prod", "prod", cohort="pool", nominal={GPU: 24})
SOLO = TeamSpec("solo", "solo", nominal={GPU: 8}, borrowing_limit={GPU: 4})


def _quotas(cq: dict[str, object]) -> dict[str, dict[str, str]]:
    spec = cq["spec"]
    assert isinstance(spec, dict)
    (group,) = spec["resourceGroups"]
    (flavor,) = group["flavors"]
    assert flavor["name"] == kueueobjects.FLAVOR
    assert group["coveredResources"] == [r["name"] for r in flavor["resources"]]
    return {r["name"]: {k: v for k, v in r.items() if k != "name"} for r in flavor["resources"]}


def test_one_flavor_carries_each_teams_whole_gpu_quota() -> None:
    covered = kueueobjects.covered_resources([RESEARCH, PROD])
    assert covered == [GPU, MIG]
    research = kueueobjects.cluster_queue(RESEARCH, covered)
    assert research["spec"]["cohortName"] == "pool"
    assert research["spec"]["namespaceSelector"] == {}
    assert _quotas(research) == {
        GPU: {"nominalQuota": "16", "borrowingLimit": "8"},
        MIG: {"nominalQuota": "4"},
    }


def test_a_resource_the_team_does_not_name_is_unlimited_and_never_lent() -> None:
    covered = kueueobjects.covered_resources([RESEARCH, PROD])
    quotas = _quotas(kueueobjects.cluster_queue(PROD, covered))
    assert quotas[GPU] == {"nominalQuota": "24"}
    assert quotas[MIG] == {"nominalQuota": str(kueueobjects.UNLIMITED_DEFAULT), "lendingLimit": "0"}


def test_no_cohort_no_borrowing_limit() -> None:
    cq = kueueobjects.cluster_queue(SOLO, [GPU])
    assert "cohortName" not in cq["spec"]
    assert _quotas(cq) == {GPU: {"nominalQuota": "8"}}


def test_requested_resources_no_team_names_are_excluded() -> None:
    assert kueueobjects.excluded_prefixes([RESEARCH, PROD]) == [
        "cpu",
        "memory",
        "ephemeral-storage",
        "hugepages-",
    ]
    with_cpu = TeamSpec("c", "c", nominal={"cpu": 100, GPU: 8})
    assert kueueobjects.excluded_prefixes([with_cpu], ["nvidia.com/mig-3g.40gb", GPU]) == [
        "memory",
        "ephemeral-storage",
        "hugepages-",
        "nvidia.com/mig-3g.40gb",
    ]


def test_queue_objects_make_namespaces_flavor_and_a_local_queue_per_team() -> None:
    objects = kueueobjects.queue_objects([RESEARCH, SOLO])
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds == [
        ("Namespace", "kueue-system"),
        ("Namespace", "research"),
        ("Namespace", "solo"),
        ("ResourceFlavor", kueueobjects.FLAVOR),
        ("ClusterQueue", "research"),
        ("LocalQueue", QUEUE_NAME),
        ("ClusterQueue", "solo"),
        ("LocalQueue", QUEUE_NAME),
    ]
    flavor = objects[3]
    assert "spec" not in flavor  # no nodeLabels, no tolerations
    assert objects[5]["metadata"]["namespace"] == "research"
    assert objects[5]["spec"] == {"clusterQueue": "research"}


def test_configuration_takes_the_shared_waiting_rules() -> None:
    settings = QueueSettings(
        pods_ready_timeout_seconds=45, backoff_base_seconds=7, backoff_max_seconds=70
    )
    ports = {"webhook": 1, "health": 2, "metrics": 3}
    config = kueueobjects.configuration(
        settings, ports=ports, cert_dir=Path("/c"), excluded=["cpu"], qps=-1, burst=10
    )
    assert config["waitForPodsReady"] == {
        "timeout": "45s",
        "blockAdmission": False,
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffBaseSeconds": 7,
            "backoffMaxSeconds": 70,
        },
    }
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": "/c"}
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert config["metrics"]["bindAddress"] == "127.0.0.1:3"
    assert config["resources"] == {"excludeResourcePrefixes": ["cpu"]}
    assert config["featureGates"]["VisibilityOnDemand"] is False


def _hook(name: str, path: str) -> dict[str, object]:
    return {
        "name": name,
        "clientConfig": {"service": {"name": "webhook-service", "path": path}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
    }


def test_webhooks_call_loopback_and_leave_out_pods() -> None:
    manifests: list[dict[str, Any]] = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [_hook("mjob.kb.io", "/mutate-batch-v1-job"), _hook("mpod.kb.io", "/p")],
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}},
    ]
    (made,) = kueueobjects.webhook_configurations(manifests, port=9443, ca_bundle=b"CA")
    assert made["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    (hook,) = made["webhooks"]
    assert hook["name"] == "mjob.kb.io"
    assert hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-batch-v1-job",
        "caBundle": "Q0E=",
    }


def test_build_is_skipped_when_the_stamp_names_the_pin(tmp_path: Path) -> None:
    binary = tmp_path / "kueue"
    binary.write_text("")
    (tmp_path / ".kueue-pin").write_text(f"sigs.k8s.io/kueue/cmd/kueue@{kueue.KUEUE_VERSION}\n")
    assert kueue.build(tmp_path, report=lambda _: None) == binary.resolve()
