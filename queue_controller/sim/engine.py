"""The discrete-event engine: one workload, replayed under each admission policy.

Events are arrivals, admission cycles (ticks), pod binding, pods running,
completion, pods-ready timeouts, requeues coming due, node failures and
repairs, and pods outside any queue coming and going (:mod:`.events`).  Time
only moves from one event to the next and ties break on insertion order, so a
run is a pure function of its inputs and its seed.

The policies differ only in how gangs get onto nodes:

- ``gang-fit`` (ours): the real core decides admission over a snapshot, and an
  admitted gang's members bind exactly where the core planned them.
- ``quota-only``: the same core cycle, with a placer that never refuses, so
  admission checks the team quota alone (Kueue without topology-aware
  scheduling); kube-scheduler then places the members pod by pod.
- ``per-pod``: no admission at all; every pod goes to kube-scheduler as soon
  as its Job creates it, as with the default scheduler.

Eviction of a gang still partly placed at its timeout, its release, and its
requeue with backoff and a limit follow the controller, through the core's
:mod:`~queue_controller.core.requeue`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, replace

from queue_controller.sim.faults import FaultPlan
from queue_controller.sim.fluid import fluid_bound, saturated_allocation
from queue_controller.sim.gpus import capacity
from queue_controller.sim.policy import Policy
from queue_controller.sim.results import PolicyResult, SimulationReport
from queue_controller.sim.run import PolicyRun, Progress, Record
from queue_controller.sim.scenario import Faults, Scenario

POLICIES = ("gang-fit", "quota-only", "per-pod")


def simulate(
    scenario: Scenario,
    *,
    policy: Policy,
    faults: Faults,
    seed: int,
    compare: Sequence[str] = POLICIES,
    record: Record | None = None,
    progress: Progress | None = None,
    policy_file: str = "",
    run_id: str = "sim",
    exhaustive: bool = False,
) -> SimulationReport:
    """Replay ``scenario`` under each policy in ``compare`` and measure them side by side."""
    unknown = [name for name in compare if name not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; choose from {POLICIES}")
    plan = FaultPlan.draw(scenario, faults, seed)
    total = sum(capacity(node) for node in scenario.nodes)
    bound = fluid_bound(scenario)
    results: dict[str, PolicyResult] = {}
    for name in compare:
        started = time.perf_counter()
        run = PolicyRun(
            name,
            scenario,
            policy=policy,
            plan=plan,
            record=record,
            progress=progress,
            run_id=run_id,
            exhaustive=exhaustive,
        )
        run.run()
        result = run.result(wall_seconds=time.perf_counter() - started)
        results[name] = replace(
            result, gpu_allocation_saturated=saturated_allocation(bound, result.series, total)
        )
    return SimulationReport(
        scenario=scenario.name,
        seed=seed,
        policy_file=policy_file or policy.name,
        capacity_gpus=round(total, 3),
        nodes=len(scenario.nodes),
        jobs=len(scenario.jobs),
        sources=dict(scenario.sources),
        faults={key: float(value) for key, value in asdict(faults).items()},
        policies=results,
        upper_bound=bound,
    )
