"""The cluster every system gets: how many kwok nodes of each GPU pool, and what they hold.

``--nodes N`` keeps the mix of `make cluster-up SIZE="h100=800 a100-mig=150 l4=50 gb200=0"`
(the 1,000-node benchmark cluster of docs/benchmarks.md) at any size.  gb200 stays empty:
its nodes are tainted for the topology examples, and a toleration in every Job would only add
noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from queue_controller import nodepools
from queue_controller.nodepools import NodePools, mig_slices

ROOT = Path(__file__).resolve().parents[3]
NODES_FILE = ROOT / "deploy" / "local-cluster" / "nodes.yaml"
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"

# Each pool's share of the nodes; h100 takes what rounding leaves.
_SHARES = {"a100-mig": 0.15, "l4": 0.05}
_EMPTY = ("gb200",)


def pool_sizes(nodes: int) -> dict[str, int]:
    """Node count per pool for ``nodes`` nodes in all (at least one node)."""
    if nodes < 1:
        raise ValueError("--nodes must be at least 1")
    sizes = {pool: round(nodes * share) for pool, share in _SHARES.items()}
    if nodes >= 3:  # every pool present, so MIG and time-sliced GPUs are both exercised
        sizes = {pool: max(1, count) for pool, count in sizes.items()}
    sizes["h100"] = nodes - sum(sizes.values())
    return {**sizes, **dict.fromkeys(_EMPTY, 0)}


@dataclass(frozen=True)
class ClusterShape:
    """The node pools of one run and what they add up to."""

    pools: NodePools
    capacity: Mapping[str, int]  # resource -> whole units on all nodes
    weights: Mapping[str, float]  # resource -> GPUs one unit is worth (a MIG slice: compute/7)
    products: tuple[str, ...]  # GPU products present (Kueue makes a ResourceFlavor of each)

    @property
    def nodes(self) -> int:
        return self.pools.node_count()

    @property
    def sizes(self) -> dict[str, int]:
        return {pool.name: pool.count for pool in self.pools.pools}

    @property
    def total_gpus(self) -> float:
        """Every GPU resource in GPUs (a MIG slice counts as its share of a GPU)."""
        return sum(self.capacity[r] * self.weights[r] for r in self.capacity)

    def gpus(self, resource: str, units: float) -> float:
        return units * self.weights.get(resource, 1.0)


def shape(nodes: int, node_file: Path = NODES_FILE) -> ClusterShape:
    pools = nodepools.load(node_file).resized(pool_sizes(nodes))
    capacity: dict[str, int] = {}
    weights: dict[str, float] = {}
    products: list[str] = []
    for pool in pools.pools:
        if pool.gpu is None or pool.count == 0:
            continue
        products.append(pool.gpu.product)
        for resource, per_node in pool.gpu.resources().items():
            capacity[resource] = capacity.get(resource, 0) + per_node * pool.count
            if resource.startswith(MIG_PREFIX):
                profile = resource.removeprefix(MIG_PREFIX)
                compute, _ = mig_slices(profile, pool.gpu.memoryMiB)
                weights[resource] = compute / 7
            else:
                weights[resource] = 1.0
    return ClusterShape(pools, capacity, weights, tuple(products))
