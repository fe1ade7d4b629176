"""The simulation report: report.json exactly, report.md, the PNGs, the terminal table."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import warnings
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from queue_controller.sim.measurement.results import (
    SIZE_CLASSES,
    Percentiles,
    PolicyResult,
    Preemptions,
    ReclaimWaits,
    Series,
    ShareSeries,
    SimulationReport,
    TeamShare,
    UpperBound,
)
from queue_controller.sim.report.plots import MAX_POINTS, downsample
from queue_controller.sim.report.render import (
    comparison,
    report_json,
    report_markdown,
    summary_table,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FILES = [
    "report.json",
    "report.md",
    "allocation.png",
    "pending.png",
    "wait-cdf.png",
    "team-share.png",
    "queue-share.png",
]


def _series(points: int = 6, *, level: float = 12.0, step: float = 600.0) -> Series:
    times = tuple(i * step for i in range(points))
    allocated = tuple(min(16.0, level + (i % 3) * 2) for i in range(points))
    return Series(
        times=times,
        allocated_gpus=allocated,
        held_gpus=tuple(a + 1 for a in allocated),
        pending_gangs=tuple(points - i for i in range(points)),
    )


def policy_result(
    name: str, *, allocation: float = 0.812345678, evictions: int = 2
) -> PolicyResult:
    return PolicyResult(
        policy=name,
        gpu_allocation=allocation,
        gpu_allocation_saturated=0.9345678 if name != "per-pod" else None,
        wasted_gpu_hours=12.3456,
        stranded_gpu_fraction=0.0123456,
        queue_delay_seconds={
            "all": Percentiles(count=5, p50=61.234, p95=1800.0, p99=7300.456),
            "1": Percentiles(count=3, p50=10.0, p95=20.0, p99=20.0),
            "2-8": Percentiles(count=2, p50=90.5, p95=7300.456, p99=7300.456),
            # "9-32" left out: nothing of that size ran
            "33+": Percentiles(count=0, p50=None, p95=None, p99=None),
        },
        jobs_submitted=6,
        jobs_started=5,
        jobs_completed=4,
        evictions={"PodsReadyTimeout": evictions, "NodeFailure": 1},
        deactivated_gangs=1,
        deadlocked_gangs=2 if name == "per-pod" else 0,
        team_share={
            "vision": TeamShare(allocated_gpu_hours=10.126, share=0.612345, entitlement=0.5),
            "nlp": TeamShare(allocated_gpu_hours=6.4, share=0.387655, entitlement=0.5),
        },
        cycles=360,
        simulated_seconds=3600.004,
        wall_seconds=0.4567,
        series=_series(),
        waits=(("1", 10.0), ("1", 20.0), ("1", 0.0), ("2-8", 90.5), ("2-8", 7300.456)),
        preemption=Preemptions(victims=3, preemptors=2, lost_gpu_hours=4.256)
        if name == "gang-fit"
        else Preemptions(),
        reclaim_seconds={}
        if name == "per-pod"
        else {
            "all": Percentiles(count=3, p50=30.0, p95=4000.0, p99=4000.0),
            "vision": Percentiles(count=3, p50=30.0, p95=4000.0, p99=4000.0),
        },
        reclaim_waits=None
        if name == "per-pod"
        else ReclaimWaits(
            total=Percentiles(count=3, p50=60.0, p95=7000.0, p99=7000.0),
            parts={
                "lent": Percentiles(count=3, p50=30.0, p95=4000.0, p99=4000.0),
                "own": Percentiles(count=3, p50=30.0, p95=3000.0, p99=3000.0),
                "nodes": Percentiles(count=3, p50=0.0, p95=0.0, p99=0.0),
            },
            hours={"lent": 1.25, "own": 0.85, "nodes": 0.0},
        ),
        shares={}
        if name == "per-pod"
        else {
            "nlp": ShareSeries(1.0, 0.12345, 0.5, (0.0, 600.0), (0.0, 0.5)),
            "vision": ShareSeries(1.0, 0.0, 0.0, (0.0,), (0.0,)),
        },
        queue_shares={}
        if name == "per-pod"
        else {"nlp/light": ShareSeries(0.5, 0.4, 0.75, (0.0, 600.0), (0.0, 0.75))},
    )


def sample_report(
    policies: Sequence[str] = ("gang-fit", "quota-only", "per-pod"),
) -> SimulationReport:
    allocation = {"gang-fit": 0.812345678, "quota-only": 0.64, "per-pod": 0.5}
    return SimulationReport(
        scenario="tiny",
        seed=7,
        policy_file="policies/default.yaml",
        capacity_gpus=16.0,
        nodes=2,
        jobs=6,
        sources={"cluster": "cluster.yaml", "queues": "queues.yaml", "workload": "trace.csv"},
        faults={"node_failures_per_hour": 0.5, "node_repair_seconds": 1800.0},
        policies={name: policy_result(name, allocation=allocation[name]) for name in policies},
        upper_bound=UpperBound(
            gpu_allocation=0.953333,
            gpu_allocation_saturated=1.0,
            saturated_seconds=1234.5678,
            series=_series(level=14.0),
        ),
    )


GANG_FIT_JSON: dict[str, Any] = {
    "gpu_allocation": 0.8123,
    "gpu_allocation_saturated": 0.9346,
    "wasted_gpu_hours": 12.35,
    "stranded_gpu_fraction": 0.0123,
    "queue_delay_seconds": {
        "all": {"count": 5, "p50": 61.23, "p95": 1800.0, "p99": 7300.46},
        "1": {"count": 3, "p50": 10.0, "p95": 20.0, "p99": 20.0},
        "2-8": {"count": 2, "p50": 90.5, "p95": 7300.46, "p99": 7300.46},
        "9-32": {"count": 0, "p50": None, "p95": None, "p99": None},
        "33+": {"count": 0, "p50": None, "p95": None, "p99": None},
    },
    "jobs_submitted": 6,
    "jobs_started": 5,
    "jobs_completed": 4,
    "evictions": {"NodeFailure": 1, "PodsReadyTimeout": 2},
    "deactivated_gangs": 1,
    "deadlocked_gangs": 0,
    "team_share": {
        "nlp": {"allocated_gpu_hours": 6.4, "share": 0.3877, "entitlement": 0.5},
        "vision": {"allocated_gpu_hours": 10.13, "share": 0.6123, "entitlement": 0.5},
    },
    "preemption": {"preemptions": 3, "preempting_gangs": 2, "lost_gpu_hours": 4.26},
    "reclaim_seconds": {
        "all": {"count": 3, "p50": 30.0, "p95": 4000.0, "p99": 4000.0},
        "vision": {"count": 3, "p50": 30.0, "p95": 4000.0, "p99": 4000.0},
    },
    "reclaim_breakdown": {
        "total": {"count": 3, "p50": 60.0, "p95": 7000.0, "p99": 7000.0},
        "lent": {"count": 3, "p50": 30.0, "p95": 4000.0, "p99": 4000.0, "hours": 1.25},
        "own": {"count": 3, "p50": 30.0, "p95": 3000.0, "p99": 3000.0, "hours": 0.85},
        "nodes": {"count": 3, "p50": 0.0, "p95": 0.0, "p99": 0.0, "hours": 0.0},
    },
    "cohort_share": {
        "nlp": {"weight": 1.0, "mean": 0.12345, "peak": 0.5},
        "vision": {"weight": 1.0, "mean": 0.0, "peak": 0.0},
    },
    "queue_share": {"nlp/light": {"target": 0.5, "mean": 0.4, "peak": 0.75}},
    "topology": None,  # no Queue uses a Topology
    "cycles": 360,
    "simulated_seconds": 3600.0,
    "wall_seconds": 0.46,
}


def test_report_json_is_exactly_the_issues_shape() -> None:
    payload = report_json(sample_report())
    assert list(payload) == [
        "scenario",
        "seed",
        "policyFile",
        "capacityGpus",
        "nodes",
        "jobs",
        "sources",
        "faults",
        "preemption",
        "terminationGracePeriodSeconds",
        "dra",
        "reservation",
        "policies",
        "upper_bound",
    ]
    assert payload["reservation"] is None  # simulate --reservation off
    assert (payload["preemption"], payload["terminationGracePeriodSeconds"]) == (
        "as-configured",
        30.0,
    )
    assert payload["scenario"] == "tiny"
    assert payload["seed"] == 7
    assert payload["policyFile"] == "policies/default.yaml"
    assert payload["capacityGpus"] == 16.0
    assert (payload["nodes"], payload["jobs"]) == (2, 6)
    assert payload["sources"] == {
        "cluster": "cluster.yaml",
        "queues": "queues.yaml",
        "workload": "trace.csv",
    }
    assert payload["faults"] == {"node_failures_per_hour": 0.5, "node_repair_seconds": 1800.0}
    policies = payload["policies"]
    assert isinstance(policies, dict)
    assert list(policies) == ["gang-fit", "quota-only", "per-pod"]
    assert policies["gang-fit"] == GANG_FIT_JSON
    assert list(policies["gang-fit"]["queue_delay_seconds"]) == ["all", *SIZE_CLASSES]
    per_pod = policies["per-pod"]
    assert per_pod["gpu_allocation"] == 0.5
    assert per_pod["gpu_allocation_saturated"] is None
    assert per_pod["deadlocked_gangs"] == 2
    assert payload["upper_bound"] == {
        "gpu_allocation": 0.9533,
        "gpu_allocation_saturated": 1.0,
        "saturated_seconds": 1234.57,
    }


def test_report_json_leaves_out_series_waits_and_absent_policies() -> None:
    report = replace(sample_report(("gang-fit", "per-pod")), upper_bound=None)
    payload = report_json(report)
    assert list(payload["policies"]) == ["gang-fit", "per-pod"]  # type: ignore[call-overload]
    assert payload["upper_bound"] is None
    text = json.dumps(payload)
    for large in ("series", "waits", "times", "allocated_gpus", "pending_gangs"):
        assert large not in text


def test_a_nan_is_written_as_null_not_as_invalid_json() -> None:
    report = sample_report(("gang-fit",))
    nan = replace(report.policies["gang-fit"], stranded_gpu_fraction=float("nan"))
    payload = report_json(replace(report, policies={"gang-fit": nan}))
    assert payload["policies"]["gang-fit"]["stranded_gpu_fraction"] is None  # type: ignore[index]
    json.loads(json.dumps(payload, allow_nan=False))


def test_write_report_writes_every_file(tmp_path: Path) -> None:
    import matplotlib.image

    out = tmp_path / "new" / "report"
    report = sample_report()
    written = write_report(report, out)
    assert [p.name for p in written] == FILES
    assert all(p.parent == out for p in written)
    assert json.loads((out / "report.json").read_text()) == report_json(report)
    for name in FILES[2:]:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC), name
        image = matplotlib.image.imread(out / name)
        assert image.shape[:2] == (500, 1000), name
    # Written again into the same folder: replaced, not refused.
    assert [p.name for p in write_report(report, out)] == FILES


def test_report_md_says_what_was_run_and_compares(tmp_path: Path) -> None:
    md = report_markdown(sample_report())
    assert md.startswith("# Simulation report: tiny\n")
    for row in (
        "| Scenario | tiny |",
        "| Nodes | 2 |",
        "| GPU capacity | 16 GPUs |",
        "| Jobs | 6 |",
        "| Seed | 7 |",
        "| Policy file | policies/default.yaml |",
        "| Inputs | cluster: cluster.yaml, queues: queues.yaml, workload: trace.csv |",
        "| Faults | node_failures_per_hour = 0.5, node_repair_seconds = 1800 |",
        "| Metric | gang-fit | quota-only | per-pod | upper bound |",
        "| GPU allocation | 81.2% | 64.0% | 50.0% | 95.3% |",
        "| GPU allocation, saturated window | 93.5% | 93.5% | — | 100.0% |",
        "| Saturated window | — | — | — | 20.6 min |",
        "| Wasted GPU hours | 12.3 GPU-h | 12.3 GPU-h | 12.3 GPU-h | — |",
        "| Stranded capacity | 1.2% | 1.2% | 1.2% | — |",
        "| Queue delay p50 | 1.0 min | 1.0 min | 1.0 min | — |",
        "| Queue delay p99 | 2.0 h | 2.0 h | 2.0 h | — |",
        "| Deadlocked gangs | 0 | 0 | 2 | — |",
        "| Gang size (GPUs) | gang-fit | quota-only | per-pod |",
        "| 1 | 10 s / 20 s / 20 s (3 gangs) | 10 s / 20 s / 20 s (3 gangs) "
        "| 10 s / 20 s / 20 s (3 gangs) |",
        "| 9-32 | no gangs | no gangs | no gangs |",
        "| Reason | gang-fit | quota-only | per-pod |",
        "| NodeFailure | 1 | 1 | 1 |",
        "| PodsReadyTimeout | 2 | 2 | 2 |",
        "| Team | Entitlement | gang-fit | quota-only | per-pod |",
        "| vision | 50.0% | 61.2% (10.1 GPU-h) | 61.2% (10.1 GPU-h) | 61.2% (10.1 GPU-h) |",
    ):
        assert row in md, row
    assert "| nlp/light | 0.500 | 0.400 / 0.750 | 0.400 / 0.750 |" in md
    images = ("(allocation.png)", "(pending.png)", "(wait-cdf.png)", "(team-share.png)")
    for image in (*images, "(queue-share.png)"):
        assert f"]{image}" in md
    assert "## How to read this" in md
    for term in ("GPU allocation", "Wasted GPU hours", "Stranded", "Deadlocked", "Upper bound"):
        assert f"**{term}" in md


def test_report_md_without_faults_evictions_teams_or_bound() -> None:
    report = sample_report(("gang-fit",))
    quiet = replace(report.policies["gang-fit"], evictions={}, team_share={})
    report = replace(
        report,
        faults={"node_failures_per_hour": 0.0, "node_repair_seconds": 1800.0},
        policies={"gang-fit": quiet},
        upper_bound=None,
        scenario="a|b",
    )
    md = report_markdown(report)
    assert "| Faults | none |" in md
    assert "No evictions under any policy." in md
    assert "No team quotas in this scenario." in md
    assert "| Metric | gang-fit |\n" in md
    assert "upper bound |" not in md
    assert "# Simulation report: a\\|b" in md


def test_empty_series_and_waits_still_plot(tmp_path: Path) -> None:
    import matplotlib.image

    empty = Series(times=(), allocated_gpus=(), held_gpus=(), pending_gangs=())
    report = sample_report(("gang-fit", "per-pod"))
    policies = {
        name: replace(result, series=empty, waits=()) for name, result in report.policies.items()
    }
    bound = UpperBound(0.0, None, 0.0, empty)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no artists with labels", no bad log scale
        for variant in (
            replace(report, policies=policies, upper_bound=bound),
            replace(report, policies={}, upper_bound=None, capacity_gpus=0.0),
        ):
            written = write_report(variant, tmp_path / "out")
            for path in written[2:]:
                assert matplotlib.image.imread(path).shape[:2] == (500, 1000)


def test_long_series_plot(tmp_path: Path) -> None:
    rng = random.Random(3)
    points = 50_000
    times = tuple(float(i * 2) for i in range(points))
    gpus = tuple(float(rng.randint(0, 16)) for _ in range(points))
    series = Series(times, gpus, gpus, tuple(rng.randint(0, 40) for _ in range(points)))
    report = sample_report(("gang-fit",))
    waits = tuple((rng.choice(SIZE_CLASSES), rng.expovariate(1 / 600)) for _ in range(20_000))
    result = replace(report.policies["gang-fit"], series=series, waits=waits)
    written = write_report(replace(report, policies={"gang-fit": result}), tmp_path)
    assert [p.name for p in written] == FILES


def test_unwritable_folder_is_an_input_error(tmp_path: Path) -> None:
    from queue_controller.errors import InputError

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot write the report") as caught:
        write_report(sample_report(), blocker)
    assert caught.value.where == str(blocker)


# -- downsampling ----------------------------------------------------------------------


def test_short_series_are_left_alone() -> None:
    assert downsample([0.0, 1.0, 2.0], [3.0, 1.0, 2.0]) == ([0.0, 1.0, 2.0], [3.0, 1.0, 2.0])
    assert downsample([], []) == ([], [])


def test_downsampling_keeps_the_ends_and_every_peak() -> None:
    rng = random.Random(11)
    points = 100_000
    times = sorted(rng.uniform(0, 86_400) for _ in range(points))
    values = [float(rng.randint(0, 100)) for _ in range(points)]
    values[1] = -5.0  # the first point is kept as it is, not as its slice's peak
    values[points // 3] = 1000.0  # a single spike must survive
    values[-1] = 7.0
    out_t, out_v = downsample(times, values)
    assert 2 < len(out_t) == len(out_v) <= MAX_POINTS
    assert (out_t[0], out_v[0]) == (times[0], values[0])
    assert (out_t[-1], out_v[-1]) == (times[-1], values[-1])
    assert max(out_v) == 1000.0
    assert out_t == sorted(out_t)
    assert set(out_t) <= set(times)
    # Each point is the largest value of the input points up to the next output point.
    index = {t: i for i, t in enumerate(times)}
    for k in range(1, len(out_t) - 2):
        start, stop = index[out_t[k]], index[out_t[k + 1]]
        assert out_v[k] == max(values[start:stop])


def test_downsampling_a_step_function_keeps_its_shape() -> None:
    # A staircase held flat for long stretches: thinning must not move its steps.
    times = [float(i) for i in range(10_000)]
    values = [float(i // 2500) for i in range(10_000)]
    out_t, out_v = downsample(times, values, max_points=100)
    assert len(out_t) <= 100
    for t, v in zip(out_t, out_v, strict=True):
        assert v in (values[int(t)], values[min(int(t) + 99, 9999)])
    assert sorted(set(out_v)) == [0.0, 1.0, 2.0, 3.0]


def test_downsampling_refuses_mismatched_input() -> None:
    with pytest.raises(ValueError, match="3 times but 2 values"):
        downsample([0.0, 1.0, 2.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least 3"):
        downsample([0.0], [1.0], max_points=2)


# -- the terminal ---------------------------------------------------------------------


def test_summary_table_has_a_column_per_policy_and_the_bound() -> None:
    console = Console(record=True, width=200)
    console.print(summary_table(sample_report()))
    text = console.export_text()
    header = text.splitlines()[0].split()
    assert header == ["METRIC", "GANG-FIT", "QUOTA-ONLY", "PER-POD", "UPPER", "BOUND"]
    rows = {line.split("  ")[0]: line.split() for line in text.splitlines()[1:]}
    assert rows["GPU allocation"][-4:] == ["81.2%", "64.0%", "50.0%", "95.3%"]
    assert rows["Queue delay p95"][-7:] == ["30.0", "min"] * 3 + ["—"]
    assert "Jobs completed" in rows
    assert rows["Deadlocked gangs"][-4:] == ["0", "0", "2", "—"]


def test_other_commands_do_not_import_matplotlib_or_the_engine() -> None:
    code = (
        "import sys, queue_controller.cli\n"
        "heavy = [m for m in ('matplotlib', 'numpy', 'queue_controller.sim.engine.compare',"
        " 'queue_controller.sim.report.render') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_report_shows_preemption_reclaim_and_shares() -> None:
    report = replace(sample_report(), preemption="compare", grace_period_seconds=45.0)
    _header, rows = comparison(report)
    by_label = {row[0]: row[1:] for row in rows}
    assert by_label["Preemptions"][:3] == ["3", "0", "0"]
    assert by_label["GPU hours lost to preemption"][0] == "4.3 GPU-h"
    assert by_label["Reclaim time p50"][:3] == ["30 s", "30 s", "—"]
    assert by_label["Reclaim time p95"][0] == "66.7 min"
    text = report_markdown(report)
    assert "<policy>+preemption" in text
    assert "grace period 45 s" in text
    assert "## Preemption, reclaim and cohort shares" in text
    assert "| vision | 30 s / 66.7 min (3 gangs) | 30 s / 66.7 min (3 gangs) |" in text
    assert "| nlp | 1 | 0.123 / 0.500 | 0.123 / 0.500 |" in text
    assert "(team-share.png)" in text
    assert "**Reclaim time**" in text
    assert "**Cohort share**" in text
