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

from queue_controller.core.model import GpuHealth, UnhealthyGpu
from queue_controller.kube.views import MemberPod


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


def hits(pods: Iterable[MemberPod], health: Mapping[str, tuple[GpuHealth, float]]) -> list[Hit]:
    """The live, bound members of one gang that sit on an unhealthy GPU."""
    out = []
    for pod in pods:
        node = pod.node_name
        if not node or node not in health or not pod.uses_gpus:
            continue
        report, turned = health[node]
        if report.whole_node:
            if pod.created <= turned:
                out.append(Hit(pod.key, node, None))
            continue
        for gpu in report.unhealthy:
            if pod.key in gpu.pods or pod.created <= gpu.since:
                out.append(Hit(pod.key, node, gpu))
                break
    return out
