"""The simulation report: ``report.json`` for machines, ``report.md`` and PNG plots for
people, and a summary table for the terminal.

``report.json`` holds the scalar results only; the time series and the wait lists of
:class:`~queue_controller.sim.measurement.results.PolicyResult` are large and feed the plots alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from rich.table import Table

from queue_controller.errors import InputError
from queue_controller.sim.measurement.results import (
    SIZE_CLASSES,
    Percentiles,
    PolicyResult,
    SimulationReport,
)
from queue_controller.sim.report.markdown import NONE as _NONE
from queue_controller.sim.report.markdown import count as _count
from queue_controller.sim.report.markdown import duration, gpu_hours, percent
from queue_controller.sim.report.markdown import md as _md
from queue_controller.sim.report.markdown import md_table as _md_table
from queue_controller.sim.report.reservation import reservation_json, reservation_section
from queue_controller.sim.report.reservation import rows as reservation_rows
from queue_controller.sim.report.sharing import preemption_line as _preemption
from queue_controller.sim.report.sharing import sharing_section as _sharing

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
UPPER_BOUND = "upper bound"


# -- report.json ---------------------------------------------------------------------


def _round(value: float | None, places: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), places)


def _fraction(value: float | None) -> float | None:
    return _round(value, 4)


def _amount(value: float | None) -> float | None:
    """Hours, seconds, GPUs."""
    return _round(value, 2)


def _percentiles(p: Percentiles | None) -> dict[str, object]:
    if p is None:
        return {"count": 0, "p50": None, "p95": None, "p99": None}
    return {"count": p.count, "p50": _amount(p.p50), "p95": _amount(p.p95), "p99": _amount(p.p99)}


def policy_json(result: PolicyResult) -> dict[str, object]:
    """One policy's scalar results, under the metric names of the issue."""
    delays = result.queue_delay_seconds
    return {
        "gpu_allocation": _fraction(result.gpu_allocation),
        "gpu_allocation_saturated": _fraction(result.gpu_allocation_saturated),
        "wasted_gpu_hours": _amount(result.wasted_gpu_hours),
        "stranded_gpu_fraction": _fraction(result.stranded_gpu_fraction),
        "queue_delay_seconds": {
            size: _percentiles(delays.get(size)) for size in ("all", *SIZE_CLASSES)
        },
        "jobs_submitted": result.jobs_submitted,
        "jobs_started": result.jobs_started,
        "jobs_completed": result.jobs_completed,
        "evictions": {reason: result.evictions[reason] for reason in sorted(result.evictions)},
        "deactivated_gangs": result.deactivated_gangs,
        "deadlocked_gangs": result.deadlocked_gangs,
        "team_share": {
            team: {
                "allocated_gpu_hours": _amount(share.allocated_gpu_hours),
                "share": _fraction(share.share),
                "entitlement": _fraction(share.entitlement),
            }
            for team, share in sorted(result.team_share.items())
        },
        "preemption": {
            "preemptions": result.preemption.victims,
            "preempting_gangs": result.preemption.preemptors,
            "lost_gpu_hours": _amount(result.preemption.lost_gpu_hours),
        },
        "reclaim_seconds": {team: _percentiles(p) for team, p in result.reclaim_seconds.items()},
        "reclaim_breakdown": None
        if result.reclaim_waits is None
        else {
            "total": _percentiles(result.reclaim_waits.total),
            **{
                part: {**_percentiles(p), "hours": _amount(result.reclaim_waits.hours[part])}
                for part, p in result.reclaim_waits.parts.items()
            },
        },
        "cohort_share": {
            team: {"weight": share.weight, "mean": share.mean, "peak": share.peak}
            for team, share in result.shares.items()
        },
        "queue_share": {
            queue: {"target": share.weight, "mean": share.mean, "peak": share.peak}
            for queue, share in result.queue_shares.items()
        },
        "topology": None
        if result.topology is None
        else {
            "preferred_placements": result.topology.preferred_placements,
            "preferred_in_domain": _fraction(result.topology.preferred_in_domain),
            "domain_wait_gpu_hours": _amount(result.topology.domain_wait_gpu_hours),
            "free_on_used_nodes": _fraction(result.topology.free_on_used_nodes),
            "broken_domains": _fraction(result.topology.broken_domains),
        },
        "cycles": result.cycles,
        "simulated_seconds": _amount(result.simulated_seconds),
        "wall_seconds": _amount(result.wall_seconds),
    }


