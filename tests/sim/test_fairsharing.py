"""Fair sharing in the simulator, on a cluster small enough to follow on paper.

One node of ``n`` GPUs (8 unless said); a lender's TeamQuota holds all of its
nominal and runs nothing, and two teams of nominal 0 borrow it all.  Team ``a``
submits ``2n`` one-GPU gangs at 0 s, team ``b`` as many at 50 s, each running
100 s.  The cycle at 10 s gives ``a`` the whole node.  At 110 s those end, and
the cycle then decides between ``a``'s ``n`` older gangs and ``b``'s ``2n``:

- without a Cohort object, in priority and age order: ``a`` again takes it all;
- with a Cohort enabling fair sharing, each turn goes to the team whose share
  would be lowest with its gang: equal weights split the node in half, weights
  2:1 in two thirds and one third.
"""

from __future__ import annotations

import bisect
from dataclasses import replace

import pytest

from queue_controller.core import Cohort, Queue, ResourceQuota, TeamQuota
from queue_controller.core.model import AdmissionFairSharing
from queue_controller.journal import Entry, JournalEvent
from queue_controller.sim.engine.compare import simulate
from queue_controller.sim.measurement.results import PolicyResult, ShareSeries
from queue_controller.sim.scenario.spec import Faults, Scenario, SimJob
from tests.sim.test_engine import GPU, INSTANT, node

COHORT = "pool"


def quota(name: str, nominal: int, weight: int = 1000) -> TeamQuota:
    return TeamQuota(
        name=name,
        resources={GPU: ResourceQuota(nominal=nominal * 1000)},
        cohort=COHORT,
        fair_weight=weight,
    )


def burst(team: str, *, at: float, count: int = 16, gpus: int = 1) -> tuple[SimJob, ...]:
    return tuple(
        SimJob(
            namespace=team,
            name=f"{team}-{i}",
            queue="q",
            arrival=at,
            pods=1,
            request={GPU: str(gpus), "cpu": "1"},
            duration=100,
        )
        for i in range(count)
    )


def two_borrowers(
    *, fair: bool, weights: tuple[int, int] = (1000, 1000), gpus: int = 8
) -> Scenario:
    """a's burst is twice the node: after its first gangs end, it still asks for all."""
    queues = tuple(Queue(namespace=t, name="q", team_quota=t) for t in ("a", "b"))
    return Scenario(
        name="fair",
        nodes=(node("n1", gpus),),
        queues=queues,
        quotas=(
            quota("lender", gpus),
            quota("a", 0, weights[0]),
            quota("b", 0, weights[1]),
        ),
        jobs=burst("a", at=0, count=2 * gpus) + burst("b", at=50, count=2 * gpus),
        cohorts=(Cohort(name=COHORT, fair_sharing=True),) if fair else (),
    )


def run(scene: Scenario, *, preemption: str = "off") -> PolicyResult:
    report = simulate(
        scene, policy=INSTANT, faults=Faults(), seed=1, compare=("gang-fit",), preemption=preemption
    )
    return report.policies["gang-fit"]


def at(series: ShareSeries, when: float) -> float:
    """The step function's value at ``when``."""
    return series.values[bisect.bisect_right(series.times, when) - 1]


def test_without_fair_sharing_the_early_team_keeps_the_cohort() -> None:
    shares = run(two_borrowers(fair=False)).shares
    # 8 GPUs borrowed of the 8 the cohort lends: share 1, from the first cycle to 200 s.
    assert at(shares["a"], 150) == 1.0
    assert at(shares["b"], 150) == 0.0
    assert at(shares["b"], 225) == 0.0  # b waits until a's 16 gangs are done


def test_with_fair_sharing_equal_weights_split_the_cohort() -> None:
    shares = run(two_borrowers(fair=True)).shares
    assert at(shares["a"], 50) == 1.0  # b has not arrived: a borrows it all
    # From the cycle after a's first gangs end, 4 GPUs each of the 8 lent.
    assert at(shares["a"], 150) == 0.5
    assert at(shares["b"], 150) == 0.5
    assert shares["a"].weight == shares["b"].weight == 1.0


def test_with_fair_sharing_weights_2_to_1_split_the_cohort_2_to_1() -> None:
    shares = run(two_borrowers(fair=True, weights=(2000, 1000), gpus=12)).shares
    assert (shares["a"].weight, shares["b"].weight) == (2.0, 1.0)
    # a borrows 8 of 12 (weighted: 8/12/2), b 4 of 12: equal weighted shares.
    assert at(shares["a"], 150) == pytest.approx(1 / 3, abs=1e-3)
    assert at(shares["b"], 150) == pytest.approx(1 / 3, abs=1e-3)


