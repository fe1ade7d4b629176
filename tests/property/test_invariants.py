"""Invariants of the admission cycle over random clusters, quotas and gangs.

Each example runs two cycles: the first admits from an empty cluster state,
its admissions become running gangs (some members bound, the rest planned),
and the second cycle admits more on top.  The referee replays both.
"""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_controller.core import (
    BoundPod,
    EquivalenceIndex,
    Ordering,
    PodByPodPlacer,
    Snapshot,
    Verdict,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.cycle.admission import PlacerFactory
from queue_controller.core.rules.requests import pod_request
from tests.property import strategies as gen
from tests.property.oracle import Referee

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Snapshot, Snapshot]:
    cluster = draw(gen.nodes())
    pods = draw(gen.bound_pods(cluster))
    team_quotas = draw(gen.quotas())
    orderings = draw(st.lists(st.sampled_from(list(Ordering)), min_size=1, max_size=3))
    queues = gen.queues_for(team_quotas, orderings)
    names = [q.name for q in queues]
    first = Snapshot(
        nodes=tuple(cluster),
        pods=tuple(pods),
        workloads=tuple(draw(gen.pending_gangs(names, "a"))),
        queues=tuple(queues),
        quotas=tuple(team_quotas),
        priority_classes=tuple(gen.PRIORITIES),
    )
    return first, _second_cycle(first, draw(gen.pending_gangs(names, "b")), draw(st.randoms()))


def _second_cycle(first: Snapshot, more: list, rng: random.Random) -> Snapshot:  # type: ignore[type-arg]
    """Admitted gangs of the first cycle become running, partly bound, gangs."""
    decisions = {d.key: d for d in schedule(first).decisions}
    workloads = []
    pods = list(first.pods)
    for w in first.workloads:
        decision = decisions[w.key]
        if decision.verdict is not Verdict.ADMIT:
            workloads.append(w)
            continue
        workloads.append(
            dataclasses.replace(w, phase=WorkloadPhase.ADMITTED, placement=decision.placement)
        )
        request = pod_request(w.pod_sets[0].template)
        for node, members in decision.placement.items():
            for i in range(rng.randint(0, members)):  # some members have been bound already
                pods.append(BoundPod("ns", f"{w.name}-{node}-{i}", node, request, workload=w.key))
    return dataclasses.replace(first, pods=tuple(pods), workloads=tuple(workloads + more))


def _check(snapshot: Snapshot, placer: PlacerFactory) -> None:
    result = schedule(snapshot, placer=placer)
    pending = [w for w in snapshot.workloads if w.phase is WorkloadPhase.PENDING]
    assert len(result.decisions) == len(pending)
    Referee(snapshot).replay(result.decisions)


@SETTINGS
@given(scenarios())
def test_every_admission_fits_quota_and_nodes_and_every_pending_is_justified(
    scenario: tuple[Snapshot, Snapshot],
) -> None:
    for snapshot in scenario:
        _check(snapshot, EquivalenceIndex)


@SETTINGS
@given(scenarios())
def test_the_naive_placer_obeys_the_same_invariants(scenario: tuple[Snapshot, Snapshot]) -> None:
    for snapshot in scenario:
        _check(snapshot, PodByPodPlacer)


@SETTINGS
@given(scenarios(), st.randoms())
def test_same_input_in_any_order_gives_the_same_output(
    scenario: tuple[Snapshot, Snapshot], rng: random.Random
) -> None:
    _, snapshot = scenario

    def shuffled(items: tuple) -> tuple:  # type: ignore[type-arg]
        out = list(items)
        rng.shuffle(out)
        return tuple(out)

    permuted = dataclasses.replace(
        snapshot,
        nodes=shuffled(snapshot.nodes),
        pods=shuffled(snapshot.pods),
        workloads=shuffled(snapshot.workloads),
        queues=shuffled(snapshot.queues),
        quotas=shuffled(snapshot.quotas),
    )
    assert schedule(snapshot) == schedule(snapshot)
    assert schedule(snapshot) == schedule(permuted)


@SETTINGS
@given(scenarios())
def test_fast_and_naive_placers_agree_on_whether_a_gang_fits(
    scenario: tuple[Snapshot, Snapshot],
) -> None:
    """Alone in the cycle, every gang gets the same verdict from both placers."""
    _, snapshot = scenario
    running = tuple(w for w in snapshot.workloads if w.phase is not WorkloadPhase.PENDING)
    for workload in snapshot.workloads:
        if workload.phase is not WorkloadPhase.PENDING:
            continue
        alone = dataclasses.replace(snapshot, workloads=(*running, workload))
        fast = schedule(alone, placer=EquivalenceIndex).decisions[0]
        slow = schedule(alone, placer=PodByPodPlacer).decisions[0]
        assert (fast.verdict, fast.reason) == (slow.verdict, slow.reason)
        if fast.verdict is Verdict.PENDING:
            assert fast.message == slow.message
