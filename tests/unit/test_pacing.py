"""Admission paced to what the Job controller can make (core/cycle/pacing.py)."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.controller.state import ClusterState
from queue_controller.core import Reason, Verdict, WorkloadPhase, schedule
from queue_controller.core.model.objects import Ordering
from tests.builders import GPU, gang, gpu_node, gpus, queue, quota, snapshot
from tests.fakes.gateway import FakeGateway
from tests.unit.test_lifecycle import NOW, QUEUE, iso, job
from tests.unit.test_lifecycle import pod as lifecycle_pod
from tests.unit.test_one_translation import NODE, TEAM, run_one_cycle
from tests.views import seen


def _job(name: str, members: int, *, created: float, made: int = 0) -> object:
    """A Job gang of ``members`` one-GPU pods, ``made`` of them already made."""
    return gang(name, members, 1, created=created, uncreated_members=members - made)


def verdicts(result) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {d.workload.split("/")[1]: d.reason.value for d in result.decisions}


def test_without_a_limit_every_gang_that_fits_is_admitted() -> None:
    jobs = [_job(f"j{i}", 4, created=i) for i in range(6)]
    result = schedule(snapshot(nodes=[gpu_node(f"n{i}") for i in range(3)], workloads=jobs))
    assert set(verdicts(result).values()) == {"Admitted"}


def test_admission_stops_where_the_pods_to_make_would_pass_the_limit() -> None:
    jobs = [_job(f"j{i}", 4, created=i) for i in range(6)]
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    result = schedule(snapshot(nodes=nodes, workloads=jobs), creation_backlog=8)
    assert verdicts(result) == {
        "j0": "Admitted",
        "j1": "Admitted",
        **{f"j{i}": "PodCreationBacklog" for i in range(2, 6)},
    }
    waiting = next(d for d in result.decisions if d.workload == "ns/j2")
    assert waiting.verdict is Verdict.PENDING
    assert "limit of 8" in waiting.message


def test_the_backlog_counts_admitted_gangs_pods_not_made_yet() -> None:
    running = gang("running", 6, 1, phase=WorkloadPhase.ADMITTED, uncreated_members=5)
    nodes = [gpu_node("n0"), gpu_node("n1")]
    paced = schedule(
        snapshot(nodes=nodes, workloads=[running, _job("next", 4, created=1)]),
        creation_backlog=8,
    )
    assert verdicts(paced)["next"] == "PodCreationBacklog"
    assert paced.awaiting_creation == 5  # as found, before the cycle admitted anything
    made = gang("running", 6, 1, phase=WorkloadPhase.ADMITTED, uncreated_members=1)
    later = schedule(
        snapshot(nodes=nodes, workloads=[made, _job("next", 4, created=1)]),
        creation_backlog=8,
    )
    assert verdicts(later)["next"] == "Admitted"


def test_a_gang_bigger_than_the_limit_is_admitted_on_an_empty_backlog() -> None:
    result = schedule(
        snapshot(nodes=[gpu_node("n0"), gpu_node("n1")], workloads=[_job("big", 16, created=0)]),
        creation_backlog=8,
    )
    assert verdicts(result) == {"big": "Admitted"}


def test_no_later_gang_overtakes_one_held_by_the_backlog() -> None:
    # j0 leaves 4 to make; j1 (8 more) would pass 8, so it waits, and so does the
    # one-pod j2 that alone would have fitted in the limit.
    jobs = [_job("j0", 4, created=0), _job("j1", 8, created=1), _job("j2", 1, created=2)]
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    result = schedule(snapshot(nodes=nodes, workloads=jobs), creation_backlog=8)
    assert verdicts(result) == {
        "j0": "Admitted",
        "j1": "PodCreationBacklog",
        "j2": "PodCreationBacklog",
    }


def test_gangs_whose_pods_exist_are_never_held() -> None:
    # A plain Pod group's members exist before admission: it adds nothing to make.
    jobs = [
        _job("j0", 8, created=0),
        _job("j1", 4, created=1),
        gang("pods", 2, 1, created=2, kind="Pod"),
    ]
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    result = schedule(snapshot(nodes=nodes, workloads=jobs), creation_backlog=8)
    assert verdicts(result) == {"j0": "Admitted", "j1": "PodCreationBacklog", "pods": "Admitted"}


def test_a_held_gang_holds_its_strict_fifo_queue() -> None:
    strict = queue(ordering=Ordering.STRICT_FIFO)
    jobs = [
        _job("j0", 8, created=0),
        _job("j1", 4, created=1),
        gang("pods", 2, 1, created=2, kind="Pod"),
    ]
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    result = schedule(snapshot(nodes=nodes, workloads=jobs, queues=[strict]), creation_backlog=8)
    assert verdicts(result)["pods"] == Reason.WAITING_FOR_HEAD.value


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=12),
    already=st.integers(0, 20),
    limit=st.integers(1, 24),
    node_count=st.integers(1, 20),
    team_gpus=st.integers(1, 160),
)
def test_pacing_only_turns_a_tail_of_admissions_into_waits(
    sizes: list[int], already: int, limit: int, node_count: int, team_gpus: int
) -> None:
    """Whatever the gangs, the room and the quota, a paced cycle decides every gang as the
    unpaced one does, except that the admissions past the budget wait PodCreationBacklog;
    the admissions kept are the first ones, and take the backlog no further than the limit
    (but for one gang on an empty backlog)."""
    running = gang("running", 1, 1, phase=WorkloadPhase.ADMITTED, uncreated_members=already)
    jobs = [_job(f"j{i:02}", size, created=i) for i, size in enumerate(sizes)]
    world = snapshot(
        nodes=[gpu_node(f"n{i}") for i in range(node_count)],
        workloads=[running, *jobs],
        quotas=[quota(gpu=gpus(team_gpus))],
    )
    paced = schedule(world, creation_backlog=limit)
    free = schedule(world)
    waiting = False
    for alone, decision in zip(free.decisions, paced.decisions, strict=True):
        assert alone.workload == decision.workload
        if decision.reason is Reason.POD_CREATION_BACKLOG:
            assert alone.verdict is Verdict.ADMIT
            waiting = True
        else:
            assert decision == alone
            assert not (waiting and decision.verdict is Verdict.ADMIT), "a gang overtook"
    admitted = [d.workload for d in paced.decisions if d.verdict is Verdict.ADMIT]
    made = already + sum(sizes[int(name[-2:])] for name in admitted)
    assert not admitted or made <= limit or (already == 0 and len(admitted) == 1)
    # What the cycle reports as used is what it admitted, not what it held.
    admitted_gpus = sum(sizes[int(name[-2:])] for name in admitted)
    assert paced.quota_usage["team"][GPU] == 1000 * (1 + admitted_gpus)


def test_a_gang_that_would_not_fit_keeps_its_reason_while_pacing_holds() -> None:
    # j0 fills the budget; j1 would fit and waits; j2 cannot fit the node at all.
    jobs = [_job("j0", 4, created=0), _job("j1", 2, created=1), _job("j2", 9, created=2)]
    result = schedule(snapshot(nodes=[gpu_node("n0")], workloads=jobs), creation_backlog=4)
    assert verdicts(result) == {"j0": "Admitted", "j1": "PodCreationBacklog", "j2": "NoNodeFit"}


# --- what the Job kind says is still to be made ----------------------------------------------


def _uncreated(job_obj: dict[str, Any], *pods: dict[str, Any]) -> int:
    state = ClusterState()
    for obj in (QUEUE, job_obj, *pods):
        state.upsert(obj)
    (workload,) = seen(state, NOW).snapshot.workloads
    return workload.uncreated_members


def test_a_suspended_job_has_all_its_members_to_make() -> None:
    assert _uncreated(job(parallelism=4)) == 4


def test_an_admitted_job_has_the_members_its_controller_has_not_made() -> None:
    running = job(parallelism=4, suspend=False)
    assert _uncreated(running) == 4
    assert _uncreated(running, lifecycle_pod("a"), lifecycle_pod("b", gated=True)) == 2
    # A succeeded pod is not made again; a failed one is.
    done = lifecycle_pod("c", phase="Succeeded")
    failed = lifecycle_pod("d", phase="Failed")
    assert _uncreated(running, lifecycle_pod("a"), done, failed) == 2


def test_a_finished_job_has_nothing_to_make() -> None:
    finished = job(parallelism=4, suspend=False)
    finished["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert _uncreated(finished) == 0


# --- the loop paces by its setting, and says how far behind the Job controller is -------


def test_the_loop_paces_admission_and_reports_the_pods_awaiting_creation() -> None:
    jobs = [job("first", parallelism=2), job("second", parallelism=2)]
    jobs[1]["metadata"]["creationTimestamp"] = iso(500)  # younger: after "first"
    state = ClusterState()
    for obj in (QUEUE, TEAM, NODE, *jobs):
        state.upsert(obj)
    gateway = FakeGateway(QUEUE, TEAM, NODE, *jobs)
    metrics = run_one_cycle(state, gateway, cycles=2, creation_backlog=2)
    first = gateway.held("Job", "ns", "first")
    second = gateway.held("Job", "ns", "second")
    assert first is not None
    assert second is not None
    assert first["spec"]["suspend"] is False
    assert second["spec"]["suspend"] is True
    group = gateway.held("PodGroup", "ns", "second")
    assert group is not None
    assert group["status"]["reason"] == "PodCreationBacklog"
    # The Job controller made neither of first's pods: both are awaited.
    awaiting = metrics.registry.get_sample_value("queue_controller_pods_awaiting_creation")
    assert awaiting == 2
