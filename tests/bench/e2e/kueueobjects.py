"""The Kueue objects that give Kueue the same teams and waiting rules as queue-controller:
ClusterQueues, LocalQueues, its Configuration and its webhook registrations (kueue.py runs
Kueue with them).

How teams map to Kueue objects, and why
---------------------------------------
* Quota: ONE ResourceFlavor (``default-flavor``, no nodeLabels, no tolerations) and, per team,
  one ClusterQueue with one resource group that covers every resource any team names, each
  with the team's nominal and borrowing limit.  Our TeamQuota has one number per resource
  (``nvidia.com/gpu``: 16, whatever the product).  Kueue counts quota per (flavor, resource):
  a flavor per GPU product with the full nominal on each would multiply the quota by the
  number of products; splitting the nominal across them would stop a team from putting all of
  it on one product.  Kueue has no "sum over flavors" limit, so one flavor is the only mapping
  whose quota equals ours.  The product is then chosen as under queue-controller: by the Job's
  own nodeSelector / affinity, enforced by kube-scheduler.  (Kueue would inject a product
  flavor's nodeLabels and tolerations into the pods; with one bare flavor it injects nothing,
  so both systems place pods from the same pod template.)  ``gpu_products`` is therefore not
  needed for quota; it is checked to be label values and kept in the install record.
* Resources nobody names: a TeamQuota does not limit a resource it does not name, but Kueue
  leaves a Workload inadmissible if any resource it requests is not covered by the ClusterQueue
  ("resource cpu unavailable in ClusterQueue", K:pkg/scheduler/flavorassigner/
  flavorassigner.go).  So ``cpu``, ``memory``, ``ephemeral-storage`` and ``hugepages-*``, when no
  team names them, plus ``extra_resources`` (install's keyword: other resources the trace's Jobs
  request and no team names), go into the Configuration's ``resources.excludeResourcePrefixes``,
  which removes them from Kueue's accounting entirely.  A resource some teams name and others do
  not is covered in the others' ClusterQueues with an effectively unlimited nominal and, in a
  cohort, ``lendingLimit: 0`` (so it is never lent to the cohort).
* Borrowing: ``cohortName`` = team.cohort, ``borrowingLimit`` only where TeamSpec has one (absent
  = unlimited in both systems; Kueue rejects a borrowingLimit without a cohort).  lendingLimit
  absent = all nominal may be lent, as in TeamQuota.  Queueing strategy BestEffortFIFO and no
  preemption are both systems' defaults and left implicit.
* Waiting rules: ``waitForPodsReady`` {timeout, requeuingStrategy {timestamp: Eviction,
  backoffBaseSeconds, backoffMaxSeconds}}, no backoffLimitCount (unlimited requeues, as our
  Queue's default), blockAdmission false (true would serialise admission across every
  ClusterQueue).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.bench.e2e.teams import QUEUE_NAME, QueueSettings, TeamSpec

NAMESPACE = "kueue-system"

API_VERSION = "kueue.x-k8s.io/v1beta2"

FLAVOR = "default-flavor"

# The entries of K:config/components/webhook/manifests.yaml we register: Jobs and Kueue's own
# kinds; not pods, deployments or statefulsets (they would sit in every kwok pod's path).
WEBHOOKS = frozenset(
    {
        "mjob.kb.io",
        "vjob.kb.io",
        "mclusterqueue.kb.io",
        "vclusterqueue.kb.io",
        "mresourceflavor.kb.io",
        "vresourceflavor.kb.io",
        "mworkload.kb.io",
        "vworkload.kb.io",
        "vcohort.kb.io",
    }
)

WEBHOOK_PREFIX = "kueue-"  # as upstream's kustomize namePrefix

# Requested by pods but named by no team: left out of Kueue's accounting (see the docstring).
UNNAMED_PREFIXES = ("cpu", "memory", "ephemeral-storage", "hugepages-")

# "No limit" for a resource a team does not name while others do: cpu is kept in millicores
# by Kueue, so 10**9 cores (10**12 m); everything else 2**50 (a PiB of memory).
UNLIMITED = {"cpu": 10**9}

UNLIMITED_DEFAULT = 2**50


def covered_resources(teams: Sequence[TeamSpec]) -> list[str]:
    """Every resource some team names, sorted: what each ClusterQueue covers."""
    return sorted({r for team in teams for r in (*team.nominal, *team.borrowing_limit)})


def excluded_prefixes(teams: Sequence[TeamSpec], extra: Sequence[str] = ()) -> list[str]:
    """``resources.excludeResourcePrefixes``: requested resources that no team names."""
    named = covered_resources(teams)
    out = [p for p in UNNAMED_PREFIXES if not any(r.startswith(p) for r in named)]
    return out + sorted({r for r in extra if r not in named and r not in out})


def cluster_queue(team: TeamSpec, covered: Sequence[str]) -> dict[str, Any]:
    """The team's ClusterQueue: one resource group, one flavor, its quota per resource."""
    quotas = []
    for resource in covered:
        entry: dict[str, Any] = {"name": resource}
        if resource in team.nominal:
            entry["nominalQuota"] = str(team.nominal[resource])
            if team.cohort and resource in team.borrowing_limit:
                entry["borrowingLimit"] = str(team.borrowing_limit[resource])
        else:
            # Not named by this team: not limited for it, as under a TeamQuota.
            entry["nominalQuota"] = str(UNLIMITED.get(resource, UNLIMITED_DEFAULT))
            if team.cohort:
                entry["lendingLimit"] = "0"
        quotas.append(entry)
    spec: dict[str, Any] = {"namespaceSelector": {}}
    if covered:
        spec["resourceGroups"] = [
            {"coveredResources": list(covered), "flavors": [{"name": FLAVOR, "resources": quotas}]}
        ]
    if team.cohort:
        spec["cohortName"] = team.cohort
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": team.name},
        "spec": spec,
    }


