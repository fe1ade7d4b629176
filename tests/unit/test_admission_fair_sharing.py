"""Admission fair sharing in the core: the decay arithmetic and the order it gives a
TeamQuota's Queues (core/quota/admissionfair.py, used by the cycle)."""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from queue_controller.core import PriorityClass, Verdict, WorkloadPhase, schedule
from queue_controller.core.model.objects import AdmissionFairSharing, Queue, Workload
from queue_controller.core.quota.admissionfair import (
    QueueUsage,
    alpha,
    decayed,
    entry_penalty,
    weighed,
)
from tests.builders import GPU, gang, gpu_node, gpus, quota, snapshot, template

AFS = AdmissionFairSharing(usage_half_life_seconds=600, usage_sampling_interval_seconds=60)
NOW = 1_000_000.0

amounts = st.floats(min_value=0, max_value=1e9, allow_nan=False)
seconds = st.floats(min_value=0, max_value=1e7, allow_nan=False)
half_lives = st.floats(min_value=1, max_value=1e6, allow_nan=False)


# -- the decay ---------------------------------------------------------------------------------


@given(previous=amounts, half_life=half_lives)
def test_with_no_usage_the_consumed_halves_after_one_half_life(
    previous: float, half_life: float
) -> None:
    after = decayed(previous={GPU: previous}, current={}, elapsed=half_life, half_life=half_life)
    assert math.isclose(after[GPU], previous / 2, rel_tol=1e-9, abs_tol=1e-9)


@given(previous=amounts, current=amounts, half_life=half_lives, a=seconds, b=seconds)
def test_the_decay_is_monotone_in_time_and_stays_between_past_and_present(
    previous: float, current: float, half_life: float, a: float, b: float
) -> None:
    early, late = sorted((a, b))

    def at(elapsed: float) -> float:
        return decayed(
            previous={GPU: previous}, current={GPU: current}, elapsed=elapsed, half_life=half_life
        )[GPU]

    low, high = min(previous, current), max(previous, current)
    slack = 1e-9 * max(high, 1)
    assert low - slack <= at(early) <= high + slack
    # Ever closer to the current usage, never past it.
    assert abs(at(late) - current) <= abs(at(early) - current) + slack


@given(previous=amounts, current=amounts, half_life=half_lives)
def test_the_decay_converges_to_the_current_usage(
    previous: float, current: float, half_life: float
) -> None:
    after = decayed(
        previous={GPU: previous},
        current={GPU: current},
        elapsed=200 * half_life,
        half_life=half_life,
    )
    assert math.isclose(after[GPU], current, rel_tol=1e-9, abs_tol=1e-6)


def test_the_decay_is_kueues_alpha_one_resource_at_a_time() -> None:
    # alpha = 1 - 0.5 ** (elapsed / halfLife): one interval of a tenth of the half-life.
    step = alpha(elapsed=60, half_life=600)
    assert math.isclose(step, 1 - 0.5**0.1)
    after = decayed(
        previous={GPU: 8000, "cpu": 1000}, current={GPU: 2000}, elapsed=60, half_life=600
    )
    assert math.isclose(after[GPU], 8000 * (1 - step) + 2000 * step)
    assert math.isclose(after["cpu"], 1000 * (1 - step))
    assert alpha(elapsed=0, half_life=600) == 0.0


def test_the_entry_penalty_is_one_sampling_intervals_worth_of_the_request() -> None:
    penalty = entry_penalty(need={GPU: 4000}, policy=AFS)
    assert math.isclose(penalty[GPU], 4000 * alpha(elapsed=60, half_life=600))


def test_resources_are_weighed_in_their_units_and_divided_by_the_queue_weight() -> None:
    consumed = {GPU: 2000.0, "cpu": 4000.0}
    assert weighed(consumed=consumed, resource_weights={}, weight=1000) == 6.0
    assert weighed(consumed=consumed, resource_weights={"cpu": 0}, weight=1000) == 2.0
    assert weighed(consumed=consumed, resource_weights={"cpu": 0}, weight=2000) == 1.0
    assert weighed(consumed={}, resource_weights={}, weight=0) == math.inf


# -- the order ---------------------------------------------------------------------------------


def fair_queue(name: str, consumed: float = 0.0, weight: int = 1000) -> Queue:
    return Queue(
        namespace="ns",
        name=name,
        team_quota="team",
        fair_weight=weight,
        consumed={GPU: consumed * 1000},
        consumed_at=NOW - 10,
    )


def admitted_order(*workloads: Workload, queues: tuple[Queue, ...], room: int = 1) -> list[str]:
    """The gangs admitted, in the order the cycle decided them, with ``room`` GPUs."""
    team = replace(quota(gpu=gpus(100)), admission_fair_sharing=AFS)
    result = schedule(
        snapshot(
            nodes=(gpu_node("n1", room),),
            quotas=(team,),
            queues=queues,
            workloads=workloads,
            priority_classes=(PriorityClass("high", 100),),
            now=NOW,
        )
    )
    return [d.workload for d in result.decisions if d.verdict is Verdict.ADMIT]


def test_the_queue_with_less_usage_goes_first_though_its_gang_is_newer() -> None:
    queues = (fair_queue("heavy", consumed=10), fair_queue("light", consumed=1))
    order = admitted_order(
        gang("old", queue="heavy", created=1), gang("new", queue="light", created=2), queues=queues
    )
    assert order == ["ns/new"]


