"""What topology-aware placement adds to an admission cycle, at scale.

    python -m tests.bench.bench_topology           # 5,000 nodes, 10,000 pending gangs
    python -m tests.bench.bench_topology --quick   # 1,000 nodes, 2,000 gangs

A cluster of 8-GPU nodes in three levels (blocks of 10 racks of 20 nodes, and the
node), about 40% of its GPUs already in use by one-pod gangs spread at random.
Pending: twice as many gangs as nodes, of 1 to 32 members of 1, 2, 4 or 8 GPUs; half of
them ask for a topology (a third each: a required rack, a preferred rack, slices of 4
members in one rack, and, for the widest, a required block).  The same cycle is timed
with those requests and with them removed (the nodes keep their labels), in CPU
seconds, best of ``--repeat`` rounds, the two run in turns (one of each per round) so that
a noisy spell of a shared machine falls on both alike.  Targets: at most 1.5x, and 5,000
decisions a second.
"""

from __future__ import annotations

import argparse
import random
from dataclasses import replace

from rich.console import Console
from rich.table import Table

from queue_controller.core import Verdict, Workload, schedule
from queue_controller.core.model.objects import (
    PodSet,
    Queue,
    Snapshot,
    Topology,
    TopologyMode,
    TopologyRequest,
)
from tests.bench.timing import best_cpu_seconds_each
from tests.builders import gpu_node, gpus, quota, running_pod, template

BLOCK = "topology.queue-controller.io/block"
RACK = "topology.queue-controller.io/rack"
HOST = "kubernetes.io/hostname"
NODES_PER_RACK, RACKS_PER_BLOCK = 20, 10


def cluster(nodes: int, seed: int = 7) -> Snapshot:
    rng = random.Random(seed)
    node_list, pods = [], []
    for i in range(nodes):
        rack = i // NODES_PER_RACK
        block = rack // RACKS_PER_BLOCK
        node = gpu_node(f"n{i:05d}", 8, labels={BLOCK: f"b{block:03d}", RACK: f"r{rack:04d}"})
        node_list.append(node)
        used = rng.choice([0, 0, 0, 2, 4, 4, 6, 8])  # about 40% of the GPUs
        if used:
            pods.append(running_pod(node.name, used, name=f"busy-{i}"))
    asks = [
        TopologyRequest(TopologyMode.REQUIRED, RACK),
        TopologyRequest(TopologyMode.PREFERRED, RACK),
        TopologyRequest(TopologyMode.UNCONSTRAINED, slice_size=4, slice_level=RACK),
    ]
    pending = []
    for i in range(2 * nodes):
        members = rng.choice([1, 1, 2, 4, 4, 8, 8, 16, 32])
        per_member = rng.choice([1, 2, 4, 8])
        ask = None
        if i % 2:
            ask = asks[i % 3]
            if ask.slice_size and members % 4:
                members = 4 * max(1, members // 4)
            if members * per_member > NODES_PER_RACK * 8:
                ask = TopologyRequest(TopologyMode.REQUIRED, BLOCK)
        pod_set = PodSet("main", template(per_member), members, members, topology=ask)
        pending.append(Workload("ns", f"g{i:05d}", "q", (pod_set,), "Job", created=float(i)))
    return Snapshot(
        nodes=tuple(node_list),
        pods=tuple(pods),
        workloads=tuple(pending),
        queues=(Queue("ns", "q", "team", topology_name="t"),),
        quotas=(quota(gpu=gpus(10 * nodes * 8)),),
        topologies=(Topology("t", (BLOCK, RACK, HOST)),),
    )


def without_topology(snapshot: Snapshot) -> Snapshot:
    workloads = tuple(
        replace(w, pod_sets=tuple(replace(p, topology=None) for p in w.pod_sets))
        for w in snapshot.workloads
    )
    return replace(snapshot, workloads=workloads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 nodes only")
    parser.add_argument("--repeat", type=int, default=5, help="best of this many rounds")
    args = parser.parse_args()
    table = Table(title="an admission cycle with topology requests, against without (CPU s)")
    columns = ("nodes", "pending", "without", "with", "ratio", "decisions/s", "admitted")
    for column in columns:
        table.add_column(column, justify="right")
    for nodes in [1_000] if args.quick else [1_000, 5_000]:
        with_topology = cluster(nodes)
        plain = without_topology(with_topology)
        timed = best_cpu_seconds_each(
            {
                "without": lambda plain=plain: schedule(plain),
                "with": lambda snap=with_topology: schedule(snap),
            },
            args.repeat,
        )
        plain_s, topo_s, result = timed["without"][0], timed["with"][0], timed["with"][1]
        admitted = sum(1 for d in result.decisions if d.verdict is Verdict.ADMIT)
        table.add_row(
            f"{nodes:,}",
            f"{len(with_topology.workloads):,}",
            f"{plain_s:.2f}",
            f"{topo_s:.2f}",
            f"{topo_s / plain_s:.2f}x",
            f"{len(result.decisions) / topo_s:,.0f}",
            f"{admitted:,}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
