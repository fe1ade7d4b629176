"""DRA claims in the admission cycle: gang fit on named nodes, quota, and the messages."""

from __future__ import annotations

from dataclasses import replace

from queue_controller.core.cycle.admission import schedule
from queue_controller.core.devices.dracel import DEFAULT_CACHE
from queue_controller.core.model.decisions import Decision, Reason, Verdict
from queue_controller.core.model.dra import DeviceClass, DeviceRequest, ResourceClaim
from queue_controller.core.model.objects import (
    BoundPod,
    GpuHealth,
    PodClaim,
    Preemption,
    PriorityClass,
    TeamQuota,
    UnhealthyGpu,
    WithinPolicy,
    WorkloadPhase,
)
from tests.unit.dra_cluster import (
    A100,
    GPU_CLASS,
    H100,
    NAMESPACE,
    NV,
    exactly,
    from_template,
    held,
    job,
    node,
    product_is,
    snapshot,
    template,
)

H100_X4 = template("h100-x4", exactly("gpus", 4, product_is(H100)))
EIGHT_H100 = [H100] * 8


def decide(snap: object) -> dict[str, Decision]:
    return {d.workload.split("/")[-1]: d for d in schedule(snap).decisions}  # type: ignore[arg-type]


def test_a_gang_is_admitted_onto_nodes_with_enough_matching_devices() -> None:
    layout = {
        "a100-0": [A100] * 8,
        "h100-0": [H100] * 3,
        "h100-1": [H100] * 4,
        "h100-2": [H100] * 4,
    }
    decision = decide(snapshot(layout, job("train", from_template("h100-x4")), templates=[H100_X4]))
    assert decision["train"].verdict is Verdict.ADMIT
    # Neither the A100s (wrong product) nor the node with 3 H100s can take a member.
    assert dict(decision["train"].placement) == {"h100-1": 1, "h100-2": 1}


def test_the_dra_fragmentation_trap_waits_and_names_the_claim_and_request() -> None:
    layout = {f"h100-{i}": EIGHT_H100 for i in range(3)}
    # 5 of each node's 8 GPUs are held: 9 free in all, 3 on each node.
    claims = [held(f"busy-{i}", f"h100-{i}", range(5)) for i in range(3)]
    decision = decide(
        snapshot(layout, job("train", from_template("h100-x4")), templates=[H100_X4], claims=claims)
    )["train"]
    assert decision.verdict is Verdict.PENDING
    assert decision.reason is Reason.NO_NODE_FIT
    assert "request gpus of ResourceClaimTemplate h100-x4" in decision.message
    assert "9 gpu.nvidia.com devices" in decision.message
    assert "at most 3 on any one node, and each member needs 4" in decision.message


def test_gangs_admitted_in_one_cycle_do_not_share_devices() -> None:
    layout = {"h100-0": EIGHT_H100, "h100-1": EIGHT_H100}
    gangs = [job(f"g{i}", from_template("h100-x4"), created=float(i)) for i in range(5)]
    decisions = decide(snapshot(layout, *gangs, templates=[H100_X4]))
    admitted = [name for name, d in decisions.items() if d.verdict is Verdict.ADMIT]
    assert sorted(admitted) == ["g0", "g1"]  # 16 GPUs, 8 per gang
    assert decisions["g2"].reason is Reason.NO_NODE_FIT


def test_planned_members_not_yet_bound_hold_their_devices() -> None:
    running = replace(
        job("running", from_template("h100-x4")),
        phase=WorkloadPhase.ADMITTED,
        placement={"h100-0": 2},
    )
    waiting = job("next", from_template("h100-x4"), created=5.0)
    decision = decide(snapshot({"h100-0": EIGHT_H100}, running, waiting, templates=[H100_X4]))
    assert decision["next"].reason is Reason.NO_NODE_FIT


def test_claims_are_charged_to_the_device_class_or_its_quota_resource() -> None:
    layout = {"h100-0": EIGHT_H100, "h100-1": EIGHT_H100}
    gang = job("train", from_template("h100-x4"))
    result = schedule(snapshot(layout, gang, templates=[H100_X4]))
    assert result.quota_usage["team-a"][NV] == 8_000
    assert not any(name.startswith("dra.") for name in result.quota_usage["team-a"])
    # Mapped onto nvidia.com/gpu, DRA GPUs and device-plugin GPUs share one quota.
    mapped = replace(GPU_CLASS, quota_resource="nvidia.com/gpu")
    plugin = job("plugin", requests={"nvidia.com/gpu": "4"}, members=1, created=0.5)
    snap = snapshot(
        layout,
        gang,
        plugin,
        templates=[H100_X4],
        classes=[mapped],
        quota={"nvidia.com/gpu": 10},
        extra_nodes=[node("dp-0", **{"nvidia.com/gpu": 8_000})],
    )
    decisions = decide(snap)
    assert decisions["plugin"].verdict is Verdict.ADMIT
    assert decisions["train"].reason is Reason.QUOTA_EXCEEDED  # 4 + 8 > 10