def test_without_admission_fair_sharing_the_older_gang_goes_first() -> None:
    queues = (fair_queue("heavy", consumed=10), fair_queue("light", consumed=1))
    result = schedule(
        snapshot(
            nodes=(gpu_node("n1", 1),),
            quotas=(quota(gpu=gpus(100)),),
            queues=queues,
            workloads=(
                gang("old", queue="heavy", created=1),
                gang("new", queue="light", created=2),
            ),
            now=NOW,
        )
    )
    assert [d.workload for d in result.decisions if d.verdict is Verdict.ADMIT] == ["ns/old"]


def test_priority_goes_before_usage() -> None:
    queues = (fair_queue("heavy", consumed=10), fair_queue("light", consumed=1))
    urgent = gang("urgent", queue="heavy", created=3, pod_template=template(priority_class="high"))
    order = admitted_order(urgent, gang("new", queue="light", created=2), queues=queues)
    assert order == ["ns/urgent"]


def test_the_weight_divides_the_usage() -> None:
    # 10 used with weight 4 is 2.5 per weight: ahead of 3 used with weight 1.
    queues = (fair_queue("big", consumed=10, weight=4000), fair_queue("small", consumed=3))
    order = admitted_order(
        gang("b", queue="big", created=2), gang("s", queue="small", created=1), queues=queues
    )
    assert order == ["ns/b"]


def test_a_queue_of_weight_zero_goes_behind_every_other() -> None:
    queues = (fair_queue("zero", consumed=0, weight=0), fair_queue("busy", consumed=50))
    order = admitted_order(
        gang("z", queue="zero", created=1), gang("b", queue="busy", created=2), queues=queues
    )
    assert order == ["ns/b"]


def test_within_one_cycle_the_queues_take_turns_as_the_entry_penalty_adds_up() -> None:
    # Equal usage: light's first gang goes (it is older), its entry penalty puts
    # heavy ahead, and so on; a static order would admit light's gangs first.
    queues = (fair_queue("heavy"), fair_queue("light"))
    workloads = [gang(f"l{i}", queue="light", created=i) for i in range(3)]
    workloads += [gang(f"h{i}", queue="heavy", created=10 + i) for i in range(3)]
    order = admitted_order(*workloads, queues=queues, room=4)
    assert order == ["ns/l0", "ns/h0", "ns/l1", "ns/h1"]


def test_other_teams_keep_their_places() -> None:
    queues = (fair_queue("heavy", consumed=10), fair_queue("light", consumed=1))
    other = replace(quota("other", gpu=gpus(100)))
    outsider = Queue(namespace="ns", name="out", team_quota="other")
    result = schedule(
        snapshot(
            nodes=(gpu_node("n1", 1),),
            quotas=(replace(quota(gpu=gpus(100)), admission_fair_sharing=AFS), other),
            queues=(*queues, outsider),
            workloads=(
                gang("first", queue="out", created=0),
                gang("old", queue="heavy", created=1),
                gang("new", queue="light", created=2),
            ),
            now=NOW,
        )
    )
    assert [d.workload for d in result.decisions if d.verdict is Verdict.ADMIT] == ["ns/first"]


# -- the sample --------------------------------------------------------------------------------


def cycle_usage(queue: Queue, *workloads: Workload) -> QueueUsage:
    team = replace(quota(gpu=gpus(100)), admission_fair_sharing=AFS)
    result = schedule(
        snapshot(
            nodes=(gpu_node("n1", 8),),
            quotas=(team,),
            queues=(queue,),
            workloads=workloads,
            now=NOW,
        )
    )
    return result.queue_usage[("ns", queue.name)]


def test_a_queue_is_sampled_once_its_interval_is_up_and_not_before() -> None:
    running = gang("run", gpus=2, phase=WorkloadPhase.ADMITTED, admitted_at=NOW - 500)
    early = replace(fair_queue("q", consumed=4), consumed_at=NOW - 30)
    usage = cycle_usage(early, running)
    assert not usage.sampled
    assert usage.consumed == {GPU: 4000}
    due = replace(fair_queue("q", consumed=4), consumed_at=NOW - 60)
    usage = cycle_usage(due, running)
    assert usage.sampled
    assert usage.consumed_at == NOW
    step = alpha(elapsed=60, half_life=600)
    assert math.isclose(usage.consumed[GPU], 4000 * (1 - step) + 2000 * step)


def test_a_gang_admitted_since_the_last_sample_adds_its_entry_penalty() -> None:
    since = NOW - 30
    fresh = gang("fresh", gpus=2, phase=WorkloadPhase.ADMITTED, admitted_at=since + 1)
    old = gang("old", gpus=2, phase=WorkloadPhase.ADMITTED, admitted_at=since - 1)
    queue = replace(fair_queue("q", consumed=0), consumed_at=since)
    step = alpha(elapsed=60, half_life=600)
    usage = cycle_usage(queue, fresh, old)
    # Only the fresh one's penalty, every resource in its unit (as Kueue: bytes of
    # memory outweigh GPUs unless resourceWeights says otherwise).
    need = 2 + 1 + 2**30  # one pod: 2 GPUs, a core, 1Gi in bytes
    assert math.isclose(usage.usage, need * step)


def test_a_queue_never_sampled_starts_from_nothing() -> None:
    queue = Queue(namespace="ns", name="q", team_quota="team")
    usage = cycle_usage(queue)
    assert usage.sampled
    assert usage.consumed == {}
    assert usage.usage == 0
