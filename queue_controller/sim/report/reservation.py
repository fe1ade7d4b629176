"""The report's ``reservation`` block: gang-fit without and with reservation with backfill.

``off`` is the ``gang-fit`` run without reservation, ``on`` the one with it
(``gang-fit+reservation``); either is null where the run did not have it
(``simulate --reservation on`` runs only the second, ``compare`` both).  Where
preemption is compared too, the block sets the runs without preemption side by
side.  The figures are defined in :mod:`queue_controller.sim.measurement.reservation`.
"""

from __future__ import annotations

from collections.abc import Callable

from queue_controller.sim.measurement.results import (
    PolicyResult,
    ReservationFigures,
    SimulationReport,
)
from queue_controller.sim.report.markdown import NONE, count, duration, md_table, percent

GANG_FIT = "gang-fit"
WITH_RESERVATION = "gang-fit+reservation"
RESERVATION_WAITS_PNG = "reservation-waits.png"
ETA_GANGS = (
    "a sample of arriving gangs (every k-th arrival, eta_sampled_gangs of them): the start "
    "the forecast gave each on arrival against its admission, over those with a start that "
    "were admitted after a wait"
)
RESERVATION_START_GANGS = (
    "gangs reserved at least once and admitted after a wait: the start of each one's "
    "first reservation against its admission"
)


def runs(report: SimulationReport) -> tuple[PolicyResult | None, PolicyResult | None]:
    """The gang-fit runs without and with reservation, where the report has them."""
    if report.reservation == "off":
        return None, None
    off = report.policies.get(GANG_FIT)
    on = report.policies.get(WITH_RESERVATION)
    return off, on


def _side(result: PolicyResult | None, *, with_eta: bool) -> dict[str, object] | None:
    if result is None or result.reservation is None:
        return None
    figures = result.reservation
    out: dict[str, object] = {
        "large_gang_wait_p95_seconds": _round(figures.large_gang_wait_p95_seconds, 1),
        "large_gangs": figures.large_gangs,
        "large_gangs_never_started": figures.large_gangs_never_started,
        "gpu_allocation_saturated": _round(result.gpu_allocation_saturated, 4),
        "makespan_seconds": _round(figures.makespan_seconds, 1),
        "reservations": figures.reservations,
        "backfilled_gangs": figures.backfilled_gangs,
        "overruns": figures.overruns,
        "overrun_preemptions": figures.overrun_preemptions,
        "late_reservations": figures.late_reservations,
    }
    if with_eta:
        out["eta_median_relative_error"] = figures.eta_median_relative_error
        out["eta_gangs"] = figures.eta_gangs
        out["eta_median_relative_error_waited"] = figures.eta_median_relative_error_waited
        out["eta_first_cycle_gangs"] = figures.eta_first_cycle_gangs
        out["eta_sampled_gangs"] = figures.eta_sampled_gangs
        out["eta_unknown"] = figures.eta_unknown
        out["eta_unknown_reasons"] = figures.eta_unknown_reasons
        out["reservation_start_median_relative_error"] = (
            figures.reservation_start_median_relative_error
        )
        out["reservation_start_gangs"] = figures.reservation_start_gangs
    return out


def _round(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)


def _figures(report: SimulationReport) -> ReservationFigures | None:
    return next((r.reservation for r in runs(report) if r is not None and r.reservation), None)


def reservation_json(report: SimulationReport) -> dict[str, object] | None:
    """``report.json``'s ``reservation`` block; None where reservation was off."""
    off, on = runs(report)
    figures = _figures(report)
    if figures is None:
        return None
    return {
        "mode": report.reservation,
        "after_seconds": report.reservation_after_seconds,
        "estimate_noise": report.estimate_noise,
        "large_gang_min_gpus": figures.large_gang_min_gpus,
        "eta_gangs": ETA_GANGS,
        "reservation_start_gangs": RESERVATION_START_GANGS,
        "off": _side(off, with_eta=False),
        "on": _side(on, with_eta=True),
    }


def rows(report: SimulationReport) -> list[tuple[str, str, str]]:
    """(figure, without, with) for people: report.md and the terminal table."""
    off, on = runs(report)
    if _figures(report) is None:
        return []
    out: list[tuple[str, str, str]] = []

    def row(label: str, text: Callable[[PolicyResult, ReservationFigures], str]) -> None:
        cells = [
            NONE
            if result is None or result.reservation is None
            else text(result, result.reservation)
            for result in (off, on)
        ]
        out.append((label, cells[0], cells[1]))

    row("Large-gang wait p95", lambda r, f: duration(f.large_gang_wait_p95_seconds))
    row("GPU allocation, saturated window", lambda r, f: percent(r.gpu_allocation_saturated))
    row("Makespan", lambda r, f: duration(f.makespan_seconds))
    row("Reservations made", lambda r, f: count(f.reservations))
    row("Backfilled gangs", lambda r, f: count(f.backfilled_gangs))
    row("Overruns", lambda r, f: count(f.overruns))
    row(
        "ETA median relative error",
        lambda r, f: (
            NONE
            if not f.reserving or f.eta_median_relative_error is None
            else f"{f.eta_median_relative_error:.2f} ({count(f.eta_gangs)} of "
            f"{count(f.eta_sampled_gangs)} sampled gangs, {count(f.eta_unknown)} unknown)"
        ),
    )
    row(
        "ETA median relative error, past the first cycle",
        lambda r, f: (
            NONE
            if not f.reserving or f.eta_median_relative_error_waited is None
            else f"{f.eta_median_relative_error_waited:.2f} "
            f"({count(f.eta_gangs - f.eta_first_cycle_gangs)} gangs)"
        ),
    )
    row(
        "Reservation start median relative error",
        lambda r, f: (
            NONE
            if not f.reserving or f.reservation_start_median_relative_error is None
            else f"{f.reservation_start_median_relative_error:.2f} "
            f"({count(f.reservation_start_gangs)} gangs)"
        ),
    )
    return out


def reservation_section(report: SimulationReport) -> list[str]:
    """report.md's section on reservation; nothing where it was off."""
    table = rows(report)
    figures = _figures(report)
    if not table or figures is None:
        return []
    after = report.reservation_after_seconds
    return [
        "## Reservation with backfill",
        "",
        f"A Queue's head that waited `NoNodeFit` for {duration(after)} gets named nodes and a "
        "start; other gangs run there only if their estimated end comes before it. Runtime "
        f"estimates are the trace's durations with noise {report.estimate_noise:g} "
        "(`--estimate-noise`). Large gangs are the top 5% by GPUs asked: "
        f"{figures.large_gang_min_gpus:g} GPUs or more ({count(figures.large_gangs)} gangs).",
        "",
        *md_table(["", "gang-fit", "gang-fit+reservation"], [list(r) for r in table]),
        "",
        f"![Large-gang waits with and without reservation]({RESERVATION_WAITS_PNG})",
    ]
