"""report.json, report.md and the plots of a `make bench-e2e` run, in the style of `simulate`.

Every system's figures come from its SystemRun alone (the watch streams, the audit log,
/proc), by the same arithmetic (watch.py), so the columns compare like with like.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from queue_controller.sim.report.plots import downsample
from tests.bench.e2e import profile
from tests.bench.e2e.cost import per_gang
from tests.bench.e2e.runner import SystemRun
from tests.bench.e2e.watch import (
    LONG_EPISODE,
    SHORT_EPISODE,
    STAGES,
    backlog,
    gang_latencies,
    percentiles,
    rate_within,
    summarize_episodes,
    time_weighted_mean,
)

REQUIRED = (
    "admitted",
    "admission_latency_seconds",
    "bound_latency_seconds",
    "throughput_gangs_per_second",
    "partially_placed_gangs",
    "partially_placed_gpu_seconds",
    "evictions",
    "gpu_allocation_saturated",
    "makespan_seconds",
    "api_requests_per_admitted_gang",
    "cpu_seconds",
    "peak_rss_bytes",
)
ALLOCATION_PNG = "allocation.png"
LATENCY_PNG = "latency-cdf.png"
USAGE_PNG = "cpu-rss.png"  # each system's CPU and RSS over the run
USAGE_WINDOW = 5.0  # seconds: CPU use is plotted as its mean over this window


def figures(run: SystemRun, total_gpus: float, *, queued: bool) -> dict[str, Any]:
    """The report's figures for one system.  ``queued``: Jobs are held and released by a
    system (admission = unsuspend); otherwise they start unsuspended, admission latency
    is 0, and throughput counts gangs fully placed instead."""
    gangs = list(run.recorder.gangs.values())
    latencies = gang_latencies(gangs)
    admitted = sum(1 for g in gangs if g.admitted)
    placed_waits = [(g.submitted, g.placed[0] if g.placed else None) for g in gangs]
    if queued:
        waits = [(g.submitted, g.admitted[0] if g.admitted else None) for g in gangs]
        served = [g.admitted[0] for g in gangs if g.admitted]
    else:
        waits, served = placed_waits, [g.placed[0] for g in gangs if g.placed]
    admission_backlog = backlog(waits, run.end)
    placement_backlog = backlog(placed_waits, run.end)
    # Watch threads stamp times before taking the recorder's lock: sort the few that cross.
    allocation = sorted((t, gpus / total_gpus) for t, gpus in run.recorder.allocation_steps)
    episodes = summarize_episodes(run.episodes)
    completed = [g.completed for g in gangs if g.completed is not None]
    makespan = (
        round(max(completed) - min(g.submitted for g in gangs), 1)
        if gangs and len(completed) == len(gangs)
        else None
    )
    throughput = rate_within(served, admission_backlog)
    saturated = time_weighted_mean(allocation, placement_backlog)
    whole_run = time_weighted_mean(allocation, [(0.0, run.end)])
    return {
        "admitted": admitted,
        "admission_latency_seconds": percentiles(latencies["admission"]),
        "bound_latency_seconds": percentiles(latencies["bound"]),
        "throughput_gangs_per_second": None if throughput is None else round(throughput, 3),
        "partially_placed_gangs": episodes.partially_placed_gangs,
        "partially_placed_gpu_seconds": episodes.partially_placed_gpu_seconds,
        "evictions": sum(len(g.resuspended) for g in gangs),
        "gpu_allocation_saturated": None if saturated is None else round(saturated, 4),
        "makespan_seconds": makespan,
        "api_requests_per_admitted_gang": per_gang(run.requests, admitted, run.clients),
        "cpu_seconds": run.cost.cpu_seconds if run.cost else None,
        "peak_rss_bytes": run.cost.peak_rss_bytes if run.cost else None,
        # -- beyond the required keys --
        "cpu_seconds_per_admitted_gang": (
            round(run.cost.cpu_seconds / admitted, 4) if run.cost and admitted else None
        ),
        "running_latency_seconds": percentiles(latencies["running"]),
        # Admission to all bound, split where the time goes (watch.gang_latencies).
        "bound_stages_seconds": {stage: percentiles(latencies[stage]) for stage in STAGES},
        # The system's own account of itself (queue-controller: its cycle's phases), apart
        # from the figures above, which are all measured from outside.
        "own_metrics": run.own_metrics,
        # With --profile: where the memory was at the peak (profile.py); files beside it.
        "profile": run.profile,
        "throughput_basis": "first unsuspend" if queued else "whole gang bound",
        "submitted": len(gangs),
        "fully_placed": sum(1 for g in gangs if g.placed),
        "completed": len(completed),
        "timed_out": run.timed_out,
        "members_lost": sum(g.members_lost for g in gangs),
        "partial_episodes": {
            f"over_{LONG_EPISODE:g}s": episodes.long_episodes,
            f"under_{SHORT_EPISODE:g}s": episodes.short_episodes,
            f"under_{SHORT_EPISODE:g}s_gpu_seconds": episodes.short_gpu_seconds,
            "between": episodes.middle_episodes,
        },
        "gpu_allocation_mean": None if whole_run is None else round(whole_run, 4),
        "saturated_seconds": round(sum(e - s for s, e in placement_backlog), 1),
        "api_requests_by_client": run.requests,
        "wall_seconds": run.wall_seconds,
        "cluster_start_seconds": run.cluster_seconds,
        "run_seconds": round(run.end, 1),
        "submit_errors": run.submit_errors[:20],
        "watch_restarts": run.watch_restarts,
    }


def write(
    out: Path,
    runs: Sequence[SystemRun],
    systems: Mapping[str, dict[str, Any]],
    header: Mapping[str, Any],
    skipped: Mapping[str, str],
    total_gpus: float,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    report = {**header, "systems": dict(systems), "skipped": dict(skipped)}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(markdown(report))
    for run in runs:
        with (out / run.name / "allocation.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["seconds", "gpu_allocation_fully_placed"])
            writer.writerows(
                (round(t, 3), round(g / total_gpus, 5)) for t, g in run.recorder.allocation_steps
            )
        _gangs_csv(out / run.name / "gangs.csv", run)
        if run.usage:
            with (out / run.name / "usage.csv").open("w", newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(["seconds", "cpu_seconds", "rss_bytes"])
                writer.writerows(run.usage)
    if runs:
        plots(out, runs, total_gpus)
    return out / "report.json"


def _gangs_csv(path: Path, run: SystemRun) -> None:
    """Each gang's times as the watch saw them (seconds since the run started)."""

    def first(values: Sequence[float]) -> float | str:
        return round(values[0], 3) if values else ""

    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["gang", "pods", "gpus", "submitted", "admitted", "all_bound", "all_running",
             "completed", "evictions", "admissions", "partial_episodes"]
        )  # fmt: skip
        for gang in run.recorder.gangs.values():
            writer.writerow(
                [gang.key, gang.pods, round(gang.gpus, 3), round(gang.submitted, 3),
                 first(gang.admitted), first(gang.placed), first(gang.running),
                 "" if gang.completed is None else round(gang.completed, 3),
                 len(gang.resuspended), len(gang.admitted), len(gang.episodes)]
            )  # fmt: skip


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown(report: Mapping[str, Any]) -> str:
    systems: dict[str, dict[str, Any]] = report["systems"]
    names = list(systems)
    rows: list[tuple[str, list[Any]]] = [
        ("gangs admitted", [s["admitted"] for s in systems.values()]),
        ("gangs completed", [s["completed"] for s in systems.values()]),
    ]
    for key, label in (
        ("admission_latency_seconds", "admission latency"),
        ("bound_latency_seconds", "admission to all bound"),
        ("running_latency_seconds", "admission to all Running"),
    ):
        for q in ("p50", "p95", "p99"):
            rows.append((f"{label} {q} (s)", [s[key][q] for s in systems.values()]))
    for stage, label in (
        ("created", "unsuspend to last member created"),
        ("released", "then to last member released"),
        ("scheduled", "then to last member bound"),
    ):
        for q in ("p50", "p99"):
            rows.append((f"{label} {q} (s)", [
                s["bound_stages_seconds"][stage][q] for s in systems.values()]))  # fmt: skip
    rows += [
        ("throughput at saturation (gangs/s)", [s["throughput_gangs_per_second"] for s in
                                                 systems.values()]),
        (f"partially placed gangs (> {LONG_EPISODE:g} s)", [s["partially_placed_gangs"] for s
                                                             in systems.values()]),
        ("partially placed GPU-seconds", [s["partially_placed_gpu_seconds"] for s in
                                          systems.values()]),
        (f"partial episodes under {SHORT_EPISODE:g} s", [
            s["partial_episodes"][f"under_{SHORT_EPISODE:g}s"] for s in systems.values()]),
        ("evictions (re-suspensions)", [s["evictions"] for s in systems.values()]),
        ("GPU allocation at saturation", [s["gpu_allocation_saturated"] for s in
                                          systems.values()]),
        ("makespan (s)", [s["makespan_seconds"] for s in systems.values()]),
        ("API requests per admitted gang: system", [
            s["api_requests_per_admitted_gang"]["system"] for s in systems.values()]),
        ("API requests per admitted gang: all but the harness", [
            s["api_requests_per_admitted_gang"]["total"] for s in systems.values()]),
        ("CPU seconds (system process)", [s["cpu_seconds"] for s in systems.values()]),
        ("CPU seconds per admitted gang", [s.get("cpu_seconds_per_admitted_gang") for s in
                                           systems.values()]),
        ("peak RSS (MiB)", [None if s["peak_rss_bytes"] is None else
                            round(s["peak_rss_bytes"] / 2**20, 1) for s in systems.values()]),
        ("wall seconds (cluster, run, teardown)", [s["wall_seconds"] for s in
                                                    systems.values()]),
    ]  # fmt: skip
    lines = [
        "# bench-e2e: one GPU trace through each system on a fresh local control plane",
        "",
        f"- Trace: {report['trace']['source']}: {report['trace']['gangs']} gangs, "
        f"{report['trace']['pods']} pods.",
        f"- Cluster: {report['cluster']['nodes']} kwok nodes {report['cluster']['pools']}, "
        f"{report['cluster']['gpus']:,.0f} GPUs (a MIG slice counts as its compute share).",
        "- Measured from outside, by watching Jobs and Pods (client-side times); API "
        "requests from the API server's audit log, by user agent.",
    ]
    if report["trace"].get("credit"):
        lines.append(f"- Trace credit: {report['trace']['credit']}.")
    bound = report["trace"].get("makespan_lower_bound")
    if bound:
        parts = ", ".join(
            f"{k.replace('_', ' ')} {v:,.0f}" for k, v in bound.items() if k != "seconds"
        )
        lines.append(f"- Makespan lower bound: {bound['seconds']:,.0f} s, the largest of {parts}.")
    after = report.get("settings", {}).get("reservation_after_seconds")
    if after is not None:
        lines.append(f"- queue-controller's reservation with backfill on: afterSeconds {after}.")
    for name, why in report.get("skipped", {}).items():
        lines.append(f"- Skipped {name}: {why}")
    if not names:
        return "\n".join([*lines, "", "No system ran.", ""])
    lines += ["", "| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {label} | " + " | ".join(_cell(v) for v in values) + " |"
              for label, values in rows]  # fmt: skip
    lines += [
        "",
        f"![GPU allocation to fully placed gangs]({ALLOCATION_PNG})",
        f"![Latency CDFs]({LATENCY_PNG})",
        f"![CPU and RSS over the run]({USAGE_PNG})",
        "",
    ]
    for name, figures in systems.items():
        if figures.get("profile"):
            lines += _profile_section(name, figures["profile"])
    return "\n".join(lines)


