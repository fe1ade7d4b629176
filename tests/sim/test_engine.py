"""The event engine and its metrics on small scenarios whose figures are worked out by hand.

Every scenario runs with zero bind and start delays and a 10 s cycle, so each
timeline below can be followed on paper: ticks fall on multiples of 10 s, a
pod enqueued for kube-scheduler during a tick is placed at the next tick, and
a gang's pods-ready timeout runs from its admission.
"""

from __future__ import annotations

from queue_controller.core import Node, Queue, RequeuePolicy, ResourceQuota, TeamQuota
from queue_controller.sim.engine.compare import simulate
from queue_controller.sim.engine.run import PolicyRun
from queue_controller.sim.measurement.results import PolicyResult
from queue_controller.sim.scenario.policy import Policy
from queue_controller.sim.scenario.spec import Faults, Scenario, SimJob
from queue_controller.sim.world.faults import FaultPlan, NodeFailure

GPU = "nvidia.com/gpu"
HOSTNAME = "kubernetes.io/hostname"
INSTANT = Policy.model_validate(
    {
        "name": "instant",
        "cycleSeconds": 10,
        "bindDelaySeconds": {"min": 0, "max": 0},
        "startDelaySeconds": {"min": 0, "max": 0},
    }
)


def node(name: str, gpus: int) -> Node:
    return Node(
        name=name,
        allocatable={GPU: gpus * 1000, "cpu": 64_000, "memory": 2**40 * 1000, "pods": 110_000},
        labels={HOSTNAME: name},
        conditions={"Ready": "True"},
    )


def job(
    name: str, *, arrival: float, pods: int, gpus: int, duration: float, **extra: object
) -> SimJob:
    return SimJob(
        namespace="team",
        name=name,
        queue="q",
        arrival=arrival,
        pods=pods,
        request={GPU: str(gpus), "cpu": "1"},
        duration=duration,
        **extra,  # type: ignore[arg-type]
    )


def scenario(
    nodes: list[Node], jobs: list[SimJob], *, backoff_limit: int | None = None
) -> Scenario:
    queue = Queue(
        namespace="team",
        name="q",
        team_quota="team",
        pods_ready_timeout_seconds=100,
        requeue=RequeuePolicy(
            backoff_base_seconds=60, backoff_max_seconds=3600, backoff_limit=backoff_limit
        ),
    )
    quota = TeamQuota(name="team", resources={GPU: ResourceQuota(nominal=16_000)})
    return Scenario(
        name="hand", nodes=tuple(nodes), queues=(queue,), quotas=(quota,), jobs=tuple(jobs)
    )


def run_all(scene: Scenario, policy: Policy = INSTANT) -> dict[str, PolicyResult]:
    return simulate(scene, policy=policy, faults=Faults(), seed=1).policies


def waits(result: PolicyResult) -> list[float]:
    return [round(wait, 3) for _, wait in result.waits]


def test_one_gang_on_an_empty_node() -> None:
    # Arrives at 5.  gang-fit and per-pod place it at the tick at 10 and it runs
    # until 110: 4 GPUs x 100 s over 4 GPUs x 110 s.  quota-only admits at 10 and
    # kube-scheduler binds its pod at the next tick, 20; it runs until 120.
    results = run_all(
        scenario([node("n1", 4)], [job("a", arrival=5, pods=1, gpus=4, duration=100)])
    )
    for name in ("gang-fit", "per-pod"):
        assert waits(results[name]) == [5.0]
        assert results[name].gpu_allocation == round(400 / (4 * 110), 4)
        assert results[name].simulated_seconds == 110.0
    assert waits(results["quota-only"]) == [15.0]
    assert results["quota-only"].gpu_allocation == round(400 / (4 * 120), 4)
    for result in results.values():
        assert result.jobs_completed == 1
        assert result.wasted_gpu_hours == 0.0
        assert result.evictions == {}
        assert result.queue_delay_seconds["all"].count == 1


def fragmentation() -> Scenario:
    # n2 is half taken by a filler pinned to it until 1020 (bound at 10 or 20).
    # The gang wants 2 x 4 GPUs: n1 and all of n2.
    return scenario(
        [node("n1", 4), node("n2", 4)],
        [
            job("filler", arrival=0, pods=1, gpus=2, duration=1000, node_selector={HOSTNAME: "n2"}),
            job("gang", arrival=1, pods=2, gpus=4, duration=100),
        ],
    )


def test_fragmentation_gang_fit_waits_without_waste() -> None:
    result = run_all(fragmentation())["gang-fit"]
    # The filler binds at 10 and ends at 1010; the gang is admitted at the tick at
    # 1020, whole, and never held a GPU before that.
    assert waits(result) == [10.0, 1019.0]
    assert result.evictions == {}
    assert result.wasted_gpu_hours == 0.0
    assert result.simulated_seconds == 1120.0


def test_fragmentation_quota_only_is_evicted_with_backoff() -> None:
    result = run_all(fragmentation())["quota-only"]
    # Admitted at 10 on quota alone; at 20 one member binds to n1 and the other
    # fits nowhere.  Timeouts at 110, 280, 510 and 860 (admitted at 10, 180, 410,
    # 760: due 60, 120, 240 s after each eviction, plus the wait for the next
    # tick), each after 90 s of 4 GPUs held for nothing: 4 x 360 GPU-s.  The
    # filler ends at 1020, the fifth try is due at 1340, admitted at 1350 and
    # bound at 1360.
    assert result.evictions == {"PodsReadyTimeout": 4}
    assert result.wasted_gpu_hours == round(4 * 4 * 90 / 3600, 2)
    assert waits(result) == [20.0, 1359.0]
    assert result.jobs_completed == 2
    assert result.deactivated_gangs == 0


