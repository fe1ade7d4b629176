"""Sharing over many cycles, on random cohorts: quotas with random nominal, weights
and preemption policies, fair sharing on or off, gangs of two priorities.

Each cycle's decisions are applied as the controller would (an admitted gang's
members bind where it was planned; a victim's pods go at once and it is
requeued; a preemptor holds its nominated room), and after every cycle:

* no node runs more GPUs than it has, and no quota or cohort pool is overdrawn;
* a preemptor is admitted the next cycle, on exactly the nodes it held;
* no two gangs preempt each other back and forth, and the preempting stops;
* the same input always gives the same decisions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core import (
    BoundPod,
    Cohort,
    PriorityClass,
    Snapshot,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.model.objects import Preemption, ReclaimPolicy, TeamQuota, WithinPolicy
from tests.builders import GPU, gang, gpu_node, gpus, queue, running_pod, template

NODE_GPUS = 8
CYCLES = 10


@st.composite
def cohorts(draw: st.DrawFn, *, borrowing: bool = False) -> tuple[Snapshot, list[Workload]]:
    """A random cohort; ``borrowing``: fair sharing on, and the first team, which owns
    most of the cluster, runs nothing, so that the others compete for what it lends."""
    node_count = draw(st.integers(2, 4))
    capacity = node_count * NODE_GPUS
    teams = []
    left = capacity
    for i in range(draw(st.integers(2, 3))):
        # The first team owns most of the cluster, so the others borrow from it.
        low = capacity // 2 if i == 0 else 0
        nominal = draw(st.one_of(st.just(low), st.integers(low, left)))
        left -= nominal
        policy = Preemption(
            reclaim_within_cohort=draw(st.sampled_from(list(ReclaimPolicy))),
            within_team_quota=draw(
                st.sampled_from([WithinPolicy.NEVER, WithinPolicy.LOWER_PRIORITY])
            ),
        )
        weight = draw(st.sampled_from([0, 500, 1000, 2000]))
        teams.append(TeamQuota(f"t{i}", {GPU: gpus(nominal)}, "c", policy, fair_weight=weight))
    gangs = []
    for i in range(draw(st.integers(2, 10))):
        members = draw(st.integers(1, 2))
        size = draw(st.sampled_from([1, 2, 4, 8]))
        priority = draw(st.sampled_from(["", "high"]))
        gangs.append(
            gang(
                f"g{i}",
                members,
                size,
                queue=f"q{draw(st.integers(1 if borrowing else 0, len(teams) - 1))}",
                created=float(i),
                pod_template=template(size, priority_class=priority),
            )
        )
    snapshot = Snapshot(
        nodes=tuple(gpu_node(f"n{i}", NODE_GPUS) for i in range(node_count)),
        quotas=tuple(teams),
        queues=tuple(queue(f"q{i}", t.name) for i, t in enumerate(teams)),
        priority_classes=(PriorityClass("high", 100),),
        cohorts=(Cohort("c", fair_sharing=borrowing or draw(st.booleans())),),
    )
    # Half the gangs are there from the start, the rest arrive over the first cycles.
    return snapshot, gangs


@dataclass
class World:
    snapshot: Snapshot
    workloads: dict[str, Workload] = field(default_factory=dict)
    pods: dict[str, list[BoundPod]] = field(default_factory=dict)
    preemptions: set[tuple[str, str]] = field(default_factory=set)
    held: dict[str, dict[str, int]] = field(default_factory=dict)  # preemptor -> nodes

    def current(self, now: float) -> Snapshot:
        return replace(
            self.snapshot,
            workloads=tuple(self.workloads.values()),
            pods=tuple(p for pods in self.pods.values() for p in pods),
            now=now,
        )

    def apply(self, decisions: tuple) -> list[str]:  # type: ignore[type-arg]
        problems = []
        for decision in decisions:
            key = decision.key
            workload = self.workloads[key]
            if key in self.held and decision.verdict is not Verdict.ADMIT:
                problems.append(f"{key} held room but was not admitted: {decision.message}")
            if decision.verdict is Verdict.ADMIT:
                if key in self.held and dict(decision.placement) != self.held[key]:
                    problems.append(f"{key} admitted off its held room")
                self.held.pop(key, None)
                self.workloads[key] = replace(
                    workload,
                    phase=WorkloadPhase.ADMITTED,
                    placement=dict(decision.placement),
                    nominated={},
                )
                gpus_each = workload.pod_sets[0].template.containers[0].limits[GPU]
                self.pods[key] = [
                    running_pod(node, int(gpus_each), name=f"{key}-{node}-{i}", workload=key)
                    for node, count in decision.placement.items()
                    for i in range(count)
                ]
            elif decision.verdict is Verdict.PREEMPT:
                self.held[key] = dict(decision.placement)
                self.workloads[key] = replace(workload, nominated=decision.nominated)
                for victim, _ in decision.victims:
                    if (victim, key) in self.preemptions:
                        problems.append(f"{key} and {victim} preempt each other back and forth")
                    self.preemptions.add((key, victim))
                    self.workloads[victim] = replace(
                        self.workloads[victim], phase=WorkloadPhase.PENDING, placement={}
                    )
                    self.pods.pop(victim, None)
        return problems

    def overdrawn(self) -> list[str]:
        problems = []
        on_node: Counter[str] = Counter()
        for pods in self.pods.values():
            for pod in pods:
                on_node[pod.node_name] += pod.request[GPU]
        problems += [f"{n} runs {u} mGPU" for n, u in on_node.items() if u > NODE_GPUS * 1000]
        used: dict[str, int] = defaultdict(int)
        for key, workload in self.workloads.items():
            if workload.phase is WorkloadPhase.ADMITTED or key in self.held:
                team = next(q.team_quota for q in self.snapshot.queues if q.name == workload.queue)
                gpus_each = int(workload.pod_sets[0].template.containers[0].limits[GPU])
                used[team] += 1000 * gpus_each * workload.pod_count
        total = sum(q.resources[GPU].nominal for q in self.snapshot.quotas)
        if sum(used.values()) > total:
            problems.append(f"the cohort lends more than it has: {dict(used)}")
        return problems


def run(snapshot: Snapshot, gangs: list[Workload]) -> tuple[World, list[list[str]], list[str]]:
    world = World(snapshot)
    history, problems = [], []
    for cycle in range(CYCLES):
        for workload in gangs[: len(gangs) // 2 + cycle]:
            world.workloads.setdefault(workload.key, workload)
        result = schedule(world.current(now=1000.0 + cycle))
        history.append([f"{d.key} {d.verdict} {d.victims}" for d in result.decisions])
        problems += world.apply(result.decisions)
        problems += world.overdrawn()
    return world, history, problems


def holds_and_settles(snapshot: Snapshot, gangs: list[Workload]) -> None:
    _, history, problems = run(snapshot, gangs)
    assert problems == []
    # Every gang has arrived by the middle cycles; the last two preempt nothing.
    assert not any("Preempt" in line for cycle in history[-2:] for line in cycle), history


@settings(max_examples=150, deadline=None)
@given(cohorts())
def test_sharing_holds_every_invariant_and_settles(case: tuple[Snapshot, list[Workload]]) -> None:
    holds_and_settles(*case)


@settings(max_examples=150, deadline=None)
@given(cohorts(borrowing=True))
def test_fair_sharing_holds_every_invariant_and_settles(
    case: tuple[Snapshot, list[Workload]],
) -> None:
    holds_and_settles(*case)


@settings(max_examples=40, deadline=None)
@given(cohorts())
def test_the_same_input_gives_the_same_cycles(case: tuple[Snapshot, list[Workload]]) -> None:
    snapshot, gangs = case
    first = run(snapshot, gangs)[1]
    shuffled = replace(snapshot, quotas=snapshot.quotas[::-1], queues=snapshot.queues[::-1])
    assert run(shuffled, gangs)[1] == first
