"""The report's plots: GPU allocation, pending gangs and wait-time CDFs, as PNG files.

matplotlib is imported inside :func:`write_plots`, never at module level, so that no
other command pays for it; it draws with the Agg canvas only, never on a display.
Long series are thinned by :func:`downsample` first, keeping their step shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from queue_controller.sim.measurement.results import (
    SIZE_CLASSES,
    PolicyResult,
    ShareSeries,
    SimulationReport,
)
from queue_controller.sim.report.reservation import (
    RESERVATION_WAITS_PNG,
    reservation_json,
    runs,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ALLOCATION_PNG = "allocation.png"
PENDING_PNG = "pending.png"
WAIT_CDF_PNG = "wait-cdf.png"
TEAM_SHARE_PNG = "team-share.png"
QUEUE_SHARE_PNG = "queue-share.png"
PLOTS = (ALLOCATION_PNG, PENDING_PNG, WAIT_CDF_PNG, TEAM_SHARE_PNG)

MAX_POINTS = 2000  # per line
_WIDTH_IN, _HEIGHT_IN, _DPI = 10.0, 5.0, 100  # 1000 x 500 pixels
# One colour per policy in every plot; the upper bound is black and dashed.
COLOURS = {
    "gang-fit": "tab:blue",
    "quota-only": "tab:orange",
    "per-pod": "tab:green",
    "gang-fit+preemption": "tab:purple",
    "quota-only+preemption": "tab:red",
    "gang-fit+reservation": "tab:cyan",
}
_MIN_WAIT_MINUTES = 1.0 / 60.0  # a log axis cannot show 0: shorter waits sit at 1 s


def downsample(
    times: Sequence[float], values: Sequence[float], max_points: int = MAX_POINTS
) -> tuple[list[float], list[float]]:
    """At most ``max_points`` points of a step function (each value holds from its time
    until the next), drawn the same at plot resolution.

    The first and the last point are kept as they are; the points between fall into
    equal slices of time, and each non-empty slice becomes one point at its first
    time with the slice's largest value, so that no peak is lost.
    """
    if len(times) != len(values):
        raise ValueError(f"{len(times)} times but {len(values)} values")
    if max_points < 3:
        raise ValueError(f"max_points must be at least 3, not {max_points}")
    if len(times) <= max_points:
        return list(times), list(values)
    t = np.asarray(times, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    inner_t, inner_v = t[1:-1], v[1:-1]
    bins = max_points - 2
    edges = np.linspace(inner_t[0], inner_t[-1], bins + 1)[:-1]
    starts = np.unique(np.searchsorted(inner_t, edges, side="left"))
    starts = starts[starts < len(inner_t)]
    peaks = np.maximum.reduceat(inner_v, starts)
    out_t = [float(t[0]), *inner_t[starts].tolist(), float(t[-1])]
    out_v = [float(v[0]), *peaks.tolist(), float(v[-1])]
    return out_t, out_v


def write_plots(report: SimulationReport, out_dir: Path) -> list[Path]:
    """Write the PNGs into ``out_dir`` (which must exist); return their paths."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    written: list[Path] = []
    for name, draw in (
        (ALLOCATION_PNG, _allocation),
        (PENDING_PNG, _pending),
        (WAIT_CDF_PNG, _wait_cdf),
        (TEAM_SHARE_PNG, _team_share),
        (QUEUE_SHARE_PNG, _queue_share),
    ):
        figure = Figure(figsize=(_WIDTH_IN, _HEIGHT_IN), dpi=_DPI)
        FigureCanvasAgg(figure)
        # Fixed margins: a layout engine would cost a second drawing of every figure.
        figure.subplots_adjust(left=0.07, right=0.98, bottom=0.11, top=0.9, wspace=0.08)
        draw(figure, report)
        path = out_dir / name
        figure.savefig(path, dpi=_DPI, format="png")
        written.append(path)
    if reservation_json(report) is not None:
        figure = Figure(figsize=(_WIDTH_IN, _HEIGHT_IN), dpi=_DPI)
        FigureCanvasAgg(figure)
        figure.subplots_adjust(left=0.07, right=0.98, bottom=0.11, top=0.9)
        _reservation_waits(figure, report)
        path = out_dir / RESERVATION_WAITS_PNG
        figure.savefig(path, dpi=_DPI, format="png")
        written.append(path)
    return written


