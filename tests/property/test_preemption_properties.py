"""Preemption, over random clusters: a preemption always makes its gang fit, no victim
could have been spared, and the same input always gives the same victims."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core import BoundPod, Verdict, Workload, WorkloadPhase, schedule
from queue_controller.core.model.objects import Preemption, ReclaimPolicy, TeamQuota
from tests.builders import GPU, gang, gpu_node, gpus, queue, quota, running_pod, snapshot


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[object], list[Workload], list[BoundPod], Workload]:
    """Nodes full of a borrower's one-pod gangs, and a lender's gang that wants room."""
    node_count = draw(st.integers(1, 4))
    nodes = [gpu_node(f"n{i}", 8) for i in range(node_count)]
    running: list[Workload] = []
    pods: list[BoundPod] = []
    created = 0.0
    for node in nodes:
        left = 8
        while left > 0:
            size = draw(st.sampled_from([1, 2, 4, 8]))
            if size > left:
                break
            created += 1
            workload = gang(
                f"b{len(running)}",
                1,
                size,
                queue="more",
                phase=WorkloadPhase.ADMITTED,
                created=created,
                placement={node.name: 1},
            )
            running.append(workload)
            pods.append(
                running_pod(node.name, size, name=f"b{len(running)}-0", workload=workload.key)
            )
            left -= size
    preemptor = gang(
        "want",
        draw(st.integers(1, 2)),
        draw(st.sampled_from([1, 2, 4, 8])),
        queue="own",
        created=1000.0,
    )
    return nodes, running, pods, preemptor


def decide(
    nodes: list[object], running: list[Workload], pods: list[BoundPod], preemptor: Workload
) -> object:
    lender = TeamQuota(
        "lender", {GPU: gpus(64)}, "c", Preemption(reclaim_within_cohort=ReclaimPolicy.ANY)
    )
    result = schedule(
        snapshot(
            nodes=nodes,
            pods=pods,
            workloads=[*running, preemptor],
            quotas=[lender, quota("borrower", "c", gpu=gpus(0))],
            queues=[queue("own", "lender"), queue("more", "borrower")],
        )
    )
    return next(d for d in result.decisions if d.workload == "ns/want")


def without(
    victims: set[str], running: list[Workload], pods: list[BoundPod]
) -> tuple[list[Workload], list[BoundPod]]:
    kept = [
        w if w.key not in victims else replace(w, phase=WorkloadPhase.FINISHED) for w in running
    ]
    return kept, [p for p in pods if p.workload not in victims]


@settings(max_examples=120, deadline=None)
@given(clusters())
def test_a_preemption_makes_the_gang_fit_and_spares_every_victim_it_can(case: tuple) -> None:
    nodes, running, pods, preemptor = case
    decision = decide(nodes, running, pods, preemptor)
    if decision.verdict is not Verdict.PREEMPT:
        return
    victims = {key for key, _ in decision.victims}
    assert victims
    kept, left = without(victims, running, pods)
    assert decide(nodes, kept, left, preemptor).verdict is Verdict.ADMIT
    for spared in victims:
        kept, left = without(victims - {spared}, running, pods)
        assert decide(nodes, kept, left, preemptor).verdict is not Verdict.ADMIT, (
            f"{spared} need not have been evicted"
        )


@settings(max_examples=60, deadline=None)
@given(clusters())
def test_the_same_input_chooses_the_same_victims(case: tuple) -> None:
    nodes, running, pods, preemptor = case
    first = decide(nodes, running, pods, preemptor)
    again = decide(list(reversed(nodes)), list(reversed(running)), list(reversed(pods)), preemptor)
    assert (first.verdict, first.victims, dict(first.placement)) == (
        again.verdict,
        again.victims,
        dict(again.placement),
    )
