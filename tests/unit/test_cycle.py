"""The admission cycle: ordering, reasons, quota charging and capacity bookkeeping."""

from queue_controller.core import (
    PodSet,
    PriorityClass,
    Reason,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.model.objects import Ordering
from tests.builders import GPU, gang, gpu_node, gpus, queue, quota, running_pod, snapshot, template


def verdicts(result) -> dict[str, tuple[str, str]]:  # type: ignore[no-untyped-def]
    return {d.workload: (d.verdict.value, d.reason.value) for d in result.decisions}


def test_admits_a_gang_that_fits_with_its_placement() -> None:
    result = schedule(snapshot(nodes=[gpu_node("n0")], workloads=[gang("a", 2, 4)]))
    (decision,) = result.decisions
    assert decision.verdict is Verdict.ADMIT
    assert decision.reason is Reason.ADMITTED
    assert decision.placement == {"n0": 2}
    assert decision.as_dict()["placement"] == {"n0": 2}
    assert result.quota_usage["team"][GPU] == 8000


def test_order_is_priority_then_age_then_name() -> None:
    classes = [PriorityClass("high", 100), PriorityClass("low", 1)]
    workloads = [
        gang("old-low", created=1, pod_template=template(1, priority_class="low")),
        gang("new-high", created=9, pod_template=template(1, priority_class="high")),
        gang("b-old-high", created=2, pod_template=template(1, priority_class="high")),
        gang("a-old-high", created=2, pod_template=template(1, priority_class="high")),
    ]
    result = schedule(
        snapshot(nodes=[gpu_node("n")], workloads=workloads, priority_classes=classes)
    )
    assert [d.workload for d in result.decisions] == [
        "ns/a-old-high",
        "ns/b-old-high",
        "ns/new-high",
        "ns/old-low",
    ]


def test_global_default_priority_class_applies_to_unnamed_templates() -> None:
    classes = [PriorityClass("default", 50, global_default=True), PriorityClass("low", 1)]
    workloads = [
        gang("low", created=0, pod_template=template(1, priority_class="low")),
        gang("unnamed", created=5),
    ]
    result = schedule(
        snapshot(nodes=[gpu_node("n")], workloads=workloads, priority_classes=classes)
    )
    assert result.decisions[0].workload == "ns/unnamed"


def test_earlier_admissions_use_capacity_seen_by_later_gangs() -> None:
    workloads = [gang("first", 1, 6, created=0), gang("second", 1, 6, created=1)]
    result = schedule(snapshot(nodes=[gpu_node("n")], workloads=workloads))
    assert verdicts(result) == {
        "ns/first": ("Admit", "Admitted"),
        "ns/second": ("Pending", "NoNodeFit"),
    }


def test_best_effort_fifo_lets_a_smaller_gang_pass_a_blocked_head() -> None:
    workloads = [gang("big", 2, 8, created=0), gang("small", 1, 1, created=1)]
    result = schedule(snapshot(nodes=[gpu_node("n")], workloads=workloads))
    assert verdicts(result)["ns/small"] == ("Admit", "Admitted")


def test_strict_fifo_holds_everything_behind_a_blocked_head() -> None:
    workloads = [
        gang("big", 2, 8, created=0),
        gang("small", 1, 1, created=1),
        gang("tiny", 1, 1, created=2),
    ]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n")],
            workloads=workloads,
            queues=[queue(ordering=Ordering.STRICT_FIFO)],
        )
    )
    assert verdicts(result) == {
        "ns/big": ("Pending", "NoNodeFit"),
        "ns/small": ("Pending", "WaitingForHead"),
        "ns/tiny": ("Pending", "WaitingForHead"),
    }
    assert "held by its head ns/big" in result.decisions[1].message


def test_strict_fifo_blocks_only_its_own_queue() -> None:
    workloads = [
        gang("big", 2, 8, created=0, queue="strict"),
        gang("other", 1, 1, created=1, queue="open"),
    ]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n")],
            workloads=workloads,
            queues=[queue("strict", ordering=Ordering.STRICT_FIFO), queue("open")],
        )
    )
    assert verdicts(result)["ns/other"] == ("Admit", "Admitted")


def test_strict_fifo_head_blocked_by_quota_also_holds_the_queue() -> None:
    workloads = [gang("big", 1, 8, created=0), gang("small", 1, 1, created=1)]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n")],
            workloads=workloads,
            queues=[queue(ordering=Ordering.STRICT_FIFO)],
            quotas=[quota(gpu=gpus(4))],
        )
    )
    assert verdicts(result) == {
        "ns/big": ("Pending", "QuotaExceeded"),
        "ns/small": ("Pending", "WaitingForHead"),
    }


