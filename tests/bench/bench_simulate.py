"""Simulator benchmark: how long ``simulate`` takes, per policy, as the cluster and workload grow.

    python -m tests.bench.bench_simulate          # bundled 5,000 jobs; 20,000 jobs on 500 nodes
    python -m tests.bench.bench_simulate --quick    # the bundled scenario only

Each row is the bundled cluster's three pools scaled to a node count (quotas
scaled alike, so the cohort still adds up to the cluster), a workload of the
given size from the bundled generator (seed 7, default faults), and all three
policies replayed in one process.  Times are wall-clock for each policy's run
(``PolicyResult.wall_seconds``) and CPU time for the whole simulation; the
machine is shared, so quote the CPU column and ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.table import Table

from queue_controller import nodepools
from queue_controller.core import ResourceQuota, TeamQuota
from queue_controller.sim.engine.compare import simulate
from queue_controller.sim.scenario.generate import (
    DEFAULT_FAULTS,
    bundled_scenario,
    generate_workload,
)
from queue_controller.sim.scenario.inputs import load_cluster
from queue_controller.sim.scenario.policy import Policy
from queue_controller.sim.scenario.spec import Scenario

BUNDLED_NODES = 64


def scaled(nodes: int, jobs: int, seed: int = 7) -> Scenario:
    """The bundled scenario with ``nodes`` nodes in the same mix and ``jobs`` jobs."""
    base = bundled_scenario(seed=seed, jobs=0)
    if nodes == BUNDLED_NODES:
        return dataclasses.replace(base, jobs=bundled_scenario(seed=seed, jobs=jobs).jobs)
    factor = nodes / BUNDLED_NODES
    path = Path(str(resources.files("queue_controller.data").joinpath("sim-cluster.yaml")))
    pools = nodepools.load(path)
    sizes = {pool.name: max(1, round(pool.count * factor)) for pool in pools.pools}
    out = Path(f"/tmp/qc-bench-cluster-{nodes}.yaml")
    out.write_text(json.dumps(pools.resized(sizes).model_dump(by_alias=True, exclude_none=True)))
    cluster = load_cluster(out)
    quotas = tuple(
        TeamQuota(
            name=q.name,
            cohort=q.cohort,
            resources={
                r: ResourceQuota(nominal=round(limits.nominal * factor / 1000) * 1000)
                for r, limits in q.resources.items()
            },
        )
        for q in base.quotas
    )
    workload = generate_workload(
        seed=seed,
        jobs=jobs,
        queues=base.queues,
        nodes=cluster,
        quotas=quotas,
        priority_classes=base.priority_classes,
    )
    return dataclasses.replace(base, nodes=cluster, quotas=quotas, jobs=workload)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the bundled scenario only")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    sizes = [(BUNDLED_NODES, 5000)] + ([] if args.quick else [(500, 20000)])
    rows = []
    for nodes, jobs in sizes:
        scenario = scaled(nodes, jobs)
        cpu, wall = time.process_time(), time.perf_counter()
        report = simulate(scenario, policy=Policy(name="default"), faults=DEFAULT_FAULTS, seed=7)
        row = {
            "nodes": nodes,
            "jobs": jobs,
            "wall_seconds": round(time.perf_counter() - wall, 1),
            "cpu_seconds": round(time.process_time() - cpu, 1),
            "simulated_hours": round(
                max(r.simulated_seconds for r in report.policies.values()) / 3600, 1
            ),
        }
        for name, result in report.policies.items():
            row[f"{name}_seconds"] = result.wall_seconds
            row[f"{name}_cycles"] = result.cycles
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="simulate: three policies in one run")
    for column in rows[0]:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*(str(value) for value in row.values()))
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