def queue_objects(teams: Sequence[TeamSpec]) -> list[dict[str, Any]]:
    """Namespaces, the flavor, a ClusterQueue per team and its LocalQueue QUEUE_NAME."""
    covered = covered_resources(teams)
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        for ns in sorted({NAMESPACE, *(t.namespace for t in teams)})
    ]
    out.append({"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
    for team in teams:
        out.append(cluster_queue(team, covered))
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "LocalQueue",
                "metadata": {"name": QUEUE_NAME, "namespace": team.namespace},
                "spec": {"clusterQueue": team.name},
            }
        )
    return out


def configuration(
    settings: QueueSettings,
    *,
    ports: Mapping[str, int],
    cert_dir: Path,
    excluded: Sequence[str],
    qps: float,
    burst: int,
) -> dict[str, Any]:
    """Kueue's v1beta2 Configuration for running out of cluster on loopback."""
    config: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports['health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports['metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": ports["webhook"], "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": qps, "burst": burst},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        "waitForPodsReady": {
            "timeout": f"{settings.pods_ready_timeout_seconds}s",
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": settings.backoff_base_seconds,
                "backoffMaxSeconds": settings.backoff_max_seconds,
            },
        },
        "featureGates": {
            "VisibilityOnDemand": False,
            "MultiKueue": False,
            "TopologyAwareScheduling": False,
        },
    }
    if excluded:
        config["resources"] = {"excludeResourcePrefixes": list(excluded)}
    return config


def webhook_configurations(
    manifests: Sequence[Mapping[str, Any]], *, port: int, ca_bundle: bytes
) -> list[dict[str, Any]]:
    """The WEBHOOKS entries of upstream's manifests.yaml, calling https://127.0.0.1:<port>."""
    out = []
    for doc in manifests:
        if not doc or doc.get("kind") not in (
            "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration",
        ):
            continue
        hooks = []
        for hook in doc.get("webhooks", []):
            if hook["name"] not in WEBHOOKS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hooks.append(
                {
                    **hook,
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}{path}",
                        "caBundle": base64.b64encode(ca_bundle).decode(),
                    },
                }
            )
        name = WEBHOOK_PREFIX + doc["metadata"]["name"]
        out.append(
            {
                "apiVersion": doc["apiVersion"],
                "kind": doc["kind"],
                "metadata": {"name": name},
                "webhooks": hooks,
            }
        )
    return out
