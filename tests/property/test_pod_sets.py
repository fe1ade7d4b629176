"""Gangs of several pod sets: whatever the cluster, an admission never over-commits a node,
places every member of every set, and a refused gang leaves no trace on the nodes."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core import PodSet, Verdict, Workload, schedule
from queue_controller.core.rules.requests import pod_request
from tests.builders import GPU, gpu_node, snapshot, template


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[int], list[Workload]]:
    node_gpus = draw(st.lists(st.sampled_from([0, 2, 4, 8]), min_size=1, max_size=6))
    gangs = []
    for g in range(draw(st.integers(1, 6))):
        sets = tuple(
            PodSet(f"set{i}", template(draw(st.sampled_from([0, 1, 2, 4, 8]))), n, n, "spec")
            for i, n in enumerate(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        )
        gangs.append(
            Workload(
                namespace="ns",
                name=f"g{g}",
                queue="q",
                pod_sets=sets,
                kind="Job",
                created=float(g),
            )
        )
    return node_gpus, gangs


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_multi_set_admissions_fit_the_nodes_and_place_every_member(
    case: tuple[list[int], list[Workload]],
) -> None:
    node_gpus, gangs = case
    nodes = [gpu_node(f"n{i}", g) for i, g in enumerate(node_gpus)]
    result = schedule(snapshot(nodes=nodes, workloads=gangs))
    by_name = {w.namespaced_name: w for w in gangs}
    used: Counter[str] = Counter()
    for decision in result.decisions:
        if decision.verdict is not Verdict.ADMIT:
            continue
        workload = by_name[decision.workload]
        plans = decision.pod_set_placement or {workload.pod_sets[0].name: decision.placement}
        for pod_set in workload.pod_sets:
            plan = plans[pod_set.name]
            assert sum(plan.values()) == pod_set.min_count
            per_pod = pod_request(pod_set.template).get(GPU, 0)
            for node, members in plan.items():
                used[node] += per_pod * members
        assert Counter(decision.placement) == sum((Counter(p) for p in plans.values()), Counter())
    for node, gpus in zip(nodes, node_gpus, strict=True):
        assert used[node.name] <= gpus * 1000


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_a_refused_gang_changes_nothing_for_the_gangs_after_it(
    case: tuple[list[int], list[Workload]],
) -> None:
    # A refused gang's tentatively placed pod sets are all given back, so moving the
    # refused gangs to the back of the queue changes nothing the others get.
    node_gpus, gangs = case
    nodes = [gpu_node(f"n{i}", g) for i, g in enumerate(node_gpus)]
    first = schedule(snapshot(nodes=nodes, workloads=gangs))
    refused = {d.workload for d in first.decisions if d.verdict is not Verdict.ADMIT}
    moved = [
        replace(w, created=1000.0 + w.created) if w.namespaced_name in refused else w for w in gangs
    ]
    again = schedule(snapshot(nodes=nodes, workloads=moved))
    admitted = {d.workload: dict(d.placement) for d in first.decisions if d.workload not in refused}
    assert {
        d.workload: dict(d.placement) for d in again.decisions if d.workload not in refused
    } == (admitted)
