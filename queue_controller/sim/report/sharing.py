"""The report's section on preemption, reclaim time and cohort shares."""

from __future__ import annotations

from queue_controller.sim.measurement.results import (
    Percentiles,
    PolicyResult,
    ReclaimWaits,
    SimulationReport,
)
from queue_controller.sim.report.markdown import NONE, count, duration, md_table

_MODES = {
    "as-configured": "as each TeamQuota's spec.preemption says",
    "off": "off for every TeamQuota",
    "on": "on for every TeamQuota (reclaimWithinCohort: Any, withinTeamQuota: LowerPriority "
    "where a quota sets none)",
    "compare": "each admitting policy run without it, and again as <policy>+preemption with "
    "it on for every TeamQuota (reclaimWithinCohort: Any, withinTeamQuota: LowerPriority)",
}


def preemption_line(report: SimulationReport) -> str:
    mode = _MODES.get(report.preemption, report.preemption)
    return f"{mode}; grace period {report.grace_period_seconds:g} s"


def reclaim_cell(p: Percentiles | None) -> str:
    if p is None:
        return NONE
    if p.count == 0:
        return "never blocked"
    return f"{duration(p.p50)} / {duration(p.p95)} ({count(p.count)} gangs)"


def sharing_section(report: SimulationReport) -> list[str]:
    """Reclaim time by lender, and each team's share of the cohort against its weight."""
    measured = {name: r for name, r in report.policies.items() if r.reclaim_seconds}
    lines = ["## Preemption, reclaim and cohort shares", ""]
    if not measured:
        return [*lines, "No policy with team quotas ran."]
    teams = sorted({t for r in measured.values() for t in (*r.reclaim_seconds, *r.shares)})
    lines += [
        "Reclaim time p50 / p95 by lender: how long a gang that fits within its team's nominal "
        "quota is refused because the cohort is using that nominal (or, having preempted, waits "
        "for its victims' pods to go), from the first admission cycle that finds it so until it "
        "is admitted.",
        "",
        *md_table(
            ["Lender", *measured],
            [
                [team, *(reclaim_cell(r.reclaim_seconds.get(team)) for r in measured.values())]
                for team in ["all", *(t for t in teams if t != "all")]
            ],
        ),
        "",
        "What those gangs waited for, from the first cycle that found them blocked until their "
        "admission, all lenders: p50 / p95 per gang, and the part of all that waiting.",
        "",
        *md_table(["Waiting for", *measured], _wait_rows(list(measured.values()))),
        "",
        "Each team's share of the cohort (what it borrows over what the cohort can lend, "
        "divided by its weight): mean over time / peak.",
        "",
    ]
    rows = []
    for team in (t for t in teams if t != "all"):
        shares = [r.shares.get(team) for r in measured.values()]
        weight = next((s.weight for s in shares if s is not None), None)
        cells = [NONE if s is None else f"{s.mean:.3f} / {s.peak:.3f}" for s in shares]
        rows.append([team, NONE if weight is None else f"{weight:g}", *cells])
    lines += md_table(["Team", "Weight", *measured], rows)
    lines += ["", "![Each team's cohort share over time](team-share.png)"]
    return lines + _queue_lines(measured)


def _queue_lines(measured: dict[str, PolicyResult]) -> list[str]:
    """Admission fair sharing: each Queue's part of its TeamQuota's decayed usage."""
    queues = sorted({q for r in measured.values() for q in r.queue_shares})
    if not queues:
        return []
    rows = []
    for queue in queues:
        shares = [r.queue_shares.get(queue) for r in measured.values()]
        target = next((s.weight for s in shares if s is not None), None)
        cells = [NONE if s is None else f"{s.mean:.3f} / {s.peak:.3f}" for s in shares]
        rows.append([queue, NONE if target is None else f"{target:.3f}", *cells])
    return [
        "",
        "Admission fair sharing: each Queue's part of its TeamQuota's decayed usage, against "
        "its weight's part (the target): mean over time / peak.",
        "",
        *md_table(["Queue", "Target", *measured], rows),
        "",
        "![Each Queue's part of its TeamQuota's usage over time](queue-share.png)",
    ]


_PARTS = (
    ("lent", "its nominal, lent out (the reclaim time)"),
    ("own", "its own team's gangs to free its nominal"),
    ("nodes", "nodes (the quota had room)"),
)


def _wait_rows(results: list[PolicyResult]) -> list[list[str]]:
    rows = [["admission (the whole wait)", *(_total(r.reclaim_waits) for r in results)]]
    for part, label in _PARTS:
        rows.append([label, *(_part(r.reclaim_waits, part) for r in results)])
    return rows


def _total(waits: ReclaimWaits | None) -> str:
    return NONE if waits is None else reclaim_cell(waits.total)


def _part(waits: ReclaimWaits | None, part: str) -> str:
    if waits is None or not waits.total.count:
        return NONE
    p = waits.parts[part]
    whole = sum(waits.hours.values())
    share = f"{waits.hours[part] / whole:.0%}" if whole > 0 else NONE
    return f"{duration(p.p50)} / {duration(p.p95)}, {share}"
