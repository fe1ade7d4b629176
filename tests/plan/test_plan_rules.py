"""``queue-controller plan`` end to end: every admission rule, read from a realistic dump.

Each test names the rule it checks.  The dumps under ``dumps/`` say in their
header comments what each gang demonstrates and what plan must decide.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from queue_controller.dump import bundled_example
from tests.plan.harness import (
    DUMPS,
    NOW,
    by_workload,
    dump,
    invoke,
    outcome,
    plan_json,
    run_script,
)

ADMIT = ("Admit", "Admitted")
NO_NODE_FIT = ("Pending", "NoNodeFit")
QUOTA_EXCEEDED = ("Pending", "QuotaExceeded")
INVALID = ("Invalid", "InvalidSpec")


def decide(*files: str, **kwargs: Any) -> dict[str, dict[str, Any]]:
    return by_workload(plan_json(*files, **kwargs))


def placed_on(decision: dict[str, Any], nodes: int) -> bool:
    """'N member(s) placed on K node(s)', without caring for the plural of 'member'."""
    plural = "node" if nodes == 1 else "nodes"
    return re.search(rf"\bmembers? placed on {nodes} {plural}\b", decision["message"]) is not None


# -- 1. the fragmentation trap ------------------------------------------------------------


def test_fragmentation_trap_pends_no_node_fit_although_enough_gpus_are_free_in_total() -> None:
    d = decide("fragmentation.yaml")["ml/train-2x4"]
    assert outcome(d) == NO_NODE_FIT
    assert "placement" not in d
    assert d["message"] == (
        "0 of 2 members fit at once; binding constraint: Insufficient nvidia.com/gpu (4 nodes); "
        "12 nvidia.com/gpu free on eligible nodes but at most 3 on any one node, "
        "and each member needs 4"
    )


def test_fragmentation_free_gpus_are_real_a_smaller_gang_takes_them() -> None:
    d = decide("fragmentation.yaml")["ml/eval-3"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"h100-0": 1}


def test_fragmentation_explanation_counts_capacity_taken_earlier_in_the_cycle() -> None:
    # Same shape as ml/train-2x4, decided after ml/eval-3 took 3 GPUs of h100-0.
    d = decide("fragmentation.yaml")["ml/train-again"]
    assert outcome(d) == NO_NODE_FIT
    assert d["message"] == (
        "0 of 2 members fit at once; binding constraint: Insufficient nvidia.com/gpu (4 nodes); "
        "9 nvidia.com/gpu free on eligible nodes but at most 3 on any one node, "
        "and each member needs 4"
    )


def test_member_larger_than_any_node_pends_with_the_scatter_explanation() -> None:
    d = decide("oversized-member.yaml")["ml/per-pod-16"]
    assert outcome(d) == NO_NODE_FIT
    assert d["message"] == (
        "0 of 1 members fit at once; binding constraint: Insufficient nvidia.com/gpu (3 nodes); "
        "24 nvidia.com/gpu free on eligible nodes but at most 8 on any one node, "
        "and each member needs 16"
    )


def test_explanation_for_a_member_larger_than_any_node_counts_capacity_taken_since() -> None:
    decisions = decide("oversized-member.yaml")
    assert decisions["ml/fill-8"]["placement"] == {"gpu-0": 1}
    d = decisions["ml/per-pod-16-b"]
    assert outcome(d) == NO_NODE_FIT
    assert d["message"] == (
        "0 of 1 members fit at once; binding constraint: Insufficient nvidia.com/gpu (3 nodes); "
        "16 nvidia.com/gpu free on eligible nodes but at most 8 on any one node, "
        "and each member needs 16"
    )


# -- 2. placement of a gang that fits --------------------------------------------------------


def test_best_fit_prefers_partly_used_node_the_gang_fills_exactly_over_empty_nodes() -> None:
    d = decide("best-fit.yaml")["ml/fits-4"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-b": 1}
    assert "charged to TeamQuota ml" in d["message"]


def test_admit_message_of_a_one_member_gang_is_grammatical() -> None:
    d = decide("best-fit.yaml")["ml/fits-4"]
    assert d["message"] == "1 member placed on 1 node; charged to TeamQuota ml"


def test_big_gang_fills_whole_nodes_using_the_fewest_nodes() -> None:
    d = decide("best-fit.yaml")["ml/big-4x4"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-a": 2, "gpu-c": 2}
    assert placed_on(d, 2)


def test_earlier_admissions_in_the_cycle_are_seen_by_later_gangs() -> None:
    d = decide("best-fit.yaml")["ml/whole-8"]
    # gpu-a and gpu-c were just filled by ml/big-4x4; gpu-d is the only empty node left.
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-d": 1}


# -- 3. team quota -----------------------------------------------------------------------------


def test_quota_exceeded_names_resource_needed_available_and_usage() -> None:
    d = decide("quota.yaml")["cv/train-big"]
    assert outcome(d) == QUOTA_EXCEEDED
    assert d["message"] == (
        "TeamQuota vision: nvidia.com/gpu needs 6, only 4 available (nominal 8, 4 in use)"
    )


def test_resource_not_named_in_the_quota_is_not_limited() -> None:
    # 2 x 400Gi of memory, and TeamQuota vision names no memory.
    d = decide("quota.yaml")["cv/train-fits"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"node-0": 2}


def test_running_job_charges_parallelism_capped_by_completions_times_pod_request() -> None:
    decisions = decide("quota.yaml")
    # serve-batch runs parallelism 3 but completions 2: 2 x 2 GPUs and 2 x 4 cpu are in use.
    assert "4 in use" in decisions["cv/train-big"]["message"]
    # cpu: 8 for serve-batch plus 8 reserved by train-fits earlier in this cycle.
    d = decisions["cv/cpu-hungry"]
    assert outcome(d) == QUOTA_EXCEEDED
    assert d["message"] == (
        "TeamQuota vision: cpu needs 60, only 48 available (nominal 64, 16 in use)"
    )


def test_finished_jobs_charge_nothing_and_are_not_decided() -> None:
    decisions = decide("quota.yaml")
    # nightly (Complete) would add 8 GPUs in use; crashed (Failed, still suspended)
    # would be a pending gang if its Failed condition were ignored.
    assert list(decisions) == ["cv/train-big", "cv/train-fits", "cv/cpu-hungry"]
    assert "(nominal 8, 4 in use)" in decisions["cv/train-big"]["message"]


# -- 4. cohorts ----------------------------------------------------------------------------------


def test_cohort_borrowing_stops_at_the_lenders_lending_limit() -> None:
    d = decide("cohort.yaml")["research/needs-4"]
    assert outcome(d) == QUOTA_EXCEEDED
    assert d["message"] == (
        "TeamQuota research: nvidia.com/gpu needs 4, only 2 available "
        "(nominal 8, 8 in use, borrowing limit 8 from cohort lab)"
    )


def test_cohort_borrowing_within_the_lending_limit_is_admitted_as_borrowing() -> None:
    d = decide("cohort.yaml")["research/needs-2"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-1": 1}
    assert d["message"].endswith(
        "charged to TeamQuota research (borrowing 2 nvidia.com/gpu from cohort lab)"
    )


def test_borrowing_limit_caps_borrowing_even_when_the_cohort_has_more_to_lend() -> None:
    d = decide("cohort.yaml")["vision/wants-3"]
    assert outcome(d) == QUOTA_EXCEEDED
    assert d["message"] == (
        "TeamQuota vision: nvidia.com/gpu needs 3, only 2 available "
        "(nominal 4, 4 in use, borrowing limit 2 from cohort big)"
    )


def test_borrowing_up_to_the_borrowing_limit_is_admitted() -> None:
    d = decide("cohort.yaml")["vision/wants-2"]
    assert outcome(d) == ADMIT
    assert "(borrowing 2 nvidia.com/gpu from cohort big)" in d["message"]
    # gpu-1 had 4 free; research/needs-2 took 2 just before.
    assert d["placement"] == {"gpu-1": 1}


# -- 5. queue ordering ---------------------------------------------------------------------------


def test_strict_fifo_head_that_cannot_fit_blocks_later_gangs_in_its_queue() -> None:
    decisions = decide("fifo.yaml")
    assert outcome(decisions["a/head"]) == NO_NODE_FIT
    d = decisions["a/behind-head"]
    assert outcome(d) == ("Pending", "WaitingForHead")
    assert d["message"] == "StrictFIFO queue a/strict is held by its head a/head"


def test_best_effort_fifo_lets_a_later_gang_pass_a_stuck_one() -> None:
    decisions = decide("fifo.yaml")
    assert outcome(decisions["a/too-big"]) == NO_NODE_FIT
    assert outcome(decisions["a/small"]) == ADMIT
    assert decisions["a/small"]["placement"] == {"gpu-0": 1}


def test_strict_fifo_head_does_not_block_another_queue() -> None:
    # b/strict is also StrictFIFO (and even has the same name), in another namespace.
    d = decide("fifo.yaml")["b/other"]
    assert outcome(d) == ADMIT
    assert d["queue"] == "strict"


# -- 6. priority ---------------------------------------------------------------------------------


def test_priority_orders_gangs_before_creation_time() -> None:
    decisions = plan_json("priority.yaml")
    assert [d["workload"] for d in decisions] == [
        "team-a/a-urgent",
        "team-a/new-urgent",
        "team-b/a-urgent",
        "team-a/mid-default",
        "team-a/old-scav",
    ]
    # One 8-GPU node and every gang wants all of it: the first considered gets it.
    assert outcome(decisions[0]) == ADMIT
    assert [outcome(d) for d in decisions[1:]] == [NO_NODE_FIT] * 4


def test_global_default_priority_class_applies_to_jobs_without_a_class() -> None:
    order = [d["workload"] for d in plan_json("priority.yaml")]
    # Without the globalDefault (1000) the class-less job would be priority 0,
    # below scavenger (10), and come last.
    assert order.index("team-a/mid-default") < order.index("team-a/old-scav")


def test_equal_priority_and_age_break_ties_by_namespace_then_name() -> None:
    order = [d["workload"] for d in plan_json("priority.yaml")]
    assert order[:3] == ["team-a/a-urgent", "team-a/new-urgent", "team-b/a-urgent"]


# -- 7. references that lead nowhere -------------------------------------------------------------


def test_queue_not_found() -> None:
    d = decide("queue-refs.yaml")["serving/typo"]
    assert outcome(d) == ("Pending", "QueueNotFound")
    assert d["queue"] == "onlin"
    assert d["message"] == "Queue serving/onlin does not exist"


def test_queue_lookup_is_namespaced() -> None:
    d = decide("queue-refs.yaml")["batch/wrong-ns"]
    assert outcome(d) == ("Pending", "QueueNotFound")
    assert d["message"] == "Queue batch/online does not exist"


def test_team_quota_not_found() -> None:
    d = decide("queue-refs.yaml")["serving/old-etl"]
    assert outcome(d) == ("Pending", "TeamQuotaNotFound")
    assert d["message"] == (
        "Queue serving/legacy draws from TeamQuota 'infer-2023', which does not exist"
    )


# -- 8. invalid gangs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "fragments"),
    [
        pytest.param(
            "ml/no-limit",
            [
                "spec.template.spec.containers[trainer].resources.limits[nvidia.com/gpu]",
                "container 'trainer' requests nvidia.com/gpu without a limit",
            ],
            id="gpu-requests-without-limits",
        ),
        pytest.param(
            "ml/mismatch",
            [
                "containers[trainer].resources.requests[nvidia.com/gpu]",
                "container 'trainer' requests 2 nvidia.com/gpu but limits it to 4",
            ],
            id="requests-differ-from-limits",
        ),
        pytest.param(
            "ml/half-gpu",
            [
                "containers[notebook].resources.limits[nvidia.com/gpu]",
                "container 'notebook' asks for 0.5 nvidia.com/gpu",
                "whole numbers",
            ],
            id="fractional-gpu",
        ),
        pytest.param(
            "ml/init-no-limit",
            [
                "spec.template.spec.initContainers[warmup].resources.limits[nvidia.com/gpu]",
                "container 'warmup' requests nvidia.com/gpu without a limit",
            ],
            id="init-container-gpu-without-limit",
        ),
        pytest.param(
            "ml/unknown-class",
            ["spec.template.spec.priorityClassName", "PriorityClass 'platinum' does not exist"],
            id="unknown-priority-class",
        ),
        pytest.param(
            "ml/gang-too-big",
            ["the gang needs 4 members but the Job runs only 2 pods at once"],
            id="podgroup-min-member-above-parallelism",
        ),
        pytest.param(
            "ml/wrong-queue",
            ["PodGroup wrong-queue names queue 'other' but the Job is labelled for queue 'train'"],
            id="podgroup-queue-disagrees-with-job-label",
        ),
    ],
)
def test_invalid_spec(workload: str, fragments: list[str]) -> None:
    d = decide("invalid.yaml")[workload]
    assert outcome(d) == INVALID
    assert "placement" not in d
    for fragment in fragments:
        assert fragment in d["message"]


def test_invalid_gangs_do_not_stop_valid_ones_and_are_listed_in_order() -> None:
    decisions = plan_json("invalid.yaml")
    assert [d["workload"] for d in decisions] == [
        "ml/no-limit",
        "ml/mismatch",
        "ml/half-gpu",
        "ml/init-no-limit",
        "ml/unknown-class",
        "ml/gang-too-big",
        "ml/wrong-queue",
        "ml/valid",
    ]
    assert [outcome(d) for d in decisions[:-1]] == [INVALID] * 7
    assert outcome(decisions[-1]) == ADMIT
    assert decisions[-1]["placement"] == {"gpu-0": 2}


# -- 9. node schedulability ----------------------------------------------------------------------


def test_prefer_no_schedule_taint_is_ignored() -> None:
    d = decide("node-filters.yaml")["ops/plain"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-soft": 1}


def test_not_ready_cordoned_and_tainted_nodes_are_excluded_and_named() -> None:
    d = decide("node-filters.yaml")["ops/plain-2"]
    assert outcome(d) == NO_NODE_FIT
    message = d["message"]
    assert message.startswith("0 of 1 members fit at once; binding constraint: ")
    for part in (
        "Insufficient nvidia.com/gpu (1 node)",  # gpu-soft, taken by ops/plain
        "NotReady (1 node)",
        "Unschedulable (1 node)",
        "UntoleratedTaint maintenance=planned:NoSchedule (1 node)",
        "UntoleratedTaint dedicated=inference:NoExecute (1 node)",
    ):
        assert part in message
    assert "spot" not in message  # PreferNoSchedule never excludes


@pytest.mark.parametrize(
    "workload",
    [
        pytest.param("ops/wrong-value", id="equal-toleration-with-another-value"),
        pytest.param("ops/wrong-effect", id="toleration-for-another-effect"),
    ],
)
def test_toleration_that_does_not_match_the_taint_does_not_tolerate_it(workload: str) -> None:
    d = decide("node-filters.yaml")[workload]
    assert outcome(d) == NO_NODE_FIT
    assert "UntoleratedTaint dedicated=inference:NoExecute (1 node)" in d["message"]


def test_equal_toleration_admits_onto_no_execute_tainted_node() -> None:
    d = decide("node-filters.yaml")["ops/tolerates-equal"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-infer": 1}


def test_exists_toleration_admits_onto_no_schedule_tainted_node() -> None:
    d = decide("node-filters.yaml")["ops/tolerates-exists"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-maint": 1}


def test_tolerating_every_taint_still_skips_not_ready_and_cordoned_nodes() -> None:
    d = decide("node-filters.yaml")["ops/tolerates-everything"]
    assert outcome(d) == NO_NODE_FIT
    assert d["message"] == (
        "0 of 1 members fit at once; binding constraint: Insufficient nvidia.com/gpu (3 nodes); "
        "also NotReady (1 node), Unschedulable (1 node)"
    )


# -- 10. nodeSelector and required node affinity -----------------------------------------------


@pytest.mark.parametrize(
    ("workload", "node"),
    [
        pytest.param("sel/selector", "a100-40", id="nodeSelector"),
        pytest.param("sel/op-in", "h100-b", id="In"),
        pytest.param("sel/op-notin", "a100-80", id="NotIn"),
        pytest.param("sel/op-exists", "a100-80", id="Exists"),
        pytest.param("sel/op-notexist", "h100-a", id="DoesNotExist"),
        pytest.param("sel/op-gt", "a100-80", id="Gt"),
        pytest.param("sel/op-lt", "a100-40", id="Lt"),
        pytest.param("sel/or-terms", "h100-b", id="terms-are-ORed-matchFields-name"),
    ],
)
def test_node_selection_steers_placement_to_the_only_matching_node(
    workload: str, node: str
) -> None:
    d = decide("affinity.yaml")[workload]
    assert outcome(d) == ADMIT
    assert d["placement"] == {node: 1}


@pytest.mark.parametrize(
    ("workload", "exclusion"),
    [
        pytest.param("sel/no-match", "NodeAffinity", id="In"),
        pytest.param("sel/none-selector", "NodeSelector", id="nodeSelector"),
        pytest.param("sel/none-notin", "NodeAffinity", id="NotIn"),
        pytest.param("sel/none-exists", "NodeAffinity", id="Exists"),
        pytest.param("sel/none-notexist", "NodeAffinity", id="DoesNotExist"),
        pytest.param("sel/none-gt", "NodeAffinity", id="Gt-is-strict"),
        pytest.param("sel/none-lt", "NodeAffinity", id="Lt-is-strict"),
    ],
)
def test_node_selection_that_matches_no_node_pends_naming_the_selector(
    workload: str, exclusion: str
) -> None:
    d = decide("affinity.yaml")[workload]
    assert outcome(d) == NO_NODE_FIT
    assert d["message"] == (
        f"0 of 1 members fit at once; binding constraint: {exclusion} didn't match (4 nodes)"
    )


# -- 11. MIG -------------------------------------------------------------------------------------


def test_mig_gang_is_placed_on_the_node_offering_that_slice_profile() -> None:
    decisions = decide("mig.yaml")
    assert outcome(decisions["mig/pair"]) == ADMIT
    assert decisions["mig/pair"]["placement"] == {"a100-mig-ok": 2}
    assert outcome(decisions["mig/small"]) == ADMIT
    assert decisions["mig/small"]["placement"] == {"a100-mig-ok": 3}


def test_mig_node_being_reconfigured_offers_no_mig_capacity() -> None:
    d = decide("mig.yaml")["mig/sweep"]
    assert outcome(d) == NO_NODE_FIT
    # Only a100-mig-ok's 7 slices count; a100-mig-busy advertises 14 but is pending.
    assert d["message"].startswith("7 of 10 members fit at once (on 1 node); ")
    assert "Insufficient nvidia.com/mig-1g.10gb (3 nodes)" in d["message"]


def test_mig_node_whose_reconfiguration_succeeded_offers_its_slices(tmp_path: Path) -> None:
    text = Path(dump("mig.yaml")).read_text()
    assert text.count("nvidia.com/mig.config.state: pending") == 1
    done = tmp_path / "mig-done.yaml"
    done.write_text(text.replace("mig.config.state: pending", "mig.config.state: success"))
    d = decide(str(done))["mig/sweep"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"a100-mig-busy": 10}


# -- 12. time-slicing ----------------------------------------------------------------------------


def test_time_sliced_gpus_are_counted_as_advertised_not_as_physical_gpus() -> None:
    d = decide("time-sliced.yaml")["inference/notebooks"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"l4-ts-0": 24}  # 24 > 8 physical L4s; 32 replicas advertised


def test_time_sliced_capacity_still_runs_out() -> None:
    d = decide("time-sliced.yaml")["inference/more-notebooks"]
    assert outcome(d) == NO_NODE_FIT
    assert d["message"].startswith("8 of 10 members fit at once (on 1 node)")


def test_renamed_shared_gpu_resource_is_its_own_resource() -> None:
    d = decide("time-sliced.yaml")["inference/shared-serve"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"l4-shared-0": 4}


# -- 13. effective pod request ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "fits"),
    [
        # max(3 + 2, 6 + 2) + 1 = 9 cpu: the sidecar started first runs beside the init container.
        pytest.param("pods/sidecar-first", False, id="sidecar-runs-beside-later-init"),
        # max(3 + 2, 6) + 1 = 7 cpu: the init container ran before the sidecar started.
        pytest.param("pods/setup-first", True, id="init-before-sidecar"),
        # max(3 + 2, 6) + 3 = 9 cpu: overhead is added on top.
        pytest.param("pods/big-overhead", False, id="overhead-added"),
        # 7 + 2 = 9 cpu: a sidecar keeps running beside the app containers.
        pytest.param("pods/sidecar-and-app", False, id="sidecar-beside-app"),
    ],
)
def test_effective_pod_request_with_init_containers_sidecars_and_overhead(
    workload: str, fits: bool
) -> None:
    d = decide("sidecar.yaml")[workload]
    if fits:
        assert outcome(d) == ADMIT
        assert d["placement"] == {"cpu-b": 1}
    else:
        assert outcome(d) == NO_NODE_FIT
        assert "Insufficient cpu (1 node)" in d["message"]


# -- 14. Kueue's queue label ---------------------------------------------------------------------


def test_kueue_queue_name_label_is_accepted() -> None:
    d = decide("queue-refs.yaml")["serving/migrated"]
    assert d["queue"] == "online"
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-0": 1}


def test_our_queue_label_wins_over_kueues() -> None:
    d = decide("queue-refs.yaml")["serving/both"]
    assert d["queue"] == "online"
    assert outcome(d) == ADMIT


def test_job_without_a_queue_label_is_not_ours_to_decide() -> None:
    assert "serving/unqueued" not in decide("queue-refs.yaml")


# -- 15. PodGroups -------------------------------------------------------------------------------


def test_podgroup_min_member_overrides_gang_size() -> None:
    # parallelism 4 x 8 GPUs cannot fit on three nodes; minMember 2 can.
    d = decide("podgroups.yaml")["ml/elastic"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-0": 1, "gpu-1": 1}
    assert placed_on(d, 2)
    assert d["message"].startswith("2 members placed")


def test_podgroup_requeue_at_in_the_future_is_backoff() -> None:
    d = decide("podgroups.yaml", now="2026-12-01T00:00:00Z")["ml/backoff"]
    assert outcome(d) == ("Pending", "Backoff")
    assert d["message"] == (
        "requeued 3 times after eviction; eligible again at 2026-12-01T06:00:00+00:00 (in 6h)"
    )


def test_podgroup_requeue_at_before_now_is_considered_normally() -> None:
    d = decide("podgroups.yaml", now="2026-12-01T07:00:00Z")["ml/backoff"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-2": 1}


def test_failed_podgroup_is_deactivated() -> None:
    d = decide("podgroups.yaml")["ml/retired"]
    assert outcome(d) == ("Pending", "Deactivated")
    assert d["message"].startswith("evicted and requeued 6 times, past the queue's backoffLimit")


def test_podgroup_owned_by_another_job_uid_is_ignored() -> None:
    # Its minMember 5 would make the 2-pod Job invalid if it were applied.
    d = decide("podgroups.yaml")["ml/stale-owner"]
    assert outcome(d) == ADMIT
    assert sum(d["placement"].values()) == 2


def test_requeue_at_without_a_zone_is_utc_whatever_the_local_zone(tmp_path: Path) -> None:
    text = Path(dump("podgroups.yaml")).read_text()
    assert 'requeueAt: "2026-12-01T06:00:00Z"' in text
    naive = tmp_path / "naive.yaml"
    naive.write_text(text.replace('"2026-12-01T06:00:00Z"', '"2026-12-01T06:00:00"'))
    # 07:00 UTC is after 06:00 UTC; in Los Angeles 06:00 local would be 14:00 UTC.
    run = run_script(
        "plan", "-o", "json", "-f", str(naive), "--now", "2026-12-01T07:00:00Z",
        env={"TZ": "America/Los_Angeles"},
    )  # fmt: skip
    assert run.code == 0, run.stderr
    decisions = by_workload(json.loads(run.stdout)["decisions"])
    assert outcome(decisions["ml/backoff"]) == ADMIT


# -- 16. planned placements of admitted gangs --------------------------------------------------


def test_planned_placement_of_an_admitted_gang_reserves_capacity_for_unbound_members() -> None:
    d = decide("reservations.yaml")["ml/next-2x8"]
    # gpu-1's 4 free GPUs are held for warming-up's unbound member: only gpu-2 has 8.
    assert outcome(d) == NO_NODE_FIT
    assert d["message"].startswith("1 of 2 members fit at once (on 1 node)")


def test_planned_member_that_is_already_bound_is_not_counted_twice() -> None:
    decisions = decide("reservations.yaml")
    assert decisions["ml/half-4"]["placement"] == {"gpu-0": 1}
    assert decisions["ml/another-4"]["placement"] == {"gpu-1": 1}


# -- 17. which pods use node capacity ------------------------------------------------------------


def test_succeeded_and_failed_pods_free_their_nodes() -> None:
    d = decide("pod-accounting.yaml")["ml/two-full"]
    assert outcome(d) == ADMIT
    assert d["placement"] == {"gpu-0": 1, "gpu-1": 1}


def test_running_pod_outside_any_queue_still_uses_node_capacity() -> None:
    decisions = decide("pod-accounting.yaml")
    needs_3 = decisions["ml/needs-3"]
    assert outcome(needs_3) == NO_NODE_FIT
    assert needs_3["message"] == (
        "0 of 1 members fit at once; binding constraint: Insufficient nvidia.com/gpu (3 nodes)"
    )
    assert decisions["ml/needs-2"]["placement"] == {"gpu-2": 1}


def test_unbound_pod_uses_no_capacity(tmp_path: Path) -> None:
    documents = yaml.safe_load(Path(dump("pod-accounting.yaml")).read_text())
    items = documents["items"]
    stuck = [i for i in items if i["metadata"]["name"] == "stuck-0"]
    assert len(stuck) == 1
    assert "nodeName" not in stuck[0]["spec"]
    without = tmp_path / "without-unbound.yaml"
    without.write_text(yaml.safe_dump({**documents, "items": [i for i in items if i not in stuck]}))
    assert plan_json("pod-accounting.yaml") == plan_json(str(without))


# -- 18. input forms and output ---------------------------------------------------------------


SMALL = "forms/small-cluster.yaml"
SMALL_EXPECTED = {
    "lab/pair": (ADMIT, {"gpu-0": 2}),
    "lab/full-8": (NO_NODE_FIT, None),
    "lab/pick-2": (ADMIT, {"gpu-1": 1}),
}


def assert_small_cluster(decisions: list[dict[str, Any]]) -> None:
    assert [d["workload"] for d in decisions] == list(SMALL_EXPECTED)
    for d in decisions:
        expected, placement = SMALL_EXPECTED[d["workload"]]
        assert outcome(d) == expected
        assert d.get("placement") == placement


def test_json_output_is_exactly_decisions_with_placement_only_on_admit() -> None:
    decisions = plan_json(SMALL)
    keys = {"kind", "workload", "queue", "decision", "reason", "message"}
    for d in decisions:
        assert set(d) == (keys | {"placement"} if d["decision"] == "Admit" else keys)
    assert_small_cluster(decisions)


def test_multi_document_yaml_is_read() -> None:
    assert_small_cluster(plan_json(SMALL))


def test_kind_list_yaml_is_read() -> None:
    # cohort.yaml is one `kind: List`; its four decisions need every item.
    assert len(plan_json("cohort.yaml")) == 4


def test_node_list_and_json_list_in_two_files_plan_like_the_single_file() -> None:
    split = plan_json("forms/small-cluster-nodes.yaml", "forms/small-cluster-rest.json")
    assert split == plan_json(SMALL)
    assert_small_cluster(split)


def test_dump_from_stdin_with_dash() -> None:
    text = Path(dump(SMALL)).read_text()
    result = invoke("plan", "-o", "json", "-f", "-", "--now", NOW, stdin=text)
    assert result.exit_code == 0, result.stderr
    assert_small_cluster(json.loads(result.stdout)["decisions"])


def test_stdin_combines_with_files() -> None:
    nodes = Path(dump("forms/small-cluster-nodes.yaml")).read_text()
    result = invoke(
        "plan", "-o", "json", "-f", "-", "-f", dump("forms/small-cluster-rest.json"), stdin=nodes
    )
    assert result.exit_code == 0, result.stderr
    assert_small_cluster(json.loads(result.stdout)["decisions"])


def test_ignore_unknown_skips_service_and_configmap() -> None:
    decisions = plan_json(SMALL, "forms/extras.yaml", extra=("--ignore-unknown",))
    assert decisions == plan_json(SMALL)


def test_table_output_lists_workloads_and_a_summary_line() -> None:
    result = invoke("plan", "-f", dump(SMALL), "-f", dump("forms/extras.yaml"), "--ignore-unknown")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "#",
        "WORKLOAD",
        "QUEUE",
        "DECISION",
        "REASON",
        "PLACEMENT",
        "/",
        "WHY",
    ]
    rows = [line.split(maxsplit=5) for line in lines[1:-1]]
    assert [row[:5] for row in rows] == [
        ["1", "lab/pair", "default", "Admit", "Admitted"],
        ["2", "lab/full-8", "default", "Pending", "NoNodeFit"],
        ["3", "lab/pick-2", "default", "Admit", "Admitted"],
    ]
    assert rows[0][5].strip() == "gpu-0: 2"
    assert lines[-1] == (
        "3 pending gangs over 2 nodes: 2 admit, 1 pending, 0 invalid "
        "(2 objects of other kinds skipped)"
    )


def test_table_output_is_not_cut_to_80_columns_when_piped() -> None:
    result = invoke("plan", "-f", dump("fragmentation.yaml"))
    assert result.exit_code == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "ml/train-2x4" in line)
    # The whole explanation is on the workload's own line, and nothing is elided.
    assert row.rstrip().endswith(
        "12 nvidia.com/gpu free on eligible nodes but at most 3 on any one node, "
        "and each member needs 4"
    )
    assert "…" not in result.stdout


def test_table_output_prints_field_paths_with_brackets_verbatim() -> None:
    # rich would read "[trainer]" as markup if the renderer did not escape it.
    result = invoke("plan", "-f", dump("invalid.yaml"))
    assert result.exit_code == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "ml/no-limit" in line)
    assert "spec.template.spec.containers[trainer].resources.limits[nvidia.com/gpu]: " in row
    assert result.stdout.splitlines()[-1] == (
        "8 pending gangs over 1 nodes: 1 admit, 0 pending, 7 invalid"
    )


def test_help_for_the_program_and_for_plan() -> None:
    top = invoke("--help")
    assert top.exit_code == 0
    assert "Gang admission for Kubernetes GPU clusters" in top.stdout
    assert re.search(r"^\s+plan\s", top.stdout, re.MULTILINE)
    sub = invoke("plan", "--help")
    assert sub.exit_code == 0
    for option in ("-f, --filename DUMP", "-o, --output", "--now TIME", "--ignore-unknown"):
        assert option in sub.stdout


def test_help_from_the_console_script() -> None:
    run = run_script("plan", "-h")
    assert run.code == 0
    assert run.stdout.startswith("Usage: queue-controller plan [OPTIONS]")
    assert run.stderr == ""


def bundled_promises() -> dict[str, tuple[str, str] | None]:
    """What the bundled example's comments say plan decides for each Job.

    ``# Job ns/name: plan says ... -> NoNodeFit`` gives (verdict, reason);
    None means the Job is not plan's to decide.
    """
    verdicts = {"Admit": ADMIT, "Invalid": INVALID}
    pending = (
        "NoNodeFit",
        "QuotaExceeded",
        "WaitingForHead",
        "QueueNotFound",
        "TeamQuotaNotFound",
        "Backoff",
        "Deactivated",
    )
    promises: dict[str, tuple[str, str] | None] = {}
    for line in bundled_example()[1].splitlines():
        match = re.fullmatch(r"# Job (\S+): plan says (.*)", line)
        if match is None:
            continue
        workload, says = match.groups()
        words = re.findall(r"[A-Za-z]+", says)
        found = [verdicts.get(w) or ("Pending", w) for w in words if w in verdicts or w in pending]
        assert len(found) <= 1, line
        promises[workload] = found[0] if found else None
        assert found or "not ours" in says, line
    return promises


def test_plan_without_files_runs_the_bundled_example_as_its_comments_say() -> None:
    promises = bundled_promises()
    assert len(promises) >= 15
    decisions = by_workload(plan_json(now=None))
    assert {w: outcome(d) for w, d in decisions.items()} == {
        w: p for w, p in promises.items() if p is not None
    }
    assert "default/unqueued" in promises  # promised to be left alone, and it is
    # Fragmentation: 10 H100 GPUs free, at most 3 per node, members need 4.
    assert (
        "10 nvidia.com/gpu free on eligible nodes but at most 3 on any one node"
        in decisions["prod/train-bert"]["message"]
    )
    assert "borrowing 2 nvidia.com/gpu" in decisions["research/distill"]["message"]
    # a100-mig-1 is mid-reconfiguration: only a100-mig-0's 8 mig-2g.20gb slices count.
    assert decisions["research/mig-sweep"]["message"].startswith("8 of 10 members fit at once")
    assert decisions["prod/mig-rerank"]["placement"] == {"a100-mig-0": 3}
    assert decisions["inference/llm-serve"]["placement"] == {"l4-1": 2}


def test_console_script_plans_the_bundled_example() -> None:
    run = run_script("plan", "-o", "json")
    assert run.code == 0, run.stderr
    assert run.stderr == ""
    decisions = json.loads(run.stdout)["decisions"]
    promises = bundled_promises()
    # The two batch-high (1000) Jobs come first; the rest have the default batch-low.
    assert [d["workload"] for d in decisions[:2]] == ["prod/train-bert", "prod/eval-bert"]
    assert {d["workload"]: outcome(d) for d in decisions} == {
        w: p for w, p in promises.items() if p is not None
    }


# -- 19. determinism ---------------------------------------------------------------------------


def test_same_dump_twice_gives_identical_json() -> None:
    first = invoke("plan", "-o", "json", "--now", NOW)
    second = invoke("plan", "-o", "json", "--now", NOW)
    assert first.exit_code == second.exit_code == 0
    assert first.stdout == second.stdout


@pytest.mark.parametrize("name", ["bundled", "best-fit.yaml", "node-filters.yaml"])
def test_reordered_documents_give_identical_json(name: str, tmp_path: Path) -> None:
    if name == "bundled":
        text = bundled_example()[1]
        baseline = plan_json()
    else:
        text = Path(dump(name)).read_text()
        baseline = plan_json(name)
    documents: list[Any] = []
    for document in yaml.safe_load_all(text):
        # Flatten lists too, so list items move between documents.
        documents.extend(
            document.get("items", []) if document["kind"].endswith("List") else [document]
        )
    for seed in (1, 2):
        random.Random(seed).shuffle(documents)
        shuffled = tmp_path / f"shuffled-{seed}.yaml"
        shuffled.write_text(yaml.safe_dump_all(documents))
        assert plan_json(str(shuffled)) == baseline
    documents.reverse()
    reversed_ = tmp_path / "reversed.yaml"
    reversed_.write_text(yaml.safe_dump_all(documents))
    assert plan_json(str(reversed_)) == baseline


def test_order_of_files_does_not_change_the_plan() -> None:
    forward = plan_json("forms/small-cluster-nodes.yaml", "forms/small-cluster-rest.json")
    backward = plan_json("forms/small-cluster-rest.json", "forms/small-cluster-nodes.yaml")
    assert forward == backward


def test_every_dump_is_documented_and_plans_cleanly() -> None:
    names = sorted(p.relative_to(DUMPS).as_posix() for p in DUMPS.rglob("*.y*ml"))
    assert len(names) >= 15
    for name in names:
        assert Path(dump(name)).read_text().startswith("#"), f"{name} needs a header comment"
        # Exit code 0, JSON on stdout, nothing on stderr.
        plan_json(name, extra=("--ignore-unknown",) if name == "forms/extras.yaml" else ())
