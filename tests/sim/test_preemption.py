"""Preemption in the simulator, on a cluster small enough to follow on paper.

One 8-GPU node; two teams of one cohort with 4 GPUs of nominal quota each.
The borrower's 2 x 4-GPU gang arrives first and takes all 8 GPUs, 4 of them the
lender's.  At 100 s the lender's 1 x 4-GPU gang arrives: it fits its own
nominal, which is lent out.  Every delay is zero and the cycle runs every 10 s
(see test_engine.py), so:

- with preemption, the cycle at 110 s finds the lender blocked and evicts the
  borrower whole; its pods keep the node for the 30 s grace period, until
  140 s, and the lender, holding its nominated room, is admitted at the next
  cycle, 150 s: a 40 s reclaim.  The borrower ran 8 GPUs x 100 s and held them
  30 s more: 1,040 GPU-seconds lost.  Requeued at once, it waits for quota and
  runs again from scratch once the lender is done (its 100 s end at 250 s; the
  borrower is admitted at 260 s);
- without it, the lender waits for the borrower to finish at 10,010 s and is
  admitted at the next cycle, 10,020 s: a 9,910 s reclaim.
"""

from __future__ import annotations

import dataclasses

from queue_controller.core import Node, Queue, ResourceQuota, TeamQuota
from queue_controller.sim.engine.compare import KUEUE_LIKE, simulate, with_preemption
from queue_controller.sim.engine.run import PolicyRun
from queue_controller.sim.measurement.results import Percentiles, PolicyResult
from queue_controller.sim.report.render import report_json
from queue_controller.sim.scenario.spec import Faults, Scenario, SimJob
from queue_controller.sim.world.faults import FaultPlan, NodeFailure
from tests.sim.test_engine import GPU, INSTANT, node

HOUR = 3600.0


def team(name: str) -> tuple[Queue, TeamQuota]:
    queue = Queue(namespace=name, name="q", team_quota=name, pods_ready_timeout_seconds=300)
    quota = TeamQuota(name=name, resources={GPU: ResourceQuota(nominal=4000)}, cohort="pool")
    return queue, quota


def gang(owner: str, *, arrival: float, pods: int, duration: float) -> SimJob:
    return SimJob(
        namespace=owner,
        name=f"{owner}-gang",
        queue="q",
        arrival=arrival,
        pods=pods,
        request={GPU: "4", "cpu": "1"},
        duration=duration,
    )


def lending(nodes: tuple[Node, ...] = ()) -> Scenario:
    (lq, lt), (bq, bt) = team("lender"), team("borrower")
    return Scenario(
        name="lending",
        nodes=nodes or (node("n1", 8),),
        queues=(lq, bq),
        quotas=(lt, bt),
        jobs=(
            gang("borrower", arrival=0, pods=2, duration=10_000),
            gang("lender", arrival=100, pods=1, duration=100),
        ),
    )


def run(preemption: str, *, grace: float = 30.0, scene: Scenario | None = None) -> PolicyResult:
    policy = INSTANT.model_copy(update={"termination_grace_period_seconds": grace})
    report = simulate(
        scene or lending(),
        policy=policy,
        faults=Faults(),
        seed=1,
        compare=("gang-fit",),
        preemption=preemption,
    )
    return report.policies["gang-fit"]


def waits(result: PolicyResult) -> list[float]:
    return sorted(round(wait, 3) for _, wait in result.waits)


def test_the_lender_gets_its_nominal_back_after_the_grace_period() -> None:
    result = run("on")
    assert result.evictions == {"Preempted": 1}
    assert result.preemption.victims == 1
    assert result.preemption.preemptors == 1
    # 8 GPUs x 100 s run, then 8 GPUs x 30 s terminating: thrown away.
    assert result.preemption.lost_gpu_hours == round(1040 / HOUR, 2)
    # The terminating pods hold their GPUs without any gang fully placed: waste.
    assert result.wasted_gpu_hours == round(240 / HOUR, 2)
    reclaim = result.reclaim_seconds
    assert set(reclaim) == {"all", "lender"}
    assert (reclaim["lender"].count, reclaim["lender"].p50) == (1, 40.0)
    # Lender: arrived 100, admitted 150.  Borrower: first placed at 10.
    assert waits(result) == [10.0, 50.0]
    assert result.jobs_completed == 2
    # The borrower restarts from scratch at 260 and runs its whole 10,000 s again.
    assert result.simulated_seconds == 260 + 10_000


def test_the_grace_period_holds_the_room_until_the_victims_pods_are_gone() -> None:
    result = run("on", grace=100.0)
    assert result.reclaim_seconds["lender"].p50 == 110.0  # pods gone at 210, admitted at 220
    assert waits(result) == [10.0, 120.0]
    assert result.preemption.lost_gpu_hours == round((800 + 800) / HOUR, 2)


def test_without_preemption_the_lender_waits_for_the_borrower_to_finish() -> None:
    for mode in ("off", "as-configured"):
        result = run(mode)
        assert result.evictions == {}
        assert result.preemption.victims == 0
        assert result.preemption.lost_gpu_hours == 0.0
        assert result.reclaim_seconds["lender"].p50 == 10_020 - 110
        assert waits(result) == [10.0, 10_020 - 100]


def test_the_cohort_share_follows_the_borrowing() -> None:
    # The borrower uses 8 of 4 nominal: 4 over a cohort that can lend 8, a share of 0.5,
    # from 10 s until its eviction at 110 s, and again from 250 s.
    result = run("on")
    share = result.shares["borrower"]
    assert share.weight == 1.0
    assert share.peak == 0.5
    assert share.times[:3] == (0.0, 10.0, 110.0)
    assert share.values[:3] == (0.0, 0.5, 0.0)
    assert result.shares["lender"].peak == 0.0  # never beyond its nominal