def report_json(report: SimulationReport) -> dict[str, object]:
    """The content of ``report.json`` (what ``simulate -o json`` prints)."""
    bound = report.upper_bound
    return {
        "scenario": report.scenario,
        "seed": report.seed,
        "policyFile": report.policy_file,
        "capacityGpus": _amount(report.capacity_gpus),
        "nodes": report.nodes,
        "jobs": report.jobs,
        "sources": dict(report.sources),
        "faults": dict(report.faults),
        "preemption": report.preemption,
        "terminationGracePeriodSeconds": report.grace_period_seconds,
        "dra": report.dra,
        "reservation": reservation_json(report),
        "policies": {name: policy_json(result) for name, result in report.policies.items()},
        "upper_bound": None
        if bound is None
        else {
            "gpu_allocation": _fraction(bound.gpu_allocation),
            "gpu_allocation_saturated": _fraction(bound.gpu_allocation_saturated),
            "saturated_seconds": _amount(bound.saturated_seconds),
        },
    }


def _reclaim(which: str) -> Callable[[PolicyResult], str]:
    def cell(result: PolicyResult) -> str:
        p = result.reclaim_seconds.get("all")
        return duration(None if p is None else getattr(p, which))

    return cell


def _delay(which: str) -> Callable[[PolicyResult], str]:
    def cell(result: PolicyResult) -> str:
        p = result.queue_delay_seconds.get("all")
        value: float | None = None if p is None else getattr(p, which)
        return duration(value)

    return cell


# (metric, its cell for a policy, its cell for the upper bound or None where it does not apply)
_Row = tuple[str, Callable[[PolicyResult], str], Callable[[SimulationReport], str] | None]


_ROWS: tuple[_Row, ...] = (
    (
        "GPU allocation",
        lambda r: percent(r.gpu_allocation),
        lambda s: percent(s.upper_bound.gpu_allocation if s.upper_bound else None),
    ),
    (
        "GPU allocation, saturated window",
        lambda r: percent(r.gpu_allocation_saturated),
        lambda s: percent(s.upper_bound.gpu_allocation_saturated if s.upper_bound else None),
    ),
    (
        "Saturated window",
        lambda r: _NONE,
        lambda s: duration(s.upper_bound.saturated_seconds if s.upper_bound else None),
    ),
    ("Wasted GPU hours", lambda r: gpu_hours(r.wasted_gpu_hours), None),
    ("Stranded capacity", lambda r: percent(r.stranded_gpu_fraction), None),
    ("Queue delay p50", _delay("p50"), None),
    ("Queue delay p95", _delay("p95"), None),
    ("Queue delay p99", _delay("p99"), None),
    ("Jobs submitted", lambda r: _count(r.jobs_submitted), None),
    ("Jobs started", lambda r: _count(r.jobs_started), None),
    ("Jobs completed", lambda r: _count(r.jobs_completed), None),
    ("Evictions", lambda r: _count(sum(r.evictions.values())), None),
    ("Preemptions", lambda r: _count(r.preemption.victims), None),
    ("GPU hours lost to preemption", lambda r: gpu_hours(r.preemption.lost_gpu_hours), None),
    ("Reclaim time p50", _reclaim("p50"), None),
    ("Reclaim time p95", _reclaim("p95"), None),
    ("Deactivated gangs", lambda r: _count(r.deactivated_gangs), None),
    ("Deadlocked gangs", lambda r: _count(r.deadlocked_gangs), None),
    ("Admission cycles", lambda r: _count(r.cycles), None),
    ("Simulated time", lambda r: duration(r.simulated_seconds), None),
    ("Wall time", lambda r: f"{r.wall_seconds:.1f} s", None),
)


def _topology(which: str, show: Callable[[float], str]) -> Callable[[PolicyResult], str]:
    """A figure of TopologyFigures, shown, or _NONE where it was not measured."""

    def cell(result: PolicyResult) -> str:
        value = None if result.topology is None else getattr(result.topology, which)
        return _NONE if value is None else show(value)

    return cell


# Only where some Queue uses a Topology (sim.domainmeter defines the figures).
_TOPOLOGY_ROWS: tuple[_Row, ...] = (
    ("Preferred topology gangs in one domain", _topology("preferred_in_domain", percent), None),
    ("GPU hours waiting for a domain", _topology("domain_wait_gpu_hours", gpu_hours), None),
    ("Free GPUs on partly used nodes", _topology("free_on_used_nodes", percent), None),
    ("Racks with room that are broken", _topology("broken_domains", percent), None),
)


