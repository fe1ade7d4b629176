"""The API resources the controller reads and writes, as plain descriptors.

A descriptor says where a kind lives in the API (its group/version, plural,
and whether it is namespaced); the gateway turns it into request paths, kopf
into watches, the workload kinds into writes and the RBAC tests into rules.
It lives apart from the gateway so that modules which only *name* a resource
need not import the Kubernetes client.
"""

from __future__ import annotations

from dataclasses import dataclass

from queue_controller.api import v1alpha1
from queue_controller.core.rules import HOSTNAME_LABEL

__all__ = [
    "ADMISSION_GATE",
    "COHORT",
    "CORE",
    "DEVICE_CLASS",
    "EVENT",
    "FIELD_MANAGER",
    "HOSTNAME_LABEL",
    "JOB",
    "NAMESPACE",
    "NODE",
    "POD",
    "POD_GROUP",
    "PRIORITY_CLASS",
    "QUEUE",
    "RESOURCE_CLAIM",
    "RESOURCE_CLAIM_TEMPLATE",
    "RESOURCE_SLICE",
    "TEAM_QUOTA",
    "TOPOLOGY",
    "Resource",
]


# The field manager of every write the controller makes (the API server records it in each
# object's metadata.managedFields). A held gang's PodGroup phase counts as an admission only
# when this manager wrote it (kube/gangs.py).
FIELD_MANAGER = "queue-controller"


@dataclass(frozen=True, slots=True)
class Resource:
    api_version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        """The API group ("" for the core group), as RBAC rules and webhooks name it."""
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str = "", name: str = "", subresource: str = "") -> str:
        prefix = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        parts = [prefix]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


NODE = Resource("v1", "Node", "nodes", False)
POD = Resource("v1", "Pod", "pods", True)
EVENT = Resource("v1", "Event", "events", True)
# Not watched: only `chaos` keeps a deleted Node in one, to create it again from.
CONFIG_MAP = Resource("v1", "ConfigMap", "configmaps", True)
JOB = Resource("batch/v1", "Job", "jobs", True)
# Read only with managed namespaces on: their labels decide where queueing is enforced.
NAMESPACE = Resource("v1", "Namespace", "namespaces", False)
PRIORITY_CLASS = Resource("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False)
TEAM_QUOTA = Resource(v1alpha1.API_VERSION, "TeamQuota", "teamquotas", False)
COHORT = Resource(v1alpha1.API_VERSION, "Cohort", "cohorts", False)
TOPOLOGY = Resource(v1alpha1.API_VERSION, "Topology", "topologies", False)
QUEUE = Resource(v1alpha1.API_VERSION, "Queue", "queues", True)
POD_GROUP = Resource(v1alpha1.API_VERSION, "PodGroup", "podgroups", True)
# Dynamic Resource Allocation (resource.k8s.io/v1): the devices nodes publish, the
# classes and claims that pick them.  Read only (kube/dra.py translates them).
DEVICE_CLASS = Resource("resource.k8s.io/v1", "DeviceClass", "deviceclasses", False)
RESOURCE_SLICE = Resource("resource.k8s.io/v1", "ResourceSlice", "resourceslices", False)
RESOURCE_CLAIM = Resource("resource.k8s.io/v1", "ResourceClaim", "resourceclaims", True)
RESOURCE_CLAIM_TEMPLATE = Resource(
    "resource.k8s.io/v1", "ResourceClaimTemplate", "resourceclaimtemplates", True
)

# What every cycle reads, whatever workload kinds are registered (they add their own).
CORE = (
    NODE,
    POD,
    PRIORITY_CLASS,
    TEAM_QUOTA,
    COHORT,
    TOPOLOGY,
    QUEUE,
    POD_GROUP,
    DEVICE_CLASS,
    RESOURCE_SLICE,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
)

# Labels and names that several modules spell: one home for each (the hostname
# label's is the core's, which matches nodes on it).
# The scheduling gate that holds a gang's member pods until their node is chosen.
ADMISSION_GATE = "queue-controller.io/admission"
