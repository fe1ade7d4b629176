"""What asking for GPUs through DRA claims costs an admission cycle, at scale.

    python -m tests.bench.bench_dra           # 1,000 nodes x 8 DRA GPUs, 10,000 pending gangs
    python -m tests.bench.bench_dra --quick   # 250 nodes, 2,500 gangs

Nodes of 8 GPUs, half H100 80GB and half A100 40GB, each GPU published as a DRA
device with its own uuid and index (as NVIDIA's driver does), about 40% of them
held by allocated ResourceClaims of running pods.  Pending: ten gangs per node, of
1 to 8 members claiming 1 to 8 GPUs through ResourceClaimTemplates whose selectors
name the product, ask for memory (``capacity.memory.compareTo(quantity(...))``),
or take any GPU.  The same cluster and gangs asked for through ``nvidia.com/gpu``
(product by node selector) is the baseline.  CPU seconds for one cycle, best of
``--repeat``.  Target: at most 2x the baseline.
"""

from __future__ import annotations

import argparse
import random
from functools import partial

from rich.console import Console
from rich.table import Table

from queue_controller.core import Verdict, schedule
from queue_controller.core.model.dra import (
    AllocatedDevice,
    ClaimTemplate,
    Device,
    DeviceClass,
    DeviceRequest,
    ResourceClaim,
    ResourceSlice,
)
from queue_controller.core.model.objects import (
    BoundPod,
    Container,
    Node,
    PodClaim,
    PodTemplate,
    Queue,
    ResourceQuota,
    Snapshot,
    TeamQuota,
    Workload,
    one_pod_set,
)
from tests.bench.timing import best_cpu_seconds

NV = "gpu.nvidia.com"
PRODUCT = "nvidia.com/gpu.product"
PRODUCTS = {"NVIDIA-H100-80GB-HBM3": "80Gi", "NVIDIA-A100-SXM4-40GB": "40Gi"}
GPU_CLASS = DeviceClass(
    NV,
    (f'device.driver == "{NV}" && device.attributes["{NV}"].type == "gpu"',),
    quota_resource="nvidia.com/gpu",
)
_BASE = {"cpu": 128_000, "memory": 1024 * 2**30 * 1000, "pods": 110_000}


def _devices(node: str, product: str) -> tuple[Device, ...]:
    return tuple(
        Device.from_slice(
            NV,
            f"gpu-{i}",
            {
                "type": {"string": "gpu"},
                "productName": {"string": product.replace("-", " ")},
                "uuid": {"string": f"GPU-{node}-{i}"},
                "index": {"int": i},
            },
            {"memory": {"value": PRODUCTS[product]}},
        )
        for i in range(8)
    )


def _selectors(kind: int, product: str) -> tuple[str, ...]:
    if kind == 0:
        name = product.replace("-", " ")
        return (f'device.attributes["{NV}"].productName == "{name}"',)
    if kind == 1:
        return (f'device.capacity["{NV}"].memory.compareTo(quantity("{PRODUCTS[product]}")) >= 0',)
    return ()


