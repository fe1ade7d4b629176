"""Which admitted gangs sit on GPUs that turned unhealthy.

A member is hit when it holds GPUs on a node that reports unhealthy GPUs and:

* the report names it among the pods on that GPU (DCGM's pod mapping); or
* it existed before the GPU turned unhealthy.  Without a per-device map the
  controller cannot tell which of a node's GPUs a pod holds, so every older
  GPU pod there counts.  A named list never spares a pod: behind a Prometheus
  that attaches target labels it may name the exporter's own pod instead.

A member created after the fault was placed by an admission that already
counted the GPU out, so it is left alone; otherwise every gang admitted
beside a dead GPU would be evicted again and again.

Whether the gang is then evicted or only marked is the Queue's choice
(``spec.gpuHealth.onUnhealthy``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from queue_controller.core.gpuhealth import is_gpu_resource
from queue_controller.core.model import GpuHealth, UnhealthyGpu
from queue_controller.errors import InputError
from queue_controller.kube import nodehealth, objects
from queue_controller.kube.fields import timestamp

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Hit:
    pod: str  # namespace/name
    node: str
    gpu: UnhealthyGpu | None  # None: the whole node is reported unhealthy

    def describe(self) -> str:
        if self.gpu is None:
            return f"member {self.pod} is on node {self.node}, whose GPUs are all unhealthy"
        gpu = self.gpu
        what = f"XID {', '.join(map(str, gpu.xids))}" if gpu.xids else gpu.reason
        uuid = f" ({gpu.uuid})" if gpu.uuid else ""
        return f"member {self.pod} is on node {self.node}, whose GPU {gpu.index}{uuid} has {what}"


def node_health(nodes: Iterable[Obj]) -> dict[str, tuple[GpuHealth, float]]:
    """Node name -> (its GPU health, when its GPUHealthy condition turned False)."""
    out: dict[str, tuple[GpuHealth, float]] = {}
    for node in nodes:
        name = nodehealth.node_name(node)
        try:
            health = nodehealth.gpu_health(node)
        except InputError:
            continue  # an unreadable report is left out of the snapshot too
        if health is None:
            continue
        state = nodehealth.condition(node) or {}
        out[name] = (health, timestamp(state, "lastTransitionTime") or 0.0)
    return out


def _uses_gpus(pod: Obj) -> bool:
    try:
        spec = objects.pod_template(pod.get("spec") or {})
        return any(is_gpu_resource(name) for c in spec.containers for name in c.limits) or any(
            is_gpu_resource(name) for c in spec.containers for name in c.requests
        )
    except InputError:
        return False


def hits(pods: Iterable[Obj], health: Mapping[str, tuple[GpuHealth, float]]) -> list[Hit]:
    """The live, bound members of one gang that sit on an unhealthy GPU."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node not in health or not _uses_gpus(pod):
            continue
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        created = timestamp(pod, "metadata.creationTimestamp") or 0.0
        report, turned = health[node]
        if report.whole_node:
            if created <= turned:
                out.append(Hit(key, node, None))
            continue
        for gpu in report.unhealthy:
            if key in gpu.pods or created <= gpu.since:
                out.append(Hit(key, node, gpu))
                break
    return out