def test_compare_runs_both_and_names_the_preempting_run() -> None:
    report = simulate(
        lending(),
        policy=INSTANT,
        faults=Faults(),
        seed=1,
        compare=("gang-fit", "per-pod"),
        preemption="compare",
    )
    assert list(report.policies) == ["gang-fit", "gang-fit+preemption", "per-pod"]
    assert report.policies["gang-fit"].preemption.victims == 0
    assert report.policies["gang-fit+preemption"].preemption.victims == 1
    assert report.policies["per-pod"].reclaim_seconds == {}


def test_preemption_is_the_quotas_own_policy_unless_switched() -> None:
    scene = lending()
    on = with_preemption(scene, True)
    assert {q.preemption for q in on.quotas} == {KUEUE_LIKE}
    assert not any(q.preemption.enabled for q in with_preemption(on, False).quotas)
    # as-configured: a quota's own spec.preemption decides.
    configured = dataclasses.replace(
        scene,
        quotas=tuple(
            dataclasses.replace(q, preemption=KUEUE_LIKE if q.name == "lender" else q.preemption)
            for q in scene.quotas
        ),
    )
    assert run("as-configured", scene=configured).preemption.victims == 1


def test_a_node_failing_during_the_grace_period_takes_the_terminating_pods() -> None:
    # The borrower's gang spreads over two 4-GPU nodes; preempted at 110 with a
    # 1,000 s grace period.  n2 fails at 200: its terminating pods go with it.
    scene = with_preemption(lending((node("n1", 4), node("n2", 4))), True)
    plan = FaultPlan(
        seed=1,
        bind_failure_probability=0.0,
        bind_retry_seconds=60.0,
        node_failures=(NodeFailure(at=200.0, node="n2", repaired=300.0),),
        foreign_pods=(),
    )
    policy = INSTANT.model_copy(update={"termination_grace_period_seconds": 1000.0})
    run = PolicyRun("gang-fit", scene, policy=policy, plan=plan)
    run.run()
    result = run.result(wall_seconds=0.0)
    # 8 GPUs x 100 s run; then n2's 4 GPUs x 90 s and n1's 4 GPUs x 1,000 s terminating.
    assert result.preemption.lost_gpu_hours == round((800 + 360 + 4000) / HOUR, 2)
    assert result.jobs_completed == 2
    assert abs(run.meters.held) < 1e-9  # nothing is left holding GPUs
    assert not any(run.terminating.values())


def test_a_run_with_preemption_is_deterministic() -> None:
    first = report_json(
        simulate(lending(), policy=INSTANT, faults=Faults(), seed=1, preemption="compare")
    )
    again = report_json(
        simulate(lending(), policy=INSTANT, faults=Faults(), seed=1, preemption="compare")
    )
    for document in (first, again):
        for policy in document["policies"].values():  # type: ignore[attr-defined]
            policy.pop("wall_seconds")
    assert first == again


def own_team_behind() -> Scenario:
    """The lender's two 1 x 4-GPU gangs (a: 5,000 s, b: 100 s) arrive at 100 s, each
    within its 4 GPUs of nominal, which the borrower's y (1,000 s, after x, within the
    borrower's nominal) uses.  Only one of them fits that nominal."""

    def job(owner: str, name: str, arrival: float, duration: float) -> SimJob:
        request = {GPU: "4", "cpu": "1"}
        return SimJob(owner, name, "q", arrival, 1, request, duration)

    (lq, lt), (bq, bt) = team("lender"), team("borrower")
    return Scenario(
        name="own-team-behind",
        nodes=(node("n1", 8),),
        queues=(lq, bq),
        quotas=(lt, bt),
        jobs=(
            job("borrower", "x", 0, 10_000),
            job("borrower", "y", 5, 1_000),
            job("lender", "a", 100, 5_000),
            job("lender", "b", 100, 100),
        ),
    )


def test_the_reclaim_time_stops_when_the_nominal_is_back() -> None:
    # Without preemption: y ends at 1,010 s; the cycle at 1,020 s admits a, and b, now
    # beyond its team's nominal, waits for a (until 6,020 s): admitted at 6,030 s.
    # Both had their nominal lent out for 910 s; b then waited 5,010 s on its own team.
    result = run("off", scene=own_team_behind())
    assert result.reclaim_seconds["lender"] == Percentiles(2, 910.0, 910.0, 910.0)
    waits_ = result.reclaim_waits
    assert waits_ is not None
    assert waits_.total == Percentiles(2, 910.0, 5920.0, 5920.0)
    assert waits_.parts["lent"] == Percentiles(2, 910.0, 910.0, 910.0)
    assert waits_.parts["own"] == Percentiles(2, 0.0, 5010.0, 5010.0)
    assert waits_.parts["nodes"] == Percentiles(2, 0.0, 0.0, 0.0)
    # With it: a evicts y at 110 s and holds the lender's nominal; b, blocked at that
    # cycle too, then waits on a (admitted at 150 s, done at 5,150 s) from that cycle on.
    result = run("on", scene=own_team_behind())
    assert result.reclaim_seconds["lender"] == Percentiles(2, 0.0, 40.0, 40.0)
    waits_ = result.reclaim_waits
    assert waits_ is not None
    assert waits_.parts["own"] == Percentiles(2, 0.0, 5050.0, 5050.0)