def clusters(nodes: int, seed: int = 7) -> tuple[Snapshot, Snapshot]:
    """The same cluster and gangs: (through DRA claims, through nvidia.com/gpu)."""
    rng = random.Random(seed)
    products = sorted(PRODUCTS)
    dra_nodes, plugin_nodes, slices, claims, pods, plugin_pods = [], [], [], [], [], []
    for i in range(nodes):
        name, product = f"n{i:05d}", products[i % 2]
        labels = {PRODUCT: product}
        dra_nodes.append(Node(name, _BASE, labels, conditions={"Ready": "True"}))
        plugin_nodes.append(
            Node(name, {**_BASE, "nvidia.com/gpu": 8_000}, labels, conditions={"Ready": "True"})
        )
        slices.append(ResourceSlice(f"{name}-gpus", NV, name, name, _devices(name, product)))
        used = rng.choice([0, 0, 0, 2, 4, 4, 6, 8])
        if used:
            pod = f"busy-{i}"
            claims.append(
                ResourceClaim(
                    "ns",
                    f"{pod}-gpus",
                    (),
                    tuple(AllocatedDevice("gpus", NV, name, f"gpu-{j}") for j in range(used)),
                    (f"ns/{pod}",),
                )
            )
            pods.append(BoundPod("ns", pod, name, {"cpu": 1000, "pods": 1000}))
            plugin_pods.append(
                BoundPod(
                    "ns", pod, name, {"cpu": 1000, "pods": 1000, "nvidia.com/gpu": used * 1000}
                )
            )
    templates: dict[tuple[int, int, str], ClaimTemplate] = {}
    dra_gangs: list[Workload] = []
    plugin_gangs: list[Workload] = []
    for i in range(10 * nodes):
        members = rng.choice([1, 1, 2, 2, 4, 8])
        count = rng.choice([1, 2, 4, 8])
        kind = rng.choice([0, 0, 1, 2])  # by product, by memory, any GPU
        product = rng.choice(products)
        key = (count, kind, product if kind < 2 else "")
        if key not in templates:
            request = DeviceRequest("gpus", NV, count, selectors=_selectors(kind, product))
            templates[key] = ClaimTemplate("ns", f"t{len(templates)}", (request,))
        claim = PodClaim("gpus", template_name=templates[key].name)
        dra = PodTemplate((Container("main", {"cpu": "1"}),), resource_claims=(claim,))
        gpu = str(count)
        plugin = PodTemplate(
            (Container("main", {"cpu": "1", "nvidia.com/gpu": gpu}, {"nvidia.com/gpu": gpu}),),
            # The memory ask picks the product too: 80Gi is H100 only, 40Gi either.
            node_selector=(
                {PRODUCT: product}
                if kind == 0 or (kind == 1 and product == "NVIDIA-H100-80GB-HBM3")
                else {}
            ),
        )
        for gangs, shape in ((dra_gangs, dra), (plugin_gangs, plugin)):
            gangs.append(
                Workload(
                    "ns", f"g{i:05d}", "q", one_pod_set(shape, count=members), "Job", created=i
                )
            )
    common = {
        "queues": (Queue("ns", "q", "team"),),
        "quotas": (TeamQuota("team", {"nvidia.com/gpu": ResourceQuota(10**9)}),),
    }
    through_dra = Snapshot(
        nodes=tuple(dra_nodes),
        pods=tuple(pods),
        workloads=tuple(dra_gangs),
        device_classes=(GPU_CLASS,),
        resource_slices=tuple(slices),
        resource_claims=tuple(claims),
        claim_templates=tuple(templates.values()),
        **common,  # type: ignore[arg-type]
    )
    through_plugin = Snapshot(
        nodes=tuple(plugin_nodes),
        pods=tuple(plugin_pods),
        workloads=tuple(plugin_gangs),
        **common,  # type: ignore[arg-type]
    )
    return through_dra, through_plugin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="250 nodes only")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    table = Table(title="an admission cycle with GPUs claimed through DRA, against nvidia.com/gpu")
    columns = ("nodes", "pending", "nvidia.com/gpu", "DRA", "ratio", "decisions/s", "admitted")
    for column in columns:
        table.add_column(column, justify="right")
    for nodes in [250] if args.quick else [1_000]:
        dra, plugin = clusters(nodes)
        plugin_s, baseline = best_cpu_seconds(partial(schedule, plugin), args.repeat)
        dra_s, result = best_cpu_seconds(partial(schedule, dra), args.repeat)
        admitted = sum(1 for d in result.decisions if d.verdict is Verdict.ADMIT)
        base_admitted = sum(1 for d in baseline.decisions if d.verdict is Verdict.ADMIT)
        table.add_row(
            f"{nodes:,}",
            f"{len(dra.workloads):,}",
            f"{plugin_s:.2f}",
            f"{dra_s:.2f}",
            f"{dra_s / plugin_s:.2f}x",
            f"{len(result.decisions) / dra_s:,.0f}",
            f"{admitted:,} ({base_admitted:,})",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
