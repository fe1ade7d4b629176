"""`make bench-e2e`: one GPU trace replayed through each system, side by side.

    python -m tests.bench.e2e --nodes 200 --jobs 400 --systems queue-controller,no-queue

Each system in turn gets a freshly started local control plane with the same kwok GPU
nodes and the same Jobs (only the queue label differs), is measured from outside by
watching the API, and the cluster is taken down.  report.json, report.md and plots go
under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from tests.bench.e2e.report import figures, write
from tests.bench.e2e.runner import RunConfig, SystemRun, deadline, run_system
from tests.bench.e2e.shape import shape as make_shape
from tests.bench.e2e.systems import SYSTEMS, SystemUnavailable, make
from tests.bench.e2e.teams import QueueSettings
from tests.bench.e2e.trace import RUNTIME, load


def _systems(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or 'nothing'}: systems are {', '.join(SYSTEMS)}"
        )
    return names


def _runtime(value: str) -> tuple[float, float]:
    low, _, high = value.partition("-")
    try:
        pair = (float(low), float(high))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected MIN-MAX seconds") from None
    if not 0 < pair[0] <= pair[1]:
        raise argparse.ArgumentTypeError(f"{value!r}: need 0 < MIN <= MAX")
    return pair


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.bench.e2e",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=1000,
        help="kwok nodes, in the mix h100 80%%, a100-mig 15%%, l4 5%%",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="gangs to submit (default: one per node from openb, about 5.5 pods each, "
        "arriving fast enough to offer twice the GPUs; 0: enough openb gangs to fill every "
        "GPU twice, more than a 2-core machine's control plane keeps up with at 1,000 nodes; "
        "a Kueue generator YAML: all of its workloads)",
    )
    p.add_argument(
        "--systems",
        type=_systems,
        default=list(SYSTEMS),
        help="comma-separated, run in this order: " + ",".join(SYSTEMS),
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench-e2e-report"),
        help="folder for report.json, report.md, plots and each system's logs",
    )
    p.add_argument("--seed", type=int, default=1, help="seeds gang sizes and teams")
    p.add_argument(
        "--trace",
        default="openb",
        help="openb (../shared/data/openb) or a Kueue performance-generator YAML",
    )
    p.add_argument(
        "--runtime",
        type=_runtime,
        default=RUNTIME,
        metavar="MIN-MAX",
        help="openb runtimes are spread over this range, in seconds",
    )
    p.add_argument(
        "--pods-ready-timeout",
        type=int,
        default=QueueSettings().pods_ready_timeout_seconds,
        help="seconds an admitted gang has to run before it is evicted (our Queue's "
        "podsReadyTimeoutSeconds, Kueue's waitForPodsReady.timeout)",
    )
    p.add_argument(
        "--backoff-base",
        type=int,
        default=QueueSettings().backoff_base_seconds,
        help="requeue backoff after an eviction, first step (both systems)",
    )
    p.add_argument(
        "--backoff-max",
        type=int,
        default=QueueSettings().backoff_max_seconds,
        help="requeue backoff, most (both systems)",
    )
    p.add_argument(
        "--reservation",
        type=int,
        default=None,
        metavar="SECONDS",
        help="turn on our reservation with backfill: each Queue's "
        "spec.reservation.afterSeconds (Kueue has none; every Job declares its runtime)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="profile our controller: py-spy's CPU flame graph and speedscope file, and "
        "memray's memory at its peak, beside its report (its costs are then not comparable)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds to wait for a system's last gang (default: from the trace)",
    )
    return p


class Progress:
    """One line, rewritten in place on a terminal; elsewhere a line every 15 s."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream, self.live = stream, stream.isatty()
        self.last = 0.0
        self.width = 0

    def __call__(self, line: str) -> None:
        if self.live:
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
            self.stream.flush()
        elif time.monotonic() - self.last >= 15 or "starting" in line:
            self.last = time.monotonic()
            self.stream.write(line + "\n")
            self.stream.flush()

    def done(self, line: str) -> None:
        if self.live:
            self.stream.write("\r" + " " * self.width + "\r")
        self.width = 0
        self.stream.write(line + "\n")
        self.stream.flush()


