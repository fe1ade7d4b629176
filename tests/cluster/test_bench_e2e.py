"""`make bench-e2e` at its smallest, so that the harness cannot rot.

The harness starts its own local control plane in a state directory under tmp_path, on
free loopback ports, and takes it down at the end: it never touches the session cluster
of conftest.py (.cluster-test), which may be running beside it.  queue-controller only,
20 nodes, 40 short gangs from a Kueue generator config: every part runs (trace, cluster,
controller, watch streams, audit log, /proc, report, plots) in about two minutes.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.bench.e2e.__main__ import Progress, main
from tests.bench.e2e.report import REQUIRED

# A Kueue generator config in the repository: the default openb trace lives outside it
# (../shared/data/openb), and a clone elsewhere must still run this.
GENERATOR = Path(__file__).resolve().parents[1] / "bench" / "e2e" / "small-generator.yaml"

pytestmark = pytest.mark.cluster


def test_bench_e2e_replays_a_small_trace_through_queue_controller(tmp_path: Path) -> None:
    out = tmp_path / "report"
    path = main(
        [
            "--nodes=20",
            "--jobs=40",
            f"--trace={GENERATOR}",
            "--systems=queue-controller",
            f"--out={out}",
            "--timeout=240",
        ],
        progress=Progress(io.StringIO()),
    )
    report = json.loads(path.read_text())
    figures = report["systems"]["queue-controller"]
    assert set(REQUIRED) <= set(figures)
    assert figures["admitted"] > 0
    assert figures["completed"] == figures["submitted"] == 40, figures
    assert not figures["timed_out"]
    assert figures["partially_placed_gpu_seconds"] == 0
    assert figures["partially_placed_gangs"] == 0
    for key in ("admission_latency_seconds", "bound_latency_seconds"):
        p = figures[key]
        assert 0 <= p["p50"] <= p["p95"] <= p["p99"], (key, p)
    assert figures["throughput_gangs_per_second"] > 0
    assert 0 < figures["gpu_allocation_saturated"] <= 1
    assert figures["makespan_seconds"] > 0
    assert figures["evictions"] >= 0
    requests = figures["api_requests_per_admitted_gang"]
    assert requests["system"] > 0  # the controller's own requests, from the audit log
    assert requests["total"] >= requests["system"]
    assert figures["cpu_seconds"] > 0
    assert figures["peak_rss_bytes"] > 10 * 2**20
    for name in ("report.md", "allocation.png", "latency-cdf.png"):
        assert (out / name).stat().st_size > 0
    assert "queue-controller" in (out / "report.md").read_text()
    assert not (out / "clusters" / "queue-controller").exists()  # taken down


def test_the_scale_harness_times_every_phase_of_the_controllers_cycle(tmp_path: Path) -> None:
    """tests/bench/e2e/scale.py at its smallest: a filled cluster, pending gangs, the
    controller settled, its cycle's phases read over a short window."""
    from tests.bench.e2e import scale

    out = tmp_path / "scale"
    code = scale.main(
        [
            "--nodes=12",
            "--pods=120",
            "--gangs=30",
            "--window=8",
            "--quiet=3",
            "--churn=2",
            "--settle-timeout=120",
            f"--out={out}",
        ]
    )
    assert code == 0
    report = json.loads((out / "scale.json").read_text())
    assert report["pod_groups"] >= 30
    assert not report["objects_created_errors"]
    window = report["window"]
    assert window["cycles"] > 0
    for phase in scale.PHASES:
        assert window["phase_mean_seconds"][phase] is not None, phase
        assert window["phase_mean_seconds"][phase] >= 0, phase
    assert report["cycle_over_core"] > 1
    assert 1 <= report["planning_over_core"] <= report["cycle_over_core"]
    assert report["quiet_seconds"] >= 0
    assert window["writes"] >= 0
    assert report["churned_pods"] > 0
    assert report["peak_rss_bytes"] > 10 * 2**20
    assert "full cycle / core" in (out / "scale.md").read_text()