@pytest.mark.parametrize("preemption", ["off", "on"])
def test_pruned_and_exhaustive_runs_decide_alike_in_a_fair_cohort(preemption: str) -> None:
    """The pruned run must ask the core about every gang of a fair cohort: a refused
    borrower still shapes the cohort's turns.  Mixed gang sizes and a lender that
    takes its nominal back make the turns and (with preemption) the victims vary."""
    scene = two_borrowers(fair=True, weights=(2000, 1000), gpus=12)
    lender_queue = Queue(namespace="lender", name="q", team_quota="lender")
    scene = Scenario(
        name="fair-mixed",
        nodes=(node("n1", 8), node("n2", 4)),
        queues=(*scene.queues, lender_queue),
        quotas=scene.quotas,
        jobs=(
            *burst("a", at=0, count=6, gpus=2),
            *burst("a", at=20, count=8),
            *burst("b", at=50, count=5, gpus=3),
            *burst("b", at=60, count=8),
            *burst("lender", at=130, count=2, gpus=4),
        ),
        cohorts=scene.cohorts,
    )
    placed: dict[bool, list[tuple[str, str, float, dict[str, int]]]] = {}
    for exhaustive in (False, True):
        entries = placed[exhaustive] = []
        simulate(
            scene,
            policy=INSTANT,
            faults=Faults(),
            seed=1,
            compare=("gang-fit",),
            preemption=preemption,
            exhaustive=exhaustive,
            record=lambda e, out=entries: out.append(
                (e.event.value, e.name, e.at.timestamp(), dict(e.placement))
            ),
        )
    assert placed[False] == placed[True]
    admitted = {name for event, name, _, _ in placed[False] if event == "Admitted"}
    assert any(name.startswith("b-") for name in admitted)
    evicted = [event for event, _, _, _ in placed[False] if event == "Evicted"]
    assert bool(evicted) == (preemption == "on")  # with preemption, fair-sharing victims


def test_fair_sharing_at_every_level_of_a_cohort_tree() -> None:
    """org (fair) <- dept-x (a), dept-y (b, c); a lender of 12 directly under org.
    The departments split what is lent in half, then b and c split dept-y's half:
    by the teams' own shares alone each would get a third."""

    def member(name: str, cohort: str, nominal: int = 0) -> TeamQuota:
        return TeamQuota(
            name=name, resources={GPU: ResourceQuota(nominal=nominal * 1000)}, cohort=cohort
        )

    teams = ("a", "b", "c")
    scene = Scenario(
        name="tree",
        nodes=(node("n1", 12),),
        queues=tuple(Queue(namespace=t, name="q", team_quota=t) for t in teams),
        quotas=(
            member("lender", "org", 12),
            member("a", "dept-x"),
            member("b", "dept-y"),
            member("c", "dept-y"),
        ),
        jobs=burst("a", at=0, count=24) + burst("b", at=50, count=24) + burst("c", at=50, count=24),
        cohorts=(
            Cohort(name="org", fair_sharing=True),
            Cohort(name="dept-x", parent="org"),
            Cohort(name="dept-y", parent="org"),
        ),
    )
    shares = run(scene).shares
    assert at(shares["a"], 50) == 1.0  # alone, a borrows all 12 the tree lends it
    assert at(shares["a"], 150) == 0.5  # 6 of 12
    assert at(shares["b"], 150) == 0.25  # 3 of 12
    assert at(shares["c"], 150) == 0.25


def test_admission_fair_sharing_gives_two_queues_turns_by_their_decayed_usage() -> None:
    """One TeamQuota of 2 GPUs, two Queues: heavy submits 40 one-GPU gangs at 0 s, light 4
    at 1 s, each running 100 s.  By age alone light would wait for all of heavy's; by
    decayed usage light's gangs go at the first turns after they arrive, and over the
    run each Queue's part of the usage is pulled towards its weight's part."""
    policy = AdmissionFairSharing(usage_half_life_seconds=300, usage_sampling_interval_seconds=10)
    team = TeamQuota(
        name="team",
        resources={GPU: ResourceQuota(nominal=2000)},
        admission_fair_sharing=policy,
    )
    queues = (
        Queue(namespace="team", name="heavy", team_quota="team"),
        Queue(namespace="team", name="light", team_quota="team"),
    )

    def gangs(queue: str, count: int, at: float) -> tuple[SimJob, ...]:
        return tuple(
            SimJob(
                namespace="team",
                name=f"{queue}-{i}",
                queue=queue,
                arrival=at,
                pods=1,
                request={GPU: "1", "cpu": "1"},
                duration=100,
            )
            for i in range(count)
        )

    def order(scene: Scenario) -> list[str]:
        entries: list[Entry] = []
        simulate(
            scene,
            policy=INSTANT,
            faults=Faults(),
            seed=1,
            compare=("gang-fit",),
            record=entries.append,
        )
        admitted = sorted((e.at, e.name) for e in entries if e.event is JournalEvent.ADMITTED)
        return [name.split("-")[0] for _, name in admitted]

    scene = Scenario(
        name="afs",
        nodes=(node("n1", 2),),
        queues=queues,
        quotas=(team,),
        jobs=gangs("heavy", 40, 0) + gangs("light", 4, 1),
    )
    # Each turn of two GPUs goes to one gang of each Queue: light's four are done in
    # the first four turns, ahead of heavy's older gangs.
    assert order(scene)[:8] == ["heavy", "light"] * 4
    # By age alone, light waits for all forty of heavy's.
    plain = replace(scene, quotas=(replace(team, admission_fair_sharing=None),))
    assert order(plain).index("light") == 40
    shares = run(scene).queue_shares
    assert set(shares) == {"team/heavy", "team/light"}
    assert shares["team/light"].weight == shares["team/heavy"].weight == 0.5
    assert at(shares["team/light"], 150) > 0.3  # light's part of the usage, early on
