"""GPU-equivalents: one currency for whole GPUs, MIG slices and time-sliced replicas.

A simulated cluster mixes ``nvidia.com/gpu`` on an H100, ``nvidia.com/mig-3g.40gb``
on an A100 and ``nvidia.com/gpu`` advertised four times over on a time-sliced
L4.  Allocation and waste are only comparable in one unit, so each resource
unit is worth a fraction of a physical GPU:

- a whole GPU is 1;
- a MIG instance is its compute slices over 7 (``3g.40gb`` is 3/7): an A100
  or H100 has 7 compute slices;
- a time-sliced replica is 1 over the node's ``nvidia.com/gpu.replicas`` label
  (GPU Feature Discovery sets it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from queue_controller.core import Node
from queue_controller.core.model import GPU, MIG_PREFIX, ONE

REPLICAS_LABEL = "nvidia.com/gpu.replicas"
PRODUCT_LABEL = "nvidia.com/gpu.product"
_MIG_COMPUTE = re.compile(r"^(\d)g\.")
MIG_COMPUTE_SLICES = 7


def unit_value(node: Node, resource: str) -> float:
    """GPU-equivalents of one unit of ``resource`` on ``node`` (0 for CPU, memory, ...)."""
    if resource == GPU:
        try:
            replicas = int(node.labels.get(REPLICAS_LABEL, "1"))
        except ValueError:
            replicas = 1
        return 1.0 / max(replicas, 1)
    if resource.startswith(MIG_PREFIX):
        match = _MIG_COMPUTE.match(resource.removeprefix(MIG_PREFIX))
        return int(match[1]) / MIG_COMPUTE_SLICES if match else 0.0
    return 0.0


def gpu_resources(amounts: Mapping[str, int]) -> list[str]:
    return sorted(r for r, a in amounts.items() if a > 0 and (r == GPU or r.startswith(MIG_PREFIX)))


def value_of(node: Node, amounts: Mapping[str, int]) -> float:
    """GPU-equivalents of a request (or allocatable) in milli-units, on ``node``."""
    return sum(unit_value(node, r) * amounts[r] / ONE for r in gpu_resources(amounts))


def capacity(node: Node) -> float:
    return value_of(node, node.allocatable)