def _reservation_waits(figure: Figure, report: SimulationReport) -> None:
    """Large gangs' waits (CDF), gang-fit without and with reservation."""
    axes = figure.subplots()
    threshold = None
    for result in runs(report):
        figures = None if result is None else result.reservation
        if result is None or figures is None or not figures.large_waits:
            continue
        threshold = figures.large_gang_min_gpus
        xs, ys = _cdf([max(w / 60.0, _MIN_WAIT_MINUTES) for w in figures.large_waits])
        axes.step(xs, ys, where="post", label=result.policy, color=COLOURS.get(result.policy))
    if threshold is None:
        _empty(axes, "no large gangs")
        return
    axes.set_title(
        f"Wait of large gangs ({threshold:g} GPUs or more) until the whole gang runs (CDF)"
    )
    axes.set_xscale("log")
    axes.set_xlabel("wait (minutes)")
    axes.set_ylabel("fraction of large gangs")
    axes.set_ylim(0, 1.02)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")


def _cdf(ordered: Sequence[float], max_points: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """The empirical CDF of sorted values, thinned by rank to at most ``max_points``
    points (evenly spaced quantiles, the first and the last kept), which holds its shape
    on a log axis as well as on a linear one."""
    count = len(ordered)
    if count <= max_points:
        ranks = list(range(count))
    else:
        ranks = sorted({round(i * (count - 1) / (max_points - 1)) for i in range(max_points)})
    return [ordered[r] for r in ranks], [(r + 1) / count for r in ranks]


def _hours(times: Sequence[float]) -> list[float]:
    return [t / 3600.0 for t in times]


def _empty(axes: Axes, text: str) -> None:
    axes.text(0.5, 0.5, text, ha="center", va="center", transform=axes.transAxes, color="grey")


def _allocation(figure: Figure, report: SimulationReport) -> None:
    axes = figure.add_subplot()
    drawn = False
    for name, result in report.policies.items():
        series = result.series
        if not series.times:
            continue
        times, gpus = downsample(series.times, series.allocated_gpus)
        axes.step(_hours(times), gpus, where="post", label=name, color=COLOURS.get(name))
        drawn = True
    bound = report.upper_bound
    if bound is not None and bound.series.times:
        times, gpus = downsample(bound.series.times, bound.series.allocated_gpus)
        axes.step(
            _hours(times), gpus, where="post", label="upper bound", color="black", linestyle="--"
        )
        drawn = True
    if report.capacity_gpus > 0:
        axes.axhline(report.capacity_gpus, color="grey", linestyle=":", label="capacity")
    if not drawn:
        _empty(axes, "no samples")
    axes.set_title("GPUs allocated to fully placed gangs")
    axes.set_xlabel("simulated time (hours)")
    axes.set_ylabel("GPUs")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(loc="lower right")


def _pending(figure: Figure, report: SimulationReport) -> None:
    axes = figure.add_subplot()
    drawn = False
    for name, result in report.policies.items():
        series = result.series
        if not series.times:
            continue
        pending = [float(p) for p in series.pending_gangs]
        times, counts = downsample(series.times, pending)
        axes.step(_hours(times), counts, where="post", label=name, color=COLOURS.get(name))
        drawn = True
    if drawn:
        axes.legend(loc="upper right")
    else:
        _empty(axes, "no samples")
    axes.set_title("Gangs waiting to run")
    axes.set_xlabel("simulated time (hours)")
    axes.set_ylabel("pending gangs")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)