def test_a_claim_shared_by_every_member_is_charged_once() -> None:
    shared = ResourceClaim(NAMESPACE, "shared", (exactly("gpus", 2, product_is(H100)),))
    gang = job("train", PodClaim("gpus", claim_name="shared"), members=4)
    result = schedule(snapshot({"h100-0": EIGHT_H100}, gang, claims=[shared]))
    assert result.decisions[0].verdict is Verdict.ADMIT
    assert result.quota_usage["team-a"][NV] == 2_000


def test_bad_claims_make_the_gang_invalid_naming_the_template_and_expression() -> None:
    broken = template("broken", exactly("gpus", 4, f'device.attributes["{NV}"].productName =='))
    gangs = [
        job("broken", from_template("broken")),
        job("missing", from_template("nowhere")),
        job("no-class", from_template("no-class")),
    ]
    no_class = template("no-class", exactly("gpus", 1, device_class="tpu.example.com"))
    decisions = decide(snapshot({"h100-0": EIGHT_H100}, *gangs, templates=[broken, no_class]))
    assert all(d.verdict is Verdict.INVALID for d in decisions.values())
    message = decisions["broken"].message
    assert message.startswith("spec.template.spec.resourceClaims[0]: ResourceClaimTemplate broken")
    assert "request gpus" in message
    assert "productName ==' does not parse" in message
    assert "ResourceClaimTemplate team-a/nowhere does not exist" in decisions["missing"].message
    assert "DeviceClass 'tpu.example.com', which does not exist" in decisions["no-class"].message


def test_a_selector_the_class_cannot_evaluate_matches_nothing() -> None:
    # The attribute does not exist: a run-time error, so no device matches (as the
    # scheduler would refuse to allocate), not an invalid gang.
    odd = template("odd", exactly("gpus", 1, f'device.attributes["{NV}"].nonesuch == "x"'))
    decision = decide(
        snapshot({"h100-0": EIGHT_H100}, job("odd", from_template("odd")), templates=[odd])
    )
    assert decision["odd"].reason is Reason.NO_NODE_FIT


def test_competing_requests_of_one_pod_are_checked_together() -> None:
    # 4 H100 + 4 A100: 5 of any GPU and 4 H100 fit one by one but need 9 devices.
    layout = {"mixed-0": [H100] * 4 + [A100] * 4}
    both = template("both", exactly("any", 5), exactly("h100", 4, product_is(H100)))
    fits = template("fits", exactly("any", 4), exactly("h100", 4, product_is(H100)))
    decisions = decide(
        snapshot(
            layout,
            job("both", PodClaim("gpus", template_name="both"), members=1),
            job("fits", PodClaim("gpus", template_name="fits"), members=1, created=2.0),
            templates=[both, fits],
        )
    )
    assert decisions["both"].reason is Reason.NO_NODE_FIT
    assert "devices wanted by both" in decisions["both"].message
    assert decisions["fits"].verdict is Verdict.ADMIT


def test_allocation_mode_all_takes_a_whole_node_per_member() -> None:
    every = template("every", DeviceRequest("gpus", NV, all_devices=True))
    layout = {"h100-0": EIGHT_H100, "h100-1": [H100] * 4, "h100-2": EIGHT_H100}
    claims = [held("busy", "h100-2", [0])]  # one GPU taken: "all" cannot be had there
    result = schedule(
        snapshot(
            layout, job("all", from_template("every"), members=2), templates=[every], claims=claims
        )
    )
    decision = result.decisions[0]
    assert dict(decision.placement) == {"h100-0": 1, "h100-1": 1}
    # Charged the most devices any one node offers, per member.
    assert result.quota_usage["team-a"][NV] == 16_000


def test_first_available_falls_back_to_the_next_alternative() -> None:
    either = template(
        "either",
        DeviceRequest(
            "gpus",
            alternatives=(
                exactly("h100", 4, product_is(H100)),
                exactly("a100", 8, product_is(A100)),
            ),
        ),
    )
    layout = {"h100-0": [H100] * 4, "a100-0": [A100] * 8}
    decision = decide(
        snapshot(layout, job("either", from_template("either"), members=2), templates=[either])
    )["either"]
    assert dict(decision.placement) == {"a100-0": 1, "h100-0": 1}


