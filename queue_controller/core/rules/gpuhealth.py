"""What unhealthy GPUs take away from a node's capacity.

A health reporter (the node agent over NVML, or the controller reading DCGM)
names the unhealthy physical GPUs of a node.  Admission then counts only the
rest: ``plan`` and the controller both get here through
:func:`queue_controller.core.rules.nodes.usable_allocatable`, so they agree.

Each unhealthy GPU removes its own share of every GPU resource the node
advertises:

* a whole GPU removes one ``nvidia.com/gpu``;
* a time-sliced GPU removes its replicas (the node's total over its GPUs);
* a MIG-enabled GPU removes the instances carved from it: those the reporter
  listed, or else its share of a uniform layout (mig-parted applies one
  layout to every GPU of a node);
* with every GPU unhealthy the node offers nothing (an exclusion, so the
  explanation says why).

The device plugin may already have lowered allocatable for a GPU it found
unhealthy itself, so the loss is taken from capacity and the result is never
above allocatable: a GPU is never subtracted twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queue_controller.core.model.objects import GpuHealth, Node
from queue_controller.core.model.resources import GPU, MIG_PREFIX, ONE, Resources, is_mig

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
SHARED_GPU = "nvidia.com/gpu.shared"


def is_gpu_resource(name: str) -> bool:
    return name in (GPU, SHARED_GPU) or is_mig(name)


def gpu_count(node: Node) -> int | None:
    """Physical GPUs on the node: from the health report, else GPU Feature Discovery's label."""
    health = node.gpu_health
    if health is not None and health.gpu_count:
        return health.gpu_count
    label = node.labels.get(GPU_COUNT_LABEL, "")
    return int(label) if label.isdigit() and int(label) > 0 else None


def unhealthy_indices(health: GpuHealth | None) -> frozenset[int]:
    return frozenset() if health is None else frozenset(g.index for g in health.unhealthy)


def all_gpus_unhealthy(node: Node) -> bool:
    health = node.gpu_health
    if health is None:
        return False
    if health.whole_node:
        return True
    count = gpu_count(node)
    return count is not None and len(unhealthy_indices(health)) >= count


def _mig_resource(node: Node, profile: str) -> str:
    if node.labels.get(MIG_STRATEGY_LABEL) == "single":
        return GPU  # the single strategy advertises MIG instances as nvidia.com/gpu
    return MIG_PREFIX + profile.replace("+", ".")


def lost_capacity(node: Node) -> dict[str, int]:
    """Milli-units of each GPU resource that the unhealthy GPUs account for."""
    health = node.gpu_health
    if health is None or not health.unhealthy:
        return {}
    totals = {name: amount for name, amount in _capacity(node).items() if is_gpu_resource(name)}
    count = gpu_count(node)
    lost: dict[str, int] = {}
    seen: set[int] = set()
    for gpu in health.unhealthy:
        if gpu.index in seen:
            continue
        seen.add(gpu.index)
        if gpu.mig_devices:
            for profile, instances in gpu.mig_devices.items():
                name = _mig_resource(node, profile)
                lost[name] = lost.get(name, 0) + instances * ONE
            continue
        for name, total in totals.items():
            lost[name] = lost.get(name, 0) + _share(name, total, count)
    return lost


def _share(name: str, total: int, count: int | None) -> int:
    """One GPU's part of ``total``: whole devices only, never a fraction."""
    if count is None:
        return ONE if name == GPU else 0  # unknown layout: one GPU is one device
    return (total // ONE) // count * ONE


def _capacity(node: Node) -> Resources:
    return node.capacity or node.allocatable


def healthy_allocatable(node: Node, allocatable: Resources) -> Resources:
    """``allocatable`` less what unhealthy GPUs account for (never below zero)."""
    if node.gpu_health is None:
        return allocatable
    if all_gpus_unhealthy(node):
        return {name: 0 if is_gpu_resource(name) else n for name, n in allocatable.items()}
    lost = lost_capacity(node)
    if not lost:
        return allocatable
    capacity = _capacity(node)
    out = dict(allocatable)
    for name, amount in lost.items():
        if name in out:
            out[name] = max(0, min(out[name], capacity.get(name, out[name]) - amount))
    return out


def unhealthy_note(nodes: Iterable[Node], request: Mapping[str, int]) -> str:
    """Words for the GPUs that unhealthy reports kept from the nodes a gang could use.

    ``nodes`` are those the gang's selector and affinity allow; a node with every
    GPU out is already named by its exclusion, so only partly unhealthy ones count.
    """
    wanted = {name for name, amount in request.items() if amount and is_gpu_resource(name)}
    gpus, names = 0, []
    for node in nodes:
        if node.gpu_health is None or all_gpus_unhealthy(node):
            continue
        if wanted & {name for name, amount in lost_capacity(node).items() if amount}:
            gpus += len(unhealthy_indices(node.gpu_health))
            names.append(node.name)
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    plural = "s" if gpus != 1 else ""
    return f"{gpus} unhealthy GPU{plural} not offered (on {shown})"