def test_quota_exceeded_names_resource_need_and_availability() -> None:
    workloads = [gang("a", 2, 4)]
    result = schedule(
        snapshot(nodes=[gpu_node("n")], workloads=workloads, quotas=[quota(gpu=gpus(6))])
    )
    (decision,) = result.decisions
    assert decision.reason is Reason.QUOTA_EXCEEDED
    assert "nvidia.com/gpu needs 8, only 6 available" in decision.message
    assert decision.as_dict().get("placement") is None


def test_running_jobs_hold_quota_for_all_their_pods() -> None:
    workloads = [
        gang("running", 3, 2, phase=WorkloadPhase.ADMITTED),  # 6 GPUs of quota
        gang("pending", 1, 4),
    ]
    result = schedule(
        snapshot(nodes=[gpu_node("n")], workloads=workloads, quotas=[quota(gpu=gpus(8))])
    )
    assert verdicts(result) == {"ns/pending": ("Pending", "QuotaExceeded")}


def test_finished_jobs_hold_nothing_and_are_not_decided() -> None:
    workloads = [gang("done", 4, 2, phase=WorkloadPhase.FINISHED), gang("next", 1, 8)]
    result = schedule(
        snapshot(nodes=[gpu_node("n")], workloads=workloads, quotas=[quota(gpu=gpus(8))])
    )
    assert verdicts(result) == {"ns/next": ("Admit", "Admitted")}


def test_cohort_borrowing_is_admitted_and_reported() -> None:
    quotas = [quota("a", "pool", gpu=gpus(4)), quota("b", "pool", gpu=gpus(8))]
    workloads = [gang("big", 1, 8)]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n")], workloads=workloads, quotas=quotas, queues=[queue(team="a")]
        )
    )
    (decision,) = result.decisions
    assert decision.verdict is Verdict.ADMIT
    assert "borrowing 4 nvidia.com/gpu from cohort pool)" in decision.message


def test_borrowing_limit_and_lending_limit_hold_in_the_cycle() -> None:
    quotas = [
        quota("a", "pool", gpu=gpus(4, borrowing=2)),
        quota("b", "pool", gpu=gpus(8, lending=1)),
    ]
    workloads = [gang("wants-7", 1, 7, created=0), gang("wants-5", 1, 5, created=1)]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n")], workloads=workloads, quotas=quotas, queues=[queue(team="a")]
        )
    )
    # a may reach 4 + min(borrowing 2, b lends 1) = 5
    assert verdicts(result) == {
        "ns/wants-7": ("Pending", "QuotaExceeded"),
        "ns/wants-5": ("Admit", "Admitted"),
    }


def test_bound_pods_use_capacity_until_they_terminate() -> None:
    nodes = [gpu_node("n")]
    busy = [running_pod("n", 8)]
    done = [running_pod("n", 8, phase="Succeeded")]
    assert verdicts(schedule(snapshot(nodes=nodes, pods=busy, workloads=[gang("a")]))) == {
        "ns/a": ("Pending", "NoNodeFit")
    }
    assert verdicts(schedule(snapshot(nodes=nodes, pods=done, workloads=[gang("a")]))) == {
        "ns/a": ("Admit", "Admitted")
    }


def test_admitted_gang_reserves_its_planned_nodes_until_pods_arrive() -> None:
    nodes = [gpu_node("n0"), gpu_node("n1")]
    admitted = gang("admitted", 2, 8, phase=WorkloadPhase.ADMITTED, placement={"n0": 1, "n1": 1})
    # One member already bound on n0; the other is planned on n1 but not bound yet.
    pods = [running_pod("n0", 8, workload="Job/ns/admitted")]
    result = schedule(snapshot(nodes=nodes, pods=pods, workloads=[admitted, gang("next", 1, 8)]))
    assert verdicts(result) == {"ns/next": ("Pending", "NoNodeFit")}
    # Once both are bound the plan holds nothing more; capacity is the pods'.
    pods.append(running_pod("n1", 4, workload="Job/ns/admitted", name="second"))
    result = schedule(snapshot(nodes=nodes, pods=pods, workloads=[admitted, gang("next", 1, 4)]))
    assert verdicts(result) == {"ns/next": ("Admit", "Admitted")}


def test_missing_queue_and_missing_team_quota() -> None:
    workloads = [gang("lost", queue="nowhere"), gang("orphan", queue="q2")]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n")],
            workloads=workloads,
            queues=[queue("q2", team="ghost")],
        )
    )
    assert verdicts(result) == {
        "ns/lost": ("Pending", "QueueNotFound"),
        "ns/orphan": ("Pending", "TeamQuotaNotFound"),
    }