def test_fragmentation_per_pod_holds_half_a_gang() -> None:
    result = run_all(fragmentation())["per-pod"]
    # At 10 the filler takes n2 and one member takes n1; the other member binds
    # only when the filler ends at 1010, at the tick at 1020.
    assert waits(result) == [10.0, 1019.0]
    assert result.wasted_gpu_hours == round(4 * (1020 - 10) / 3600, 2)
    assert result.deadlocked_gangs == 0  # it moved again before an hour was up
    assert result.evictions == {}


def test_per_pod_counts_a_gang_stuck_for_the_deadlock_window() -> None:
    policy = INSTANT.model_copy(update={"deadlock_seconds": 500.0})
    result = run_all(fragmentation(), policy)["per-pod"]
    assert result.deadlocked_gangs == 1  # no progress from 10 to 510
    assert run_all(fragmentation(), policy)["gang-fit"].deadlocked_gangs == 0


def test_backoff_limit_deactivates_the_gang() -> None:
    scene = fragmentation()
    limited = scenario(list(scene.nodes), list(scene.jobs), backoff_limit=2)
    result = run_all(limited)["quota-only"]
    # Evicted at 110, 280 and 510; the third requeue is past the limit of 2.
    assert result.evictions == {"PodsReadyTimeout": 3}
    assert result.deactivated_gangs == 1
    assert result.jobs_completed == 1
    assert result.wasted_gpu_hours == round(3 * 4 * 90 / 3600, 2)


def test_a_failed_node_evicts_the_gang_and_it_comes_back_after_repair() -> None:
    scene = scenario([node("n1", 4)], [job("a", arrival=0, pods=1, gpus=4, duration=1000)])
    plan = FaultPlan(
        seed=1,
        bind_failure_probability=0.0,
        bind_retry_seconds=60.0,
        node_failures=(NodeFailure(at=50.0, node="n1", repaired=500.0),),
        foreign_pods=(),
    )
    run = PolicyRun("gang-fit", scene, policy=INSTANT, plan=plan)
    run.run()
    result = run.result(wall_seconds=0.0)
    # Bound at 10, lost at 50 (MembersLost), requeued; the node is NotReady until
    # 500, so the gang is admitted again at the tick at 510 and ends at 1510.
    assert result.evictions == {"MembersLost": 1}
    assert result.jobs_completed == 1
    assert result.simulated_seconds == 1510.0
    assert waits(result) == [10.0]
    assert run.meters.allocated_area == 4 * 40 + 4 * 1000


def test_bind_failures_retry_on_the_planned_node() -> None:
    scene = scenario(
        [node("n1", 4)], [job("a", arrival=0, pods=1, gpus=4, duration=100)], backoff_limit=1
    )
    always = FaultPlan(1, 1.0, 30.0, (), ())
    run = PolicyRun("gang-fit", scene, policy=INSTANT, plan=always)
    run.run()
    result = run.result(wall_seconds=0.0)
    # Every bind fails: retried every 30 s until the timeout at 110 evicts it;
    # admitted again at 180 (due at 170), evicted at 280 and, past a limit of one
    # requeue, deactivated.  Nothing was ever placed, so nothing was wasted.
    assert result.jobs_started == 0
    assert result.evictions == {"PodsReadyTimeout": 2}
    assert result.deactivated_gangs == 1
    assert result.wasted_gpu_hours == 0.0
    assert result.simulated_seconds == 280.0


def test_the_fluid_bound_shares_a_node_between_two_jobs() -> None:
    scene = scenario(
        [node("n1", 4)],
        [
            job("a", arrival=0, pods=1, gpus=4, duration=100),
            job("b", arrival=0, pods=1, gpus=4, duration=100),
        ],
    )
    bound = simulate(scene, policy=INSTANT, faults=Faults(), seed=1, compare=["gang-fit"])
    upper = bound.upper_bound
    assert upper is not None
    # Both share the 4 GPUs at half speed and finish at 200: full all along.
    assert upper.gpu_allocation == 1.0
    assert upper.saturated_seconds == 200.0
    assert upper.gpu_allocation_saturated == 1.0
    # gang-fit runs a from 10 to 110 and b, admitted at the next tick, from 120 to
    # 220: 100 + 80 of the window's 200 s with all 4 GPUs allocated.
    assert bound.policies["gang-fit"].gpu_allocation_saturated == round(180 / 200, 4)


def test_a_half_empty_cluster_is_never_saturated() -> None:
    scene = scenario([node("n1", 4)], [job("a", arrival=0, pods=1, gpus=2, duration=100)])
    report = simulate(scene, policy=INSTANT, faults=Faults(), seed=1, compare=["gang-fit"])
    assert report.upper_bound is not None
    assert report.upper_bound.gpu_allocation == 0.5
    assert report.upper_bound.gpu_allocation_saturated is None
    assert report.policies["gang-fit"].gpu_allocation_saturated is None
