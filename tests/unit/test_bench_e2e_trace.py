"""`make bench-e2e`'s trace: openb made into gangs, Kueue's generator YAML translated, and
the Jobs every system gets."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.bench.e2e.shape import GPU, ROOT, pool_sizes, shape
from tests.bench.e2e.trace import (
    EXPECTED_RUNTIME,
    KWOK_DELAY,
    OPENB_DIR,
    OUR_QUEUE_LABEL,
    Gang,
    Trace,
    TraceError,
    compress,
    default_teams,
    job_manifest,
    kueue_generator,
    kwok_delay,
    openb,
    repo_relative,
    spread_by_rank,
)

KUEUE_YAML = """
cohorts:
- className: cohort
  count: 2
  queuesSets:
  - className: cq
    count: 3
    nominalQuota: 20
    borrowingLimit: 100
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
    workloadsSets:
    - count: 2
      creationIntervalMs: 100
      workloads:
      - className: small
        runtimeMs: 200
        priority: 50
        request: 1
      - className: large
        runtimeMs: 1000
        priority: 100
        request: "4"
        podCount: 8
"""


def test_pool_sizes_keep_the_benchmark_mix_and_add_up() -> None:
    assert pool_sizes(1000) == {"a100-mig": 150, "l4": 50, "h100": 800, "gb200": 0}
    for nodes in (1, 2, 3, 20, 99, 200, 1234):
        assert sum(pool_sizes(nodes).values()) == nodes


def test_the_cluster_counts_mig_slices_as_their_compute_share() -> None:
    cluster = shape(20)
    assert cluster.capacity[GPU] == 16 * 8 + 1 * 16  # H100s and time-sliced L4s
    assert cluster.weights["nvidia.com/mig-3g.40gb"] == pytest.approx(3 / 7)
    # all-balanced: 2x 1g + 1x 2g + 1x 3g is one whole GPU, so 3 A100 nodes are 24 GPUs
    assert cluster.total_gpus == pytest.approx(144 + 24)


def test_teams_share_every_gpu_resource_evenly_in_one_cohort() -> None:
    cluster = shape(20)
    teams = default_teams(cluster)
    assert len(teams) == 4
    assert {t.cohort for t in teams} == {"gpu"}
    for resource, total in cluster.capacity.items():
        assert sum(t.nominal[resource] for t in teams) == total
    assert all(not t.borrowing_limit for t in teams)


def test_reports_name_inputs_relative_to_the_repository() -> None:
    assert repo_relative(OPENB_DIR) == "../shared/data/openb"
    assert repo_relative(ROOT / "tests" / "bench" / "e2e" / "small-generator.yaml") == (
        "tests/bench/e2e/small-generator.yaml"
    )
    assert repo_relative(ROOT) == "."


@pytest.mark.skipif(not OPENB_DIR.exists(), reason="the openb trace is not here")
def test_openb_gangs_fit_vary_and_saturate() -> None:
    cluster = shape(20)
    trace = openb(cluster, jobs=80, seed=3)
    assert len(trace.gangs) == 80
    assert len({g.name for g in trace.gangs}) == 80
    resources = {g.resource for g in trace.gangs}
    assert GPU in resources
    assert any(r.startswith("nvidia.com/mig-") for r in resources)
    for gang in trace.gangs:
        assert 1 <= gang.pods <= 32
        assert 20 <= gang.runtime_seconds <= 120
        # a quarter of the cluster at most: one team's nominal share holds it
        assert gang.pods * gang.per_pod <= max(cluster.capacity[gang.resource] // 4, gang.per_pod)
    assert len({g.runtime_seconds for g in trace.gangs}) > 10  # runtimes vary
    arrivals = [g.arrival_seconds for g in trace.gangs]
    assert arrivals == sorted(arrivals)
    assert arrivals[0] == 0
    # twice the cluster's GPU-seconds offered while gangs arrive: a backlog must build
    demand = sum(trace.gpus(g, cluster) * g.runtime_seconds for g in trace.gangs)
    assert demand / (cluster.total_gpus * arrivals[-1]) == pytest.approx(2.0, rel=0.01)
    assert openb(cluster, jobs=80, seed=3) == trace  # seeded
    assert trace.source == "openb (../shared/data/openb), seed 3"  # no machine path in reports
    assert openb(cluster, jobs=80, seed=4) != trace


@pytest.mark.skipif(not OPENB_DIR.exists(), reason="the openb trace is not here")
def test_openb_default_fills_the_cluster_twice() -> None:
    cluster = shape(20)
    trace = openb(cluster, jobs=None, seed=1)
    offered = sum(trace.gpus(g, cluster) for g in trace.gangs)
    assert 2 * cluster.total_gpus <= offered < 2 * cluster.total_gpus + 8 * 32


@given(st.lists(st.floats(0, 1e7), min_size=1, max_size=50), st.floats(1, 100))
def test_spread_by_rank_keeps_order_and_range(values: list[float], span: float) -> None:
    spread = spread_by_rank(values, 20, 20 + span)
    assert all(20 <= s <= round(20 + span) for s in spread)
    for i in range(len(values)):
        for j in range(len(values)):
            if values[i] < values[j]:
                assert spread[i] <= spread[j]


@given(st.lists(st.floats(0, 1e6), min_size=2, max_size=50), st.floats(1, 1000))
def test_compress_keeps_the_spacing_in_the_window(raw: list[float], window: float) -> None:
    raw = sorted(raw)
    out = compress(raw, window)
    assert out[0] == 0
    assert out == sorted(out)
    assert out[-1] == pytest.approx(window if raw[-1] > raw[0] else 0, abs=1e-3)


def test_kueue_generator_yaml_becomes_teams_and_gpu_gangs() -> None:
    trace = kueue_generator(yaml.safe_load(KUEUE_YAML))
    assert len(trace.teams) == 6  # 2 cohorts x 3 ClusterQueues
    team = trace.teams[0]
    assert team.name == team.namespace == "cq-0-0-cohort-0"  # as Kueue names them
    assert team.cohort == "cohort-0"
    assert team.nominal == {GPU: 20}
    assert team.borrowing_limit == {GPU: 100}
    assert len(trace.gangs) == 6 * 2 * 2
    mine = sorted(
        (g for g in trace.gangs if g.namespace == team.namespace), key=lambda g: g.arrival_seconds
    )
    assert [g.name for g in mine] == ["small-0-0-0", "large-0-0-1", "small-0-1-0", "large-0-1-1"]
    assert [g.arrival_seconds for g in mine] == [0.1, 0.2, 0.3, 0.4]
    large = mine[1]
    assert (large.pods, large.per_pod, large.resource, large.runtime_seconds) == (8, 4, GPU, 1.0)
    assert (mine[0].pods, mine[0].per_pod, mine[0].runtime_seconds) == (1, 1, 0.2)


def test_kueue_generator_yaml_without_cohorts_is_refused() -> None:
    with pytest.raises(TraceError, match="cohorts"):
        kueue_generator({"cohorts": []})
    with pytest.raises(TraceError, match="not a number"):
        kueue_generator(
            {"cohorts": [{"className": "c", "queuesSets": [
                {"className": "q", "nominalQuota": "lots"}]}]}
        )  # fmt: skip


def test_kwok_delay_is_a_go_duration() -> None:
    assert kwok_delay(30) == "30s"
    assert kwok_delay(0.2) == "200ms"
    assert kwok_delay(1.5) == "1500ms"


def test_every_system_gets_the_same_job_but_for_the_queue_label() -> None:
    gang = Gang("g1", "team-a", 4, "nvidia.com/mig-1g.10gb", 1, 42, 0)
    ours = job_manifest(gang, queue_label=OUR_QUEUE_LABEL)
    kueue = job_manifest(gang, queue_label="kueue.x-k8s.io/queue-name")
    bare = job_manifest(gang, queue_label=None)
    assert ours["metadata"]["labels"] == {OUR_QUEUE_LABEL: "training"}
    assert kueue["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "training"}
    assert bare["metadata"]["labels"] == {}
    assert ours["spec"]["suspend"]
    assert kueue["spec"]["suspend"]
    assert not bare["spec"]["suspend"]
    for job in (ours, kueue, bare):
        job["metadata"]["labels"] = {}
        job["spec"]["suspend"] = False
    assert ours == kueue == bare
    spec = ours["spec"]
    assert spec["parallelism"] == spec["completions"] == 4
    assert spec["template"]["metadata"]["annotations"] == {
        KWOK_DELAY: "42s",
        EXPECTED_RUNTIME: "42",
    }
    container = spec["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}


def test_the_makespan_lower_bound_is_the_largest_of_work_longest_and_last_end() -> None:
    cluster = shape(20)
    one = Gang("a", "ns", 2, GPU, 8, runtime_seconds=100.0, arrival_seconds=0.0)
    late = Gang("b", "ns", 1, GPU, 1, runtime_seconds=30.0, arrival_seconds=500.0)
    trace = Trace(gangs=(one, late), teams=(), source="test")
    bound = trace.makespan_lower_bound(cluster)
    work = (16 * 100.0 + 1 * 30.0) / cluster.total_gpus
    assert bound["gpu_seconds_over_gpus"] == round(work, 1)
    assert bound["longest_runtime"] == 100.0
    assert bound["latest_arrival_end"] == 530.0
    assert bound["seconds"] == 530.0