def test_invalid_spec_is_reported_and_does_not_block_strict_fifo() -> None:
    from queue_controller.core.model.objects import Container, PodTemplate

    broken = PodTemplate(containers=(Container("main", requests={GPU: "2"}),))
    workloads = [gang("broken", pod_template=broken, created=0), gang("fine", created=1)]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n")],
            workloads=workloads,
            queues=[queue(ordering=Ordering.STRICT_FIFO)],
        )
    )
    assert verdicts(result) == {
        "ns/broken": ("Invalid", "InvalidSpec"),
        "ns/fine": ("Admit", "Admitted"),
    }
    assert "containers[main]" in result.decisions[0].message
    assert "nvidia.com/gpu" in result.decisions[0].message


def test_unknown_priority_class_is_invalid() -> None:
    workloads = [gang("a", pod_template=template(1, priority_class="urgent"))]
    (decision,) = schedule(snapshot(nodes=[gpu_node("n")], workloads=workloads)).decisions
    assert decision.reason is Reason.INVALID_SPEC
    assert "PriorityClass 'urgent' does not exist" in decision.message


def test_gang_larger_than_the_job_is_invalid() -> None:
    workloads = [gang("a", 4, 1, pod_count=2)]
    (decision,) = schedule(snapshot(nodes=[gpu_node("n")], workloads=workloads)).decisions
    assert decision.verdict is Verdict.INVALID
    assert "needs 4 members but the Job runs only 2 pods" in decision.message


def test_smaller_gang_places_its_members_and_charges_quota_for_every_pod() -> None:
    # minMember 2 of a 4-pod Job: two must fit at once, all four are charged.
    workloads = [gang("a", 2, 2, pod_count=4)]
    result = schedule(
        snapshot(nodes=[gpu_node("n")], workloads=workloads, quotas=[quota(gpu=gpus(8))])
    )
    (decision,) = result.decisions
    assert decision.placement == {"n": 2}
    assert result.quota_usage["team"][GPU] == 8000


def test_backoff_waits_until_requeue_time_and_does_not_block_the_queue() -> None:
    waiting = gang("retry", requeue_at=1000.0, requeue_count=2, created=0)
    after = gang("after", created=1)
    snap = {
        "nodes": [gpu_node("n")],
        "workloads": [waiting, after],
        "queues": [queue(ordering=Ordering.STRICT_FIFO)],
    }
    early = schedule(snapshot(now=940.0, **snap))
    assert verdicts(early) == {
        "ns/retry": ("Pending", "Backoff"),
        "ns/after": ("Admit", "Admitted"),
    }
    assert "requeued 2 times" in early.decisions[0].message
    assert "(in 1m)" in early.decisions[0].message
    late = schedule(snapshot(now=1000.0, **snap))
    assert verdicts(late)["ns/retry"] == ("Admit", "Admitted")


def test_deactivated_gang_is_never_admitted() -> None:
    workloads = [gang("gave-up", deactivated=True, requeue_count=5)]
    (decision,) = schedule(snapshot(nodes=[gpu_node("n")], workloads=workloads)).decisions
    assert (decision.verdict, decision.reason) == (Verdict.PENDING, Reason.DEACTIVATED)


def test_empty_gang_is_admitted_with_no_placement() -> None:
    workloads = [gang("paused", 0, 1, pod_count=0)]
    (decision,) = schedule(snapshot(nodes=[gpu_node("n")], workloads=workloads)).decisions
    assert decision.verdict is Verdict.ADMIT
    assert decision.placement == {}


def test_same_input_in_any_order_gives_the_same_decisions() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(5)]
    pods = [running_pod("n1", 3), running_pod("n3", 5)]
    workloads = [gang(f"g{i}", 1 + i % 3, 1 + i % 4, created=i % 4) for i in range(12)]
    first = schedule(snapshot(nodes=nodes, pods=pods, workloads=workloads))
    again = schedule(snapshot(nodes=nodes[::-1], pods=pods[::-1], workloads=workloads[::-1]))
    assert first == again


def test_identical_gangs_after_a_failure_get_the_same_answer_and_message() -> None:
    # Quota for two 4-GPU gangs: the third and fourth identical ones are refused,
    # the fourth with exactly the third's message, without being tried again.
    workloads = [gang(name, 1, 4, created=float(i)) for i, name in enumerate("abcd")]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0"), gpu_node("n1")],
            workloads=workloads,
            quotas=[quota(gpu=gpus(8))],
        )
    )
    decisions = {d.workload: d for d in result.decisions}
    assert [decisions[f"ns/{n}"].verdict for n in "abcd"] == [
        Verdict.ADMIT,
        Verdict.ADMIT,
        Verdict.PENDING,
        Verdict.PENDING,
    ]
    assert decisions["ns/c"].reason is decisions["ns/d"].reason is Reason.QUOTA_EXCEEDED
    assert decisions["ns/c"].message == decisions["ns/d"].message
    assert decisions["ns/d"].workload == "ns/d"
    assert decisions["ns/d"].queue == "q"