def main(argv: Sequence[str] | None = None, *, progress: Progress | None = None) -> Path:
    args = parser().parse_args(argv)
    progress = progress or Progress()
    started = time.monotonic()
    shape = make_shape(args.nodes)
    jobs = args.jobs
    if jobs is not None and jobs < 0:
        raise SystemExit("error: --jobs must be 0 or more")
    if args.trace == "openb":
        jobs = args.nodes if jobs is None else (None if jobs == 0 else jobs)
    trace = load(args.trace, shape, jobs=jobs, seed=args.seed, runtime=args.runtime)
    settings = QueueSettings(
        pods_ready_timeout_seconds=args.pods_ready_timeout,
        backoff_base_seconds=args.backoff_base,
        backoff_max_seconds=args.backoff_max,
        reservation_after_seconds=args.reservation,
    )
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    config = RunConfig(
        out=out,
        shape=shape,
        trace=trace,
        settings=settings,
        timeout=args.timeout,
        profile=args.profile,
    )
    progress.done(
        f"trace: {len(trace.gangs)} gangs, {sum(g.pods for g in trace.gangs)} pods, "
        f"{len(trace.teams)} teams; cluster: {shape.nodes} nodes, {shape.total_gpus:,.0f} GPUs; "
        f"each system waits at most {config.timeout or deadline(trace, shape):.0f} s"
    )
    runs: list[SystemRun] = []
    results = {}
    skipped: dict[str, str] = {}
    for name in args.systems:
        system = make(name, shape=shape, workdir=out / name)
        try:
            system.prepare()
        except SystemUnavailable as why:
            skipped[name] = str(why)
            progress.done(str(why))
            continue
        try:
            run = run_system(system, config, progress)
        except Exception as error:  # one system failing must not lose the others' figures
            (out / name).mkdir(parents=True, exist_ok=True)
            (out / name / "error.txt").write_text(traceback.format_exc())
            skipped[name] = f"{name}: failed: {error} (see {out / name / 'error.txt'})"
            progress.done(skipped[name])
            continue
        runs.append(run)
        results[name] = figures(run, shape.total_gpus, queued=system.queue_label is not None)
        progress.done(
            f"{name}: {results[name]['completed']}/{len(trace.gangs)} gangs done in "
            f"{run.end:.0f} s (wall {run.wall_seconds:.0f} s)"
            + ("; TIMED OUT" if run.timed_out else "")
        )
    header = {
        "trace": {
            "source": trace.source,
            "credit": trace.credit,
            "notes": list(trace.notes),
            "gangs": len(trace.gangs),
            "pods": sum(g.pods for g in trace.gangs),
            "seed": args.seed,
            "makespan_lower_bound": trace.makespan_lower_bound(shape),
        },
        "cluster": {"nodes": shape.nodes, "pools": shape.sizes, "gpus": shape.total_gpus,
                    "capacity": dict(shape.capacity)},
        "teams": [{"name": t.name, "namespace": t.namespace, "cohort": t.cohort,
                   "nominal": dict(t.nominal), "borrowing_limit": dict(t.borrowing_limit)}
                  for t in trace.teams],
        "settings": {"pods_ready_timeout_seconds": settings.pods_ready_timeout_seconds,
                     "backoff_base_seconds": settings.backoff_base_seconds,
                     "backoff_max_seconds": settings.backoff_max_seconds,
                     "reservation_after_seconds": settings.reservation_after_seconds},
        "wall_seconds": round(time.monotonic() - started, 1),
    }  # fmt: skip
    path = write(out, runs, results, header, skipped, shape.total_gpus)
    progress.done(f"report: {path} and {out / 'report.md'}")
    if results:
        progress.done(json.dumps({n: _short(r) for n, r in results.items()}, indent=1))
    return path


def _short(figures: dict[str, object]) -> dict[str, object]:
    keys = (
        "admitted",
        "throughput_gangs_per_second",
        "partially_placed_gpu_seconds",
        "gpu_allocation_saturated",
        "makespan_seconds",
        "evictions",
    )
    return {k: figures[k] for k in keys}


if __name__ == "__main__":
    main()
