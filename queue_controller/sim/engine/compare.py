"""The discrete-event engine: one workload, replayed under each admission policy.

Events are arrivals, admission cycles (ticks), pod binding, pods running,
completion, pods-ready timeouts, requeues coming due, node failures and
repairs, and pods outside any queue coming and going (:mod:`..world.events`).  Time
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
:mod:`~queue_controller.core.rules.requeue`.

Preemption (:mod:`.preempting`) is the TeamQuotas' ``preemption`` policy, as
configured, or switched off or on for every quota (``on`` gives each quota
without a policy Kueue's usual one), or both side by side: ``compare`` runs
each admitting policy without it and again as ``<policy>+preemption``.

Reservation with backfill (:mod:`.reserving`) is off, or on for every Queue
(each ``gang-fit`` run gets the same ``ReservationPolicy``), or both:
``compare`` runs each ``gang-fit`` run again as ``<run>+reservation``.  Only
gang-fit places gangs exactly, so only there is a gang refused ``NoNodeFit``
and reserved for; the other policies always run without it.

Topology placement (``--topology-placement``) sets every Topology's
``spec.placement``: best fit (the default), balanced, or both, ``compare``
running each ``gang-fit`` run again as ``<run>+balanced`` on the same workload.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, replace

from queue_controller.core import Preemption, ReclaimPolicy, ReservationPolicy, WithinPolicy
from queue_controller.core.model import TopologyPlacement
from queue_controller.sim.engine.reserving import DEFAULT_ETA_SAMPLES, with_reservation
from queue_controller.sim.engine.run import PolicyRun, Progress, Record
from queue_controller.sim.measurement.fluid import fluid_bound, saturated_allocation
from queue_controller.sim.measurement.results import PolicyResult, SimulationReport
from queue_controller.sim.scenario.gpus import capacity
from queue_controller.sim.scenario.policy import Policy
from queue_controller.sim.scenario.spec import Faults, Scenario
from queue_controller.sim.scenario.topologyspec import with_placement
from queue_controller.sim.world.faults import FaultPlan

POLICIES = ("gang-fit", "quota-only", "per-pod")
ADMITTING = ("gang-fit", "quota-only")  # the policies that run the core, quotas and all
PREEMPTION_MODES = ("as-configured", "off", "on", "compare")
WITH_PREEMPTION = "+preemption"
RESERVATION_MODES = ("off", "on", "compare")
# How the Topologies split a preferred gang (spec.placement); compare runs each gang-fit
# run with best fit and again as <run>+balanced.  Only gang-fit places by domain.
TOPOLOGY_PLACEMENT_MODES = ("best-fit", "balanced", "compare")
WITH_BALANCED = "+balanced"
WITH_RESERVATION = "+reservation"
# What `--preemption on` gives a TeamQuota that sets no preemption policy: Kueue's
# common choice, so that a lender takes its nominal back from any borrower, and a
# gang may evict its own team's lower-priority gangs.
KUEUE_LIKE = Preemption(
    reclaim_within_cohort=ReclaimPolicy.ANY, within_team_quota=WithinPolicy.LOWER_PRIORITY
)


def with_preemption(scenario: Scenario, on: bool) -> Scenario:
    """``scenario`` with preemption off for every TeamQuota, or on (a quota's own policy
    kept, :data:`KUEUE_LIKE` where it sets none)."""
    quotas = tuple(
        replace(
            quota,
            preemption=(quota.preemption if quota.preemption.enabled else KUEUE_LIKE)
            if on
            else Preemption(),
        )
        for quota in scenario.quotas
    )
    return replace(scenario, quotas=quotas)


def runs(
    scenario: Scenario,
    compare: Sequence[str],
    preemption: str,
    reservation: str = "off",
    reservation_policy: ReservationPolicy | None = None,
    topology_placement: str = "best-fit",
) -> list[tuple[str, Scenario]]:
    """(run name, the scenario it runs) for each policy in ``compare``, in that order."""
    if topology_placement not in TOPOLOGY_PLACEMENT_MODES:
        raise ValueError(
            f"unknown topology placement {topology_placement!r}; "
            f"choose from {TOPOLOGY_PLACEMENT_MODES}"
        )
    out = _reservation_runs(scenario, compare, preemption, reservation, reservation_policy)
    if topology_placement == "best-fit":
        return out
    placed: list[tuple[str, Scenario]] = []
    for name, variant in out:
        if name.split("+", 1)[0] != "gang-fit":
            placed.append((name, variant))
            continue
        if topology_placement == "compare":
            placed.append((name, variant))
        placed.append((name + WITH_BALANCED, with_placement(variant, TopologyPlacement.BALANCED)))
    return placed


def _reservation_runs(
    scenario: Scenario,
    compare: Sequence[str],
    preemption: str,
    reservation: str,
    reservation_policy: ReservationPolicy | None,
) -> list[tuple[str, Scenario]]:
    if reservation not in RESERVATION_MODES:
        raise ValueError(
            f"unknown reservation mode {reservation!r}; choose from {RESERVATION_MODES}"
        )
    if reservation != "off" and reservation_policy is None:
        raise ValueError(f"reservation {reservation!r} needs a reservation policy")
    out: list[tuple[str, Scenario]] = []
    for name, variant in _preemption_runs(scenario, compare, preemption):
        if name.split("+", 1)[0] != "gang-fit" or reservation == "off":
            out.append((name, with_reservation(variant, None)))
            continue
        if reservation == "compare":
            out.append((name, with_reservation(variant, None)))
        out.append((name + WITH_RESERVATION, with_reservation(variant, reservation_policy)))
    return out


def _preemption_runs(
    scenario: Scenario, compare: Sequence[str], preemption: str
) -> list[tuple[str, Scenario]]:
    if preemption not in PREEMPTION_MODES:
        raise ValueError(f"unknown preemption mode {preemption!r}; choose from {PREEMPTION_MODES}")
    out: list[tuple[str, Scenario]] = []
    for name in compare:
        if preemption == "compare" and name in ADMITTING:
            out.append((name, with_preemption(scenario, False)))
            out.append((name + WITH_PREEMPTION, with_preemption(scenario, True)))
        elif preemption in ("on", "off"):
            out.append((name, with_preemption(scenario, preemption == "on")))
        else:
            out.append((name, scenario))
    return out


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
    preemption: str = "as-configured",
    reservation: str = "off",
    reservation_policy: ReservationPolicy | None = None,
    estimate_noise: float = 0.0,
    eta_samples: int = DEFAULT_ETA_SAMPLES,
    topology_placement: str = "best-fit",
) -> SimulationReport:
    """Replay ``scenario`` under each policy in ``compare`` and measure them side by side."""
    unknown = [name for name in compare if name not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; choose from {POLICIES}")
    plan = FaultPlan.draw(scenario, faults, seed)
    total = sum(capacity(node) for node in scenario.nodes)
    bound = fluid_bound(scenario)
    results: dict[str, PolicyResult] = {}
    for name, variant in runs(
        scenario, compare, preemption, reservation, reservation_policy, topology_placement
    ):
        started = time.perf_counter()
        run = PolicyRun(
            name,
            variant,
            policy=policy,
            plan=plan,
            record=record,
            progress=progress,
            run_id=run_id,
            exhaustive=exhaustive,
            estimate_noise=estimate_noise,
            seed=seed,
            eta_samples=eta_samples,
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
        preemption=preemption,
        grace_period_seconds=policy.termination_grace_period_seconds,
        dra=scenario.dra is not None,
        reservation=reservation,
        reservation_after_seconds=None
        if reservation_policy is None or reservation == "off"
        else reservation_policy.after_seconds,
        estimate_noise=estimate_noise,
    )