def comparison(report: SimulationReport) -> tuple[list[str], list[list[str]]]:
    """The side-by-side comparison: the header, then one row per metric, as text."""
    header = ["Metric", *report.policies]
    if report.upper_bound is not None:
        header.append(UPPER_BOUND)
    rows = []
    topology = any(r.topology is not None for r in report.policies.values())
    for label, cell, bound_cell in _ROWS + (_TOPOLOGY_ROWS if topology else ()):
        row = [label, *(cell(result) for result in report.policies.values())]
        if report.upper_bound is not None:
            row.append(_NONE if bound_cell is None else bound_cell(report))
        rows.append(row)
    return header, rows


def summary_table(report: SimulationReport) -> Table:
    """The comparison for the terminal: one row per metric, one column per policy."""
    header, rows = comparison(report)
    table = Table(box=None, header_style="bold", pad_edge=False, expand=False)
    table.add_column(header[0].upper(), no_wrap=True)
    for name in header[1:]:
        table.add_column(name.upper(), justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def reservation_table(report: SimulationReport) -> Table | None:
    """The reservation block for the terminal: gang-fit without and with it; None if off."""
    rows = reservation_rows(report)
    if not rows:
        return None
    table = Table(box=None, header_style="bold", pad_edge=False, expand=False)
    table.add_column("RESERVATION", no_wrap=True)
    for name in ("GANG-FIT", "GANG-FIT+RESERVATION"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


# -- report.md -----------------------------------------------------------------------


def _faults(faults: dict[str, float]) -> str:
    # Rates and probabilities switch a fault on; durations only shape one that is on.
    if not any(value for key, value in faults.items() if not key.endswith("_seconds")):
        return "none"
    return ", ".join(f"{key} = {value:g}" for key, value in faults.items())


def _delay_cell(p: Percentiles | None) -> str:
    if p is None or p.count == 0:
        return "no gangs"
    return f"{duration(p.p50)} / {duration(p.p95)} / {duration(p.p99)} ({_count(p.count)} gangs)"


_HOW_TO_READ = """\
- **GPU allocation**: the time-weighted fraction of GPU capacity allocated to pods of
  gangs whose every member was placed. GPUs held by a partly placed gang do not count.
- **GPU allocation, saturated window**: the same, over only the time when the upper
  bound is at capacity (the **saturated window**), where demand exceeds what the cluster
  holds and any shortfall is the policy's doing rather than a lack of work.
- **Wasted GPU hours**: GPU hours held by member pods of gangs that were not fully
  placed at the time: capacity taken without any work being done.
- **Stranded capacity**: the time-weighted fraction of capacity that was free while no
  pending pod's shape could use it (free GPUs scattered over nodes too thinly).
- **Queue delay**: from a gang's arrival until its whole gang runs, for gangs that ran;
  p50 / p95 / p99.
- **Preemptions**: gangs evicted to make room for another (reason `Preempted`), with
  preemption on. A victim is evicted whole; its pods keep their GPUs for the grace period
  (`terminationGracePeriodSeconds` of the policy); it is requeued at once and restarts
  from scratch. **GPU hours lost to preemption**: the GPU time the victims' evicted runs
  had held, from each member's binding until its pod was gone: work thrown away.
- **Reclaim time**: how long a lender waits for its nominal quota back. A pending gang is
  blocked when, at an admission cycle, it fits within what is left of its team's own
  nominal quota and the quota still refuses it, because the rest of the cohort is using
  that nominal. From the first cycle that finds it so until the cycle that admits it, each
  cycle notes what it waits for until the next: its nominal lent out (or, having
  preempted, its victims' pods going), its own team's gangs filling that nominal, or
  nodes (the quota has room). The reclaim time is the first part; p50 / p95 over every
  such gang (not measured for `per-pod`: no quotas). The whole wait and each part are
  in the section below.
- **Cohort share**: a team's use beyond its nominal quota over what the whole cohort can
  lend, for each resource; the largest of these (its dominant share), divided by the
  team's weight (its TeamQuota's `spec.fairSharing.weight`, 1 unless set). 0 while it
  stays within its nominal. Where a Cohort object enables fair sharing, the core orders
  the cohort's borrowers by this share, so the teams' shares follow their weights. Mean over
  time and peak; `team-share.png` draws it over time.
- **Deadlocked gangs**: per-pod gangs that made no progress for `deadlockSeconds` of the
  policy while partly placed: members wait forever for room held by other partial gangs.
- **Upper bound**: the fluid bound, min(demand, capacity) per GPU kind at every moment,
  as though gangs could be cut into any pieces and placed anywhere. No policy can beat it.
- **Policies**: `gang-fit` admits a gang only when every member fits on a real node at
  once and the team quota has room (this controller); `quota-only` admits on aggregate
  quota, then places pods one by one (Kueue-like); `per-pod` has no gang admission at
  all (the default kube-scheduler). `<policy>+preemption` is the same policy with
  preemption on for every TeamQuota (`--preemption compare`).
"""


def report_markdown(report: SimulationReport) -> str:
    """The content of ``report.md``; the PNGs it shows lie beside it."""
    sources = ", ".join(f"{part}: {source}" for part, source in report.sources.items())
    lines = [
        f"# Simulation report: {_md(report.scenario)}",
        "",
        "## What was simulated",
        "",
        *_md_table(
            ["", ""],
            [
                ["Scenario", report.scenario],
                ["Nodes", _count(report.nodes)],
                ["GPU capacity", f"{report.capacity_gpus:,.6g} GPUs"],
                ["Jobs", _count(report.jobs)],
                ["Seed", str(report.seed)],
                ["Policy file", report.policy_file or "(none)"],
                ["Inputs", sources or "(not recorded)"],
                ["Faults", _faults(report.faults)],
                ["Preemption", _preemption(report)],
                [
                    "GPUs through DRA",
                    "yes: whole GPUs as ResourceSlice devices and claims" if report.dra else "no",
                ],
                ["Policies compared", ", ".join(report.policies) or "(none)"],
            ],
            numeric_from=2,
        ),
        "",
        "## Comparison",
        "",
        *_md_table(*comparison(report)),
        "",
        "![GPU allocation over time](allocation.png)",
        "",
        "![Pending gangs over time](pending.png)",
        "",
        "## Queue delay by gang size",
        "",
        "p50 / p95 / p99 from arrival until the whole gang runs, by the GPUs a gang asks for.",
        "",
        *_md_table(
            ["Gang size (GPUs)", *report.policies],
            [
                [
                    size,
                    *(
                        _delay_cell(r.queue_delay_seconds.get(size))
                        for r in report.policies.values()
                    ),
                ]
                for size in ("all", *SIZE_CLASSES)
            ],
        ),
        "",
        "![Wait-time CDF by gang size](wait-cdf.png)",
        "",
        "## Evictions by reason",
        "",
    ]
    reasons = sorted({reason for r in report.policies.values() for reason in r.evictions})
    if reasons:
        lines += _md_table(
            ["Reason", *report.policies],
            [
                [reason, *(_count(r.evictions.get(reason, 0)) for r in report.policies.values())]
                for reason in reasons
            ],
        )
    else:
        lines.append("No evictions under any policy.")
    lines += ["", "## Team shares", ""]
    teams = sorted({team for r in report.policies.values() for team in r.team_share})
    if teams:
        lines += [
            "Each team's share of the GPU hours allocated to fully placed gangs, against its "
            "entitlement (its nominal GPUs over the cohort's).",
            "",
        ]
        rows = []
        for team in teams:
            shares = [r.team_share.get(team) for r in report.policies.values()]
            entitlement = next((s.entitlement for s in shares if s is not None), None)
            cells = [
                _NONE if s is None else f"{percent(s.share)} ({gpu_hours(s.allocated_gpu_hours)})"
                for s in shares
            ]
            rows.append([team, percent(entitlement), *cells])
        lines += _md_table(["Team", "Entitlement", *report.policies], rows)
    else:
        lines.append("No team quotas in this scenario.")
    lines += ["", *_sharing(report)]
    section = reservation_section(report)
    if section:
        lines += ["", *section]
    lines += ["", "## How to read this", "", _HOW_TO_READ]
    return "\n".join(lines)


# -- the folder ------------------------------------------------------------------------


def write_report(report: SimulationReport, out_dir: Path) -> list[Path]:
    """Create ``out_dir`` and write report.json, report.md and the PNGs into it.

    Returns the paths written, in that order.  A folder that cannot be written is the
    user's mistake: :class:`~queue_controller.errors.InputError`.
    """
    from queue_controller.sim.report.plots import write_plots  # matplotlib: only when needed

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        json_path = out_dir / REPORT_JSON
        json_path.write_text(json.dumps(report_json(report), indent=2) + "\n")
        md_path = out_dir / REPORT_MD
        md_path.write_text(report_markdown(report))
        return [json_path, md_path, *write_plots(report, out_dir)]
    except OSError as error:
        raise InputError(
            f"cannot write the report: {error.strerror or error}", where=str(out_dir)
        ) from None