def test_gpus_reported_unhealthy_are_not_offered() -> None:
    snap = snapshot(
        {"h100-0": EIGHT_H100}, job("train", from_template("h100-x4")), templates=[H100_X4]
    )
    sick = GpuHealth(unhealthy=(UnhealthyGpu(index=0, uuid="GPU-h100-0-0"),))
    snap = replace(snap, nodes=(replace(snap.nodes[0], gpu_health=sick),))
    assert decide(snap)["train"].reason is Reason.NO_NODE_FIT  # 7 healthy < 8


def test_preempting_a_gang_frees_the_devices_its_claims_hold() -> None:
    low = replace(
        job("low", from_template("h100-x4"), created=0.0),
        phase=WorkloadPhase.ADMITTED,
        placement={"h100-0": 2},
    )
    pods = tuple(
        BoundPod(NAMESPACE, f"low-{i}", "h100-0", {"cpu": 1000, "pods": 1000}, workload=low.key)
        for i in range(2)
    )
    claims = [held(f"low-{i}", "h100-0", range(4 * i, 4 * i + 4), pod=f"low-{i}") for i in range(2)]
    high = job("high", from_template("h100-x4"), created=5.0)
    high = replace(
        high,
        pod_sets=tuple(
            replace(s, template=replace(s.template, priority_class_name="high"))
            for s in high.pod_sets
        ),
    )
    snap = snapshot({"h100-0": EIGHT_H100}, low, high, templates=[H100_X4], claims=claims)
    policy = Preemption(within_team_quota=WithinPolicy.LOWER_PRIORITY)
    quota: TeamQuota = replace(snap.quotas[0], preemption=policy)
    snap = replace(snap, pods=pods, quotas=(quota,), priority_classes=(PriorityClass("high", 100),))
    decision = decide(snap)["high"]
    assert decision.verdict is Verdict.PREEMPT
    assert [key for key, _ in decision.victims] == [low.key]


def test_selectors_run_once_per_kind_of_device_not_per_device() -> None:
    layout = {f"h100-{i}": EIGHT_H100 for i in range(200)}
    fresh = replace(H100_X4, requests=(exactly("gpus", 4, product_is(H100) + " && true"),))
    before = DEFAULT_CACHE.evaluations
    decide(snapshot(layout, job("train", from_template("h100-x4")), templates=[fresh]))
    # 1,600 GPUs, each with its own uuid and index: one kind for the selectors.
    assert DEFAULT_CACHE.evaluations - before <= 2


def test_a_class_of_other_devices_is_not_matched() -> None:
    mig = DeviceClass("mig.nvidia.com", (f'device.attributes["{NV}"].type == "mig"',))
    want = template("mig", exactly("slices", 1, device_class="mig.nvidia.com"))
    decision = decide(
        snapshot(
            {"h100-0": EIGHT_H100},
            job("m", from_template("mig")),
            templates=[want],
            classes=[GPU_CLASS, mig],
        )
    )["m"]
    assert decision.reason is Reason.NO_NODE_FIT


def test_a_selector_that_runs_to_a_non_bool_makes_only_its_gangs_invalid() -> None:
    # `index` is an int: only running the selector shows its result is not a bool.
    # Kubernetes' type check refuses it when written; here the gangs that ask for
    # it are InvalidSpec, named with the claim, and the cycle goes on for the rest.
    bad = template("by-index", exactly("gpus", 1, f'device.attributes["{NV}"].index'))
    decisions = decide(
        snapshot(
            {"h100-0": EIGHT_H100},
            job("bad", from_template("by-index"), created=1.0),
            job("also-bad", from_template("by-index"), created=2.0),
            job("healthy", from_template("h100-x4"), created=3.0),
            templates=[bad, H100_X4],
        )
    )
    for name in ("bad", "also-bad"):
        assert (decisions[name].verdict, decisions[name].reason) == (
            Verdict.INVALID,
            Reason.INVALID_SPEC,
        )
        assert "ResourceClaimTemplate by-index" in decisions[name].message
        assert "resourceClaims[0]" in decisions[name].message
        assert "must evaluate to bool, not int" in decisions[name].message
    assert decisions["healthy"].verdict is Verdict.ADMIT


def test_a_device_class_selector_that_runs_to_a_non_bool_is_named_as_the_class_s() -> None:
    broken = replace(GPU_CLASS, selectors=(f'device.attributes["{NV}"].productName',))
    decisions = decide(
        snapshot(
            {"h100-0": EIGHT_H100},
            job("train", from_template("h100-x4")),
            templates=[H100_X4],
            classes=[broken],
        )
    )
    assert decisions["train"].verdict is Verdict.INVALID
    assert f"DeviceClass {NV}:" in decisions["train"].message
    assert "must evaluate to bool, not string" in decisions["train"].message
