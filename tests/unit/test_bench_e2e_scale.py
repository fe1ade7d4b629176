"""tests/bench/e2e/scale.py's arithmetic: the filler pods and the measured window."""

from __future__ import annotations

from collections import Counter

from tests.bench.e2e.scale import PHASES, _window, fillers, table


def test_fillers_take_three_quarters_of_each_nodes_gpus_and_fill_the_rest_with_cpu_pods() -> None:
    nodes = [("a", 8), ("b", 8), ("c", 0)]
    pods = fillers(nodes, 30, ["team-a", "team-b"])
    assert len(pods) == 30
    gpus: Counter[str] = Counter()
    for pod in pods:
        requests = pod["spec"]["containers"][0]["resources"]["requests"]
        gpus[pod["spec"]["nodeName"]] += int(requests.get("nvidia.com/gpu", "0"))
    assert gpus == {"a": 6, "b": 6, "c": 0}
    assert len({p["metadata"]["name"] for p in pods}) == 30
    assert {p["metadata"]["namespace"] for p in pods} == {"team-a", "team-b"}


def test_fillers_stop_at_the_count_asked() -> None:
    assert len(fillers([("a", 8)] * 5, 7, ["t"])) == 7
    assert fillers([("a", 8)], 0, ["t"]) == []


def test_the_window_is_the_difference_of_two_readings() -> None:
    before = {"cycles": 10, "phase_seconds": dict.fromkeys(PHASES, 1.0)}
    after = {
        "cycles": 14,
        "phase_seconds": {"translate": 3.0, "core": 2.0, "plan": 1.4, "apply": 5.0},
    }
    window = _window(before, after)
    assert window["cycles"] == 4
    assert window["phase_mean_seconds"] == {
        "translate": 0.5,
        "core": 0.25,
        "plan": 0.1,
        "apply": 1.0,
    }
    assert _window(before, before)["phase_mean_seconds"] == dict.fromkeys(PHASES)


def test_the_table_gives_the_ratio_and_the_memory_against_their_targets() -> None:
    report = {
        "nodes": 2000,
        "pods": 20000,
        "gangs": 5000,
        "window_seconds": 60,
        "churned_pods": 300,
        "window": {"cycles": 40, "phase_mean_seconds": dict.fromkeys(PHASES, 0.1)},
        "cycle_mean_seconds": 0.4,
        "cycle_over_core": 4.0,
        "peak_rss_bytes": 700 * 2**20,
        "wall_seconds": 900,
        "fill_seconds": 200,
        "settle_seconds": 100,
    }
    text = table(report)
    assert "full cycle / core: 4.0x (target: at most 2x)" in text
    assert "700 MiB (target: under 1 GiB)" in text
