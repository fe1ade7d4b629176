"""Reservation with backfill, over random small workloads run by the simulator's engine:
with exact runtime estimates, no reserved gang starts later than its reserved start, and
no gang backfilled onto reserved nodes runs past it.

"Exact" is the trace's own duration, but the engine adds what a real cluster adds
between admission and work: each member binds after a ``bindDelaySeconds`` draw and
starts ``startDelaySeconds`` after that, and a gang's work starts when its last member
runs.  The core estimates a running gang's end as ``admitted_at + runtime``, so a gang
really ends up to ``bind.max + start.max`` later than estimated, and the room it frees
is seen at the next cycle, up to ``cycleSeconds`` later.  Hence the tolerances:

- a reserved gang is admitted by ``start + cycle + bind.max + start.max``;
- a backfill's estimated end is ``backfillMarginSeconds`` before the start, so it
  really ends by ``start - margin + bind.max + start.max``.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_controller.core import Decision, ReservationPolicy, ResourceQuota
from queue_controller.sim.engine.reserving import with_reservation
from queue_controller.sim.engine.run import PolicyRun
from queue_controller.sim.scenario.policy import Policy
from queue_controller.sim.scenario.spec import Faults, Scenario
from queue_controller.sim.world.faults import FaultPlan
from queue_controller.sim.world.runstate import JobState
from tests.sim.test_engine import GPU, job, node, scenario

POLICY = Policy.model_validate(
    {
        "name": "delays",
        "cycleSeconds": 10,
        "bindDelaySeconds": {"min": 1, "max": 10},
        "startDelaySeconds": {"min": 5, "max": 60},
    }
)
RESERVE = ReservationPolicy(after_seconds=30, backfill_margin_seconds=60)
DELAYS = POLICY.bind_delay_seconds.max + POLICY.start_delay_seconds.max
START_TOLERANCE = POLICY.cycle_seconds + DELAYS
BACKFILL_TOLERANCE = DELAYS - RESERVE.backfill_margin_seconds


class Watched(PolicyRun):
    """The engine, with what the property checks written down as it happens."""

    def __init__(self, scene: Scenario) -> None:
        super().__init__(
            "gang-fit+reservation", scene, policy=POLICY, plan=FaultPlan.draw(scene, Faults(), 1)
        )
        self.by_key = {state.key: state for state in self.jobs}
        self.late: list[str] = []
        # Backfilled gang -> (its attempt, the latest end its window allowed).
        self.promised: dict[str, tuple[int, float]] = {}
        self.overran: list[str] = []

    def _admit(self, job: JobState, decision: Decision) -> None:
        held = job.reservation
        if held is not None and self.now > held.start + START_TOLERANCE:
            self.late.append(f"{job.key} admitted at {self.now}, reserved from {held.start}")
        for over in decision.backfilled_over:
            reservation = self.by_key[over.split("/", 1)[1]].reservation
            assert reservation is not None, f"{job.key} backfilled over {over}, not reserved"
            latest = reservation.start + BACKFILL_TOLERANCE
            promised = self.promised.get(job.key, (0, latest))[1]
            self.promised[job.key] = (job.attempt, min(promised, latest))
        super()._admit(job, decision)

    def _finish(self, data: tuple[JobState, int]) -> None:
        job, attempt = data
        promise = self.promised.get(job.key)
        if promise is not None and promise[0] == attempt and self.now > promise[1]:
            self.overran.append(f"{job.key} ended at {self.now}, promised by {promise[1]}")
        super()._finish(data)


@st.composite
def workloads(draw: st.DrawFn) -> Scenario:
    nodes = [node(f"n{i}", 8) for i in range(draw(st.integers(2, 3)))]
    jobs = []
    for index in range(draw(st.integers(4, 14))):
        pods = draw(st.integers(1, len(nodes)))
        gpus = draw(st.sampled_from([2, 4, 8] if pods > 1 else [1, 2, 4, 8]))
        jobs.append(
            job(
                f"g{index:02d}",
                arrival=float(draw(st.integers(0, 600))),
                pods=pods,
                gpus=gpus,
                duration=float(draw(st.integers(20, 900))),
            )
        )
    scene = scenario(nodes, jobs)
    # Quota for more than the cluster: gangs wait for nodes, never for quota.
    quota = replace(scene.quotas[0], resources={GPU: ResourceQuota(nominal=1_000_000)})
    return with_reservation(replace(scene, quotas=(quota,)), RESERVE)


@settings(
    max_examples=60,
    deadline=2000,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(workloads())
def test_reserved_gangs_start_on_time_and_backfills_end_before(scene: Scenario) -> None:
    run = Watched(scene)
    run.run()
    assert run.completed == len(scene.jobs)
    assert not run.late, run.late
    assert not run.overran, run.overran