def test_a_failure_is_not_reused_once_something_was_admitted_after_it() -> None:
    # big1 is refused; small is admitted after it and uses quota, so big2, its twin,
    # is decided afresh: same verdict, but a message with the usage as it now is.
    workloads = [
        gang("big1", 2, 8, created=0.0),
        gang("small", 1, 4, created=1.0),
        gang("big2", 2, 8, created=2.0),
    ]
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0"), gpu_node("n1")],
            workloads=workloads,
            quotas=[quota(gpu=gpus(12))],
        )
    )
    decisions = {d.workload: d for d in result.decisions}
    assert decisions["ns/small"].verdict is Verdict.ADMIT
    assert decisions["ns/big1"].reason is decisions["ns/big2"].reason is Reason.QUOTA_EXCEEDED
    assert "only 12 available" in decisions["ns/big1"].message
    assert "only 8 available" in decisions["ns/big2"].message


def test_a_gang_short_of_members_waits_for_them_and_holds_up_no_strict_fifo_queue() -> None:
    short = gang("short", 2, created=1.0, absent_members=1)
    none_yet = Workload(
        namespace="ns",
        name="empty",
        queue="q",
        pod_sets=(),
        kind="Pod",
        created=2.0,
        absent_members=3,
    )
    later = gang("later", 1, created=3.0)
    result = schedule(
        snapshot(
            nodes=[gpu_node("n0", 8)],
            workloads=[short, none_yet, later],
            queues=[queue(ordering=Ordering.STRICT_FIFO)],
        )
    )
    by_name = {d.workload: d for d in result.decisions}
    assert by_name["ns/short"].reason is Reason.WAITING_FOR_MEMBERS
    assert by_name["ns/short"].message.startswith("2 of 3 members exist")
    assert by_name["ns/empty"].reason is Reason.WAITING_FOR_MEMBERS
    assert by_name["ns/empty"].message.startswith("0 of 3 members exist")
    assert by_name["ns/later"].verdict is Verdict.ADMIT


def _two_sets(name: str, workers: int, gpus_each: int, *, created: float = 0.0) -> Workload:
    launcher = PodSet("launcher", template(0), count=1, min_count=1, path="spec")
    worker = PodSet("workers", template(gpus_each), count=workers, min_count=workers, path="spec")
    return Workload(
        namespace="ns",
        name=name,
        queue="q",
        pod_sets=(launcher, worker),
        created=created,
        kind="Pod",
    )


def test_a_gang_of_two_pod_sets_is_placed_set_by_set() -> None:
    result = schedule(
        snapshot(nodes=[gpu_node("n0", 8), gpu_node("n1", 8)], workloads=[_two_sets("mpi", 4, 4)])
    )
    (decision,) = result.decisions
    assert decision.verdict is Verdict.ADMIT
    assert decision.kind == "Pod"
    assert sum(decision.pod_set_placement["workers"].values()) == 4
    assert sum(decision.pod_set_placement["launcher"].values()) == 1
    assert sum(decision.placement.values()) == 5
    assert decision.as_dict()["podSets"] == {
        name: dict(nodes) for name, nodes in decision.pod_set_placement.items()
    }


def test_a_pod_set_that_does_not_fit_gives_back_what_the_earlier_sets_took() -> None:
    # The launcher fits, the 3 x 8-GPU workers do not: nothing of the gang is kept,
    # so the single 8-GPU gang after it still finds both nodes free.
    big = _two_sets("mpi", 3, 8, created=1.0)
    launcher_only = PodSet("launcher", template(8), count=1, min_count=1, path="spec")
    big = Workload(
        namespace="ns",
        name="mpi",
        queue="q",
        pod_sets=(launcher_only, big.pod_sets[1]),
        created=1.0,
        kind="Pod",
    )
    after = gang("after", 2, 8, created=2.0)
    result = schedule(
        snapshot(nodes=[gpu_node("n0", 8), gpu_node("n1", 8)], workloads=[big, after])
    )
    by_name = {d.workload: d for d in result.decisions}
    assert by_name["ns/mpi"].reason is Reason.NO_NODE_FIT
    assert by_name["ns/mpi"].message.startswith("pod set workers: ")
    assert by_name["ns/after"].verdict is Verdict.ADMIT


def test_a_job_and_a_pod_group_of_one_name_are_two_gangs() -> None:
    job = gang("train", 1, 8, created=1.0)
    pods = _two_sets("train", 1, 8, created=2.0)
    result = schedule(snapshot(nodes=[gpu_node("n0", 8), gpu_node("n1", 8)], workloads=[job, pods]))
    assert sorted(d.key for d in result.decisions) == ["Job/ns/train", "Pod/ns/train"]
    assert all(d.verdict is Verdict.ADMIT for d in result.decisions)
    assert set(result.decisions[0].placement) != set(result.decisions[1].placement)
