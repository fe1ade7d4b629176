"""Admission-cycle benchmark: the equivalence-class engine against the naive one.

    python -m tests.bench.bench_cycle            # the full sweep (make bench)
    python -m tests.bench.bench_cycle --quick    # 500 nodes x 1,000 gangs only

For every size in the sweep it builds a seeded synthetic cluster (see
``synthetic.py``), runs one full admission cycle over every pending gang with
the equivalence-class engine, best of ``--repeat`` runs, and reports CPU time
(``time.process_time``: one core, whatever else the machine does),
decisions per second and cost per node x gang.

The naive engine (``PodByPodPlacer``: every member pod scans every node) is
far too slow for the full gang lists, so both engines are also timed on the
same first ``--naive-gangs`` gangs of each cluster, and the ratio of those
two times is the speed-up quoted.  A final row replays the real Alibaba
openb trace when ``shared/data/openb`` is present.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from queue_controller.core import (
    CycleResult,
    EquivalenceIndex,
    PodByPodPlacer,
    Snapshot,
    Verdict,
    schedule,
)
from queue_controller.core.cycle.admission import PlacerFactory
from tests.bench import openb
from tests.bench.synthetic import make_cluster
from tests.bench.timing import best_cpu_seconds


def _peak_mib(snapshot: Snapshot) -> float:
    tracemalloc.start()
    schedule(snapshot)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def _prefix(snapshot: Snapshot, gangs: int) -> Snapshot:
    return dataclasses.replace(snapshot, workloads=snapshot.workloads[:gangs])


def measure(
    name: str, snapshot: Snapshot, *, repeat: int, naive_gangs: int, memory: bool
) -> dict[str, Any]:
    def run(placer: PlacerFactory, snap: Snapshot) -> Callable[[], CycleResult]:
        return lambda: schedule(snap, placer=placer)

    fast_s, result = best_cpu_seconds(run(EquivalenceIndex, snapshot), repeat)
    verdicts = Counter(d.verdict for d in result.decisions)
    gangs = len(snapshot.workloads)
    row: dict[str, Any] = {
        "case": name,
        "nodes": len(snapshot.nodes),
        "gangs": gangs,
        "pods_pending": sum(w.gang_size for w in snapshot.workloads),
        "cycle_s": round(fast_s, 4),
        "decisions_per_s": round(gangs / fast_s),
        "ns_per_node_gang": round(fast_s * 1e9 / (len(snapshot.nodes) * gangs), 2),
        "admitted": verdicts[Verdict.ADMIT],
        "pending": verdicts[Verdict.PENDING],
        "invalid": verdicts[Verdict.INVALID],
    }
    if naive_gangs:
        prefix = _prefix(snapshot, min(naive_gangs, gangs))
        naive_s, naive_result = best_cpu_seconds(run(PodByPodPlacer, prefix), 1)
        fast_prefix_s, fast_result = best_cpu_seconds(run(EquivalenceIndex, prefix), repeat)
        row |= {
            "naive_gangs": len(prefix.workloads),
            "naive_s": round(naive_s, 3),
            "fast_same_gangs_s": round(fast_prefix_s, 4),
            "speedup": round(naive_s / fast_prefix_s, 1),
            # Placements differ (per-pod best fit against whole-gang best fit), so
            # the admitted counts can differ a little; they are shown, not asserted.
            "naive_admitted": sum(d.verdict is Verdict.ADMIT for d in naive_result.decisions),
            "fast_admitted_same_gangs": sum(
                d.verdict is Verdict.ADMIT for d in fast_result.decisions
            ),
        }
    if memory:
        row["peak_mib"] = round(_peak_mib(snapshot), 1)
    return row


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="Admission cycle (CPU seconds, best of runs, one core)")
    columns = [
        ("case", "case"),
        ("nodes", "nodes"),
        ("gangs", "gangs"),
        ("cycle_s", "cycle s"),
        ("decisions_per_s", "decisions/s"),
        ("ns_per_node_gang", "ns/(node·gang)"),
        ("admitted", "admit"),
        ("pending", "pending"),
        ("naive_gangs", "naive on"),
        ("naive_s", "naive s"),
        ("fast_same_gangs_s", "ours s"),
        ("speedup", "speed-up"),
        ("peak_mib", "peak MiB"),
    ]
    for _, title in columns:
        table.add_column(title, justify="right")
    for row in rows:
        table.add_row(*(str(row.get(key, "")) for key, _ in columns))
    return table


def _slope(rows: list[dict[str, Any]], vary: str, fixed: str) -> list[str]:
    """Log-log growth of cycle time in one dimension, the other held fixed."""
    notes = []
    for value in sorted({r[fixed] for r in rows}):
        series = sorted((r[vary], r["cycle_s"]) for r in rows if r[fixed] == value)
        if len(series) >= 2:
            (x0, y0), (x1, y1) = series[0], series[-1]
            exponent = math.log(y1 / y0) / math.log(x1 / x0)
            notes.append(f"time ~ {vary}^{exponent:.2f} at {fixed}={value}")
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="500,1000,5000", help="comma-separated node counts")
    parser.add_argument("--gangs", default="1000,10000", help="comma-separated gang counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best taken)")
    parser.add_argument(
        "--naive-gangs", type=int, default=200, help="gangs both engines run for the speed-up"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="500 nodes x 1,000 gangs only")
    parser.add_argument("--no-openb", action="store_true", help="skip the openb trace row")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory")
    parser.add_argument("--json", metavar="PATH", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    node_counts = [500] if args.quick else [int(n) for n in args.nodes.split(",")]
    gang_counts = [1000] if args.quick else [int(g) for g in args.gangs.split(",")]

    console = Console(stderr=True)
    cases = [(n, g) for n in node_counts for g in gang_counts]
    rows = []
    with Progress(console=console, transient=True, disable=not console.is_terminal) as progress:
        task = progress.add_task("benchmarking", total=len(cases) + 1)
        for nodes, gangs in cases:
            progress.update(task, description=f"{nodes} nodes x {gangs} gangs")
            cluster = make_cluster(nodes, gangs, seed=args.seed)
            rows.append(
                measure(
                    "synthetic",
                    cluster.snapshot,
                    repeat=args.repeat,
                    naive_gangs=args.naive_gangs,
                    memory=args.memory,
                )
            )
            progress.advance(task)
        trace = None if args.no_openb or args.quick else openb.load()
        if trace is not None:
            progress.update(task, description="openb trace")
            rows.append(
                measure(
                    "openb",
                    trace.snapshot,
                    repeat=args.repeat,
                    naive_gangs=args.naive_gangs,
                    memory=args.memory,
                )
                | {"shared_gpu_tasks_skipped": trace.shared_gpu_tasks}
            )
        progress.advance(task)

    out = Console(width=None if sys.stdout.isatty() else 170)  # whole table when piped
    out.print(_table(rows))
    synthetic = [r for r in rows if r["case"] == "synthetic"]
    for note in _slope(synthetic, "nodes", "gangs") + _slope(synthetic, "gangs", "nodes"):
        out.print(note)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"python": sys.version.split()[0], "rows": rows}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