def _wait_cdf(figure: Figure, report: SimulationReport) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    # Minutes per size class and policy; waits under 1 s sit at 1 s (a log axis has no 0).
    minutes = {
        size: {
            name: sorted(max(w / 60.0, _MIN_WAIT_MINUTES) for c, w in result.waits if c == size)
            for name, result in report.policies.items()
        }
        for size in SIZE_CLASSES
    }
    every = [m for by_policy in minutes.values() for waits in by_policy.values() for m in waits]
    # One range for every subplot, in whole decades, so that the classes compare at a glance.
    low = 10.0 ** math.floor(math.log10(min(every))) if every else 0.1
    high = 10.0 ** math.ceil(math.log10(max(every))) if every else 10.0
    high = max(high, low * 10)
    grid = figure.subplots(1, len(SIZE_CLASSES), sharey=True, squeeze=False)
    figure.suptitle("Wait from arrival until the whole gang runs (CDF), by gang size in GPUs")
    figure.subplots_adjust(top=0.84, wspace=0.2)
    legend = True  # on the first subplot with lines only: the colours are the same in all
    for column, size in enumerate(SIZE_CLASSES):
        axes = grid[0][column]
        drawn = False
        for name, waits in minutes[size].items():
            if not waits:
                continue
            xs, ys = _cdf(waits)
            axes.step(
                [xs[0], *xs, high],
                [0.0, *ys, ys[-1]],
                where="post",
                label=name,
                color=COLOURS.get(name),
            )
            drawn = True
        axes.set_title(f"{size} GPU" if size == "1" else f"{size} GPUs")
        axes.set_xlabel("wait (minutes)")
        axes.set_ylim(0, 1.02)
        axes.grid(alpha=0.3)
        if drawn:
            axes.set_xscale("log")
            axes.set_xlim(low, high)
            axes.xaxis.set_major_locator(LogLocator(base=10, numticks=6))
            axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
            axes.xaxis.set_minor_formatter(NullFormatter())
            if legend:
                axes.legend(loc="lower right", fontsize="small")
                legend = False
        else:
            axes.set_xticks([])
            _empty(axes, "no gangs")
    grid[0][0].set_ylabel("fraction of gangs")


def _share_panels(
    figure: Figure,
    report: SimulationReport,
    series_of: Callable[[PolicyResult], Mapping[str, ShareSeries]],
    *,
    title: str,
    empty: str,
) -> list[tuple[Axes, str, float | None]]:
    """One subplot per team or Queue: its share over time, per policy run; each with its
    name and weight (None if no run measured it).  Empty: nothing to draw."""
    keys = sorted({key for r in report.policies.values() for key in series_of(r)})
    if not keys:
        _empty(figure.add_subplot(), empty)
        return []
    grid = figure.subplots(1, len(keys), sharey=True, squeeze=False)
    figure.suptitle(title)
    figure.subplots_adjust(top=0.84, wspace=0.1)
    panels = []
    for column, key in enumerate(keys):
        axes = grid[0][column]
        weight = None
        for name, result in report.policies.items():
            share = series_of(result).get(key)
            if share is None:
                continue
            weight = share.weight
            times, values = downsample(share.times, share.values)
            axes.step(_hours(times), values, where="post", label=name, color=COLOURS.get(name))
        axes.set_xlabel("simulated time (hours)")
        axes.grid(alpha=0.3)
        if column == 0 and axes.get_legend_handles_labels()[0]:
            axes.legend(loc="upper right", fontsize="small")
        panels.append((axes, key, weight))
    return panels


def _team_share(figure: Figure, report: SimulationReport) -> None:
    """One subplot per cohort member: its weighted share over time, per policy run."""
    panels = _share_panels(
        figure,
        report,
        lambda result: result.shares,
        title="Each team's share of its cohort (borrowed over lendable, over its weight)",
        empty="no cohort in this scenario",
    )
    for axes, team, weight in panels:
        axes.set_title(team if weight is None else f"{team} (weight {weight:g})")
    if panels:
        panels[0][0].set_ylabel("share")
        panels[0][0].set_ylim(bottom=0)


def _queue_share(figure: Figure, report: SimulationReport) -> None:
    """One subplot per admission-fair Queue: its part of its TeamQuota's usage over
    time, per policy run, with its target (its weight's part) drawn across."""
    panels = _share_panels(
        figure,
        report,
        lambda result: result.queue_shares,
        title="Each Queue's part of its TeamQuota's decayed usage (dashed: its target)",
        empty="no TeamQuota with admission fair sharing",
    )
    for axes, queue, target in panels:
        if target is not None:
            axes.axhline(target, linestyle="--", color="grey")
        axes.set_title(queue)
    if panels:
        panels[0][0].set_ylabel("part of usage")
        panels[0][0].set_ylim(0, 1)
