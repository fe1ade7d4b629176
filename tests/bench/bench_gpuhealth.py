"""GPU health benchmark: one DCGM read for a whole cluster, and admission with unhealthy GPUs.

    python -m tests.bench.bench_gpuhealth           # 100, 1,000 and 5,000 nodes (make bench-gpu)
    python -m tests.bench.bench_gpuhealth --quick   # 1,000 nodes only

For each size it writes what a Prometheus ``/federate`` answer for that many
8-GPU nodes looks like (XID, GR_ENGINE_ACTIVE and FB_USED for every GPU, with
pod mapping; 1% of the GPUs with XID 79), then times, in CPU seconds (one
core, whatever else the machine does), best of ``--repeat``:

* ``parse``: prometheus_client's text parser into samples, over the three
  families read (a federate URL with ``match[]``), and over an exporter's
  whole ``/metrics`` (33 families a GPU), whose other families are skipped
  before parsing;
* ``observe``: the XID rules and the idle tracker over every sample;
* ``report``: every node's unhealthy list, as the controller publishes it;
* ``cycle``: one admission cycle over those nodes with the faults applied,
  against the same cycle without any health report (the cost of health in
  admission, as a ratio).

The controller reads DCGM every 30 s by default, so the read must stay well
inside that on one core.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from rich.console import Console
from rich.table import Table

from queue_controller.core import schedule
from queue_controller.core.model.objects import GpuHealth, Node, Snapshot
from queue_controller.gpuhealth.dcgm import parse
from queue_controller.gpuhealth.dcgmhealth import DcgmHealth
from queue_controller.gpuhealth.idle import IdleTracker
from tests.bench.timing import best_cpu_seconds
from tests.builders import gang, gpu_node, queue, quota

T = TypeVar("T")
GPUS = 8


# What dcgm-exporter's default counters add beside the three families read.
OTHER_FAMILIES = [
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_SM_OCCUPANCY",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
]


def exposition(nodes: int, *, seed: int, others: bool) -> tuple[str, set[tuple[str, int]]]:
    """``others``: every family of an exporter's /metrics, not only the three read."""
    draw = random.Random(seed)
    sick = {(f"node-{n:05d}", g) for n in range(nodes) for g in range(GPUS) if draw.random() < 0.01}
    lines = []
    families: list[tuple[str, Callable[[str, int], object]]] = [
        ("DCGM_FI_DEV_XID_ERRORS", lambda h, g: 79 if (h, g) in sick else 0),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lambda h, g: round(draw.random(), 3)),
        ("DCGM_FI_DEV_FB_USED", lambda h, g: draw.randrange(80_000)),
    ]
    if others:
        families += [(name, lambda h, g: 1) for name in OTHER_FAMILIES]
    for metric, value in families:
        lines.append(f"# TYPE {metric} gauge")
        for n in range(nodes):
            host = f"node-{n:05d}"
            for g in range(GPUS):
                labels = (
                    f'gpu="{g}",UUID="GPU-{n}-{g}",device="nvidia{g}",modelName="NVIDIA H100 80GB '
                    f'HBM3",Hostname="{host}",container="main",namespace="team-{n % 7}",'
                    f'pod="job-{n}-{g // 4}",instance="{host}:9400",job="dcgm-exporter"'
                )
                lines.append(f"{metric}{{{labels}}} {value(host, g)}")
    return "\n".join(lines) + "\n", sick


def run(nodes: int, repeat: int) -> dict[str, float]:
    text, sick = exposition(nodes, seed=nodes, others=False)
    everything, _ = exposition(nodes, seed=nodes, others=True)
    parse_s, parsed = best_cpu_seconds(lambda: parse(text, source="federate"), repeat)
    parse_all_s, parsed_all = best_cpu_seconds(
        lambda: parse(everything, source="exporters"), repeat
    )
    assert parsed_all.samples == parsed.samples
    hosts = sorted({s.host for s in parsed.samples})

    def observe() -> tuple[DcgmHealth, IdleTracker]:
        health = DcgmHealth(clear_seconds=600)
        idle = IdleTracker(threshold=0.05, window_seconds=1800)
        health.observe(parsed.samples, now=1000.0)
        idle.observe(parsed.samples, now=1000.0)
        return health, idle

    observe_s, (health, _) = best_cpu_seconds(observe, repeat)
    report_s, reports = best_cpu_seconds(
        lambda: {h: health.unhealthy(h, now=1000.0) for h in hosts}, repeat
    )
    assert sum(len(r) for r in reports.values()) == len(sick)

    cluster = [gpu_node(h, GPUS) for h in hosts]
    sick_nodes = [
        replace(n, gpu_health=GpuHealth(unhealthy=reports[n.name], gpu_count=GPUS))
        if reports[n.name]
        else n
        for n in cluster
    ]
    gangs = [gang(f"g{i}", members=4, gpus=8, created=float(i)) for i in range(nodes // 2)]

    def cycle(of: list[Node]) -> Callable[[], object]:
        snapshot = Snapshot(
            nodes=tuple(of), workloads=tuple(gangs), queues=(queue(),), quotas=(quota(),)
        )
        return lambda: schedule(snapshot)

    healthy_s, _ = best_cpu_seconds(cycle(cluster), repeat)
    with_faults_s, _ = best_cpu_seconds(cycle(sick_nodes), repeat)
    return {
        "nodes": nodes,
        "series": 3 * nodes * GPUS,
        "mib": len(text) / 2**20,
        "mib_all": len(everything) / 2**20,
        "unhealthy": len(sick),
        "parse": parse_s,
        "parse_all": parse_all_s,
        "observe": observe_s,
        "report": report_s,
        "cycle": healthy_s,
        "cycle_faults": with_faults_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 nodes only")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    options = parser.parse_args()
    sizes = [1000] if options.quick else [100, 1000, 5000]
    table = Table(title="GPU health: one DCGM read, and admission with faults (CPU seconds)")
    for column in (
        "nodes",
        "series read",
        "MiB",
        "parse",
        "exporter MiB",
        "parse exporter text",
        "observe + report",
        "unhealthy GPUs",
        "cycle",
        "cycle with faults",
        "ratio",
    ):
        table.add_column(column, justify="right")
    console = Console(width=160)
    for size in sizes:
        r = run(size, options.repeat)
        table.add_row(
            f"{r['nodes']:,}",
            f"{r['series']:,}",
            f"{r['mib']:.1f}",
            f"{r['parse']:.2f}",
            f"{r['mib_all']:.1f}",
            f"{r['parse_all']:.2f}",
            f"{r['observe'] + r['report']:.3f}",
            f"{r['unhealthy']:,}",
            f"{r['cycle']:.3f}",
            f"{r['cycle_faults']:.3f}",
            f"{r['cycle_faults'] / r['cycle']:.2f}x",
        )
    console.print(table)


if __name__ == "__main__":
    main()