def _profile_section(name: str, peak: Sequence[str]) -> list[str]:
    """With --profile: links to the profiles beside the report, and the memory peak."""
    return [
        f"## {name}: profiles (--profile; its CPU and RSS above are the profiled run's)",
        "",
        f"- CPU: [flame graph]({name}/{profile.CPU_SVG}), "
        f"[speedscope]({name}/{profile.CPU_SPEEDSCOPE}) (open at https://www.speedscope.app)",
        f"- Memory at the peak: [flame graph]({name}/{profile.MEMORY_HTML}), "
        f"[as text]({name}/{profile.MEMORY_PEAK})",
        "",
        "```",
        *peak,
        "```",
        "",
    ]


def plots(out: Path, runs: Sequence[SystemRun], total_gpus: float) -> None:
    """Allocation over time per system, and admission / bound latency CDFs."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from tests.bench.e2e.watch import gang_latencies

    figure, axes = plt.subplots(figsize=(10, 5), dpi=100)
    for run in runs:
        times = [t for t, _ in run.recorder.allocation_steps] + [run.end]
        values = [g / total_gpus for _, g in run.recorder.allocation_steps]
        values.append(values[-1])
        times, values = downsample(times, values)
        axes.step(times, values, where="post", label=run.name)
    axes.set_xlabel("seconds since the first submission")
    axes.set_ylabel("GPUs held by fully placed gangs / all GPUs")
    axes.set_ylim(0, 1.05)
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out / ALLOCATION_PNG)
    plt.close(figure)

    figure, panels = plt.subplots(1, 2, figsize=(10, 5), dpi=100)
    for panel, (kind, title) in zip(
        panels,
        (("admission", "submit to admission"), ("bound", "admission to all members bound")),
        strict=True,
    ):
        for run in runs:
            values = sorted(gang_latencies(run.recorder.gangs.values())[kind])
            if values:
                fractions = [(i + 1) / len(values) for i in range(len(values))]
                panel.step(values, fractions, where="post", label=run.name)
        panel.set_title(title)
        panel.set_xlabel("seconds")
        panel.set_ylabel("fraction of gangs")
        panel.grid(alpha=0.3)
        panel.legend()
    figure.tight_layout()
    figure.savefig(out / LATENCY_PNG)
    plt.close(figure)

    figure, (cpu, rss) = plt.subplots(1, 2, figsize=(10, 5), dpi=100)
    for run in runs:
        if not run.usage:
            continue  # no process of its own (no queue)
        times, used = cpu_use(run.usage, USAGE_WINDOW)
        cpu.plot(times, used, label=run.name)
        rss.plot([t for t, _, _ in run.usage], [r / 2**20 for _, _, r in run.usage], label=run.name)
    cpu.set_title(f"CPU (cores, mean over {USAGE_WINDOW:g} s)")
    rss.set_title("resident memory (MiB)")
    for panel in (cpu, rss):
        panel.set_xlabel("seconds since the first submission")
        panel.grid(alpha=0.3)
        panel.legend()
    figure.tight_layout()
    figure.savefig(out / USAGE_PNG)
    plt.close(figure)


def cpu_use(
    usage: Sequence[tuple[float, float, int]], window: float
) -> tuple[list[float], list[float]]:
    """Cores in use over time: CPU seconds spent over each ``window`` seconds, divided by
    the seconds that passed (at each sample, looking back to the first within it)."""
    times: list[float] = []
    cores: list[float] = []
    start = 0
    for t, spent, _ in usage:
        while usage[start][0] < t - window:
            start += 1
        t0, spent0, _ = usage[start]
        if t > t0:
            times.append(t)
            cores.append((spent - spent0) / (t - t0))
    return times, cores
