"""Placement over equivalence classes: exact feasibility, and the choice of nodes."""

import pytest

from queue_controller.core.model.objects import Node, PodTemplate, Taint, Toleration
from queue_controller.core.placement.fit import EquivalenceIndex
from queue_controller.core.placement.podscan import PodByPodPlacer
from queue_controller.core.placement.shapes import GangShape, Placement, Placer, Shortfall, shape_of
from queue_controller.core.rules.requests import pod_request
from tests.builders import GPU, gpu_node, template

PLACERS = [EquivalenceIndex, PodByPodPlacer]


def shape(pod: PodTemplate) -> GangShape:
    return shape_of(pod, pod_request(pod))


def used_gpus(**per_node: int) -> dict[str, dict[str, int]]:
    return {name.replace("_", "-"): {GPU: n * 1000} for name, n in per_node.items()}


def index(
    nodes: list[Node], used: dict[str, dict[str, int]], *pods: PodTemplate
) -> EquivalenceIndex:
    return EquivalenceIndex(nodes, used, [shape(p) for p in pods])


def place(placer: Placer, pod: PodTemplate, count: int) -> dict[str, int]:
    outcome = placer.try_place(shape(pod), count)
    assert isinstance(outcome, Placement), outcome
    return dict(outcome.nodes)


@pytest.mark.parametrize("make", PLACERS)
def test_feasibility_is_exact_for_identical_members(make) -> None:  # type: ignore[no-untyped-def]
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    pod = template(3)
    placer = make(nodes, used_gpus(n0=2, n1=5, n2=0), [shape(pod)])
    # free 6, 3, 8 -> 2 + 1 + 2 = 5 members of 3 GPUs
    assert isinstance(placer.try_place(shape(pod), 5), Placement)
    outcome = placer.try_place(shape(pod), 6)
    assert isinstance(outcome, Shortfall)
    assert (outcome.fits, outcome.needed) == (5, 6)


def test_whole_gang_on_one_node_uses_the_best_fit() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    pod = template(1)
    placer = index(nodes, used_gpus(n0=0, n1=5, n2=4, n3=6), pod)
    # 3 one-GPU members: n1 has exactly 3 free; n2 would keep 1 spare, n0 is empty.
    assert place(placer, pod, 3) == {"n1": 3}


def test_best_fit_prefers_a_used_node_over_an_empty_one_on_a_tie() -> None:
    nodes = [gpu_node("empty", 4), gpu_node("used", 8)]
    pod = template(4)
    placer = index(nodes, used_gpus(used=4), pod)
    assert place(placer, pod, 1) == {"used": 1}


def test_big_gang_fills_whole_nodes_first_and_uses_fewest_nodes() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(6)]
    pod = template(1)
    placer = index(nodes, used_gpus(n0=6, n1=6, n2=6, n3=6), pod)
    # 18 one-GPU members: two empty nodes (8 + 8) then 2 on a partly used node.
    placement = place(placer, pod, 18)
    assert sum(placement.values()) == 18
    assert len(placement) == 3
    assert placement["n4"] == 8
    assert placement["n5"] == 8
    assert sorted(placement) == ["n0", "n4", "n5"]  # the remainder fills n0 exactly


def test_fragmentation_trap_is_no_node_fit_with_scatter_explained() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    pod = template(4)
    placer = index(nodes, used_gpus(n0=5, n1=5, n2=6, n3=6), pod)
    outcome = placer.try_place(shape(pod), 2)
    assert isinstance(outcome, Shortfall)
    assert outcome.fits == 0
    text = outcome.explanation
    assert text.startswith("0 of 2 members fit at once")
    assert "binding constraint: Insufficient nvidia.com/gpu (4 nodes)" in text
    assert "10 nvidia.com/gpu free on eligible nodes but at most 3 on any one node" in text
    assert "each member needs 4" in text


def test_exclusions_are_counted_per_reason() -> None:
    nodes = [
        gpu_node("ok"),
        gpu_node("down", ready=False),
        gpu_node("cordoned", unschedulable=True),
        gpu_node("bad1", taints=(Taint("gpu", "NoSchedule", "broken"),)),
        gpu_node("bad2", taints=(Taint("gpu", "NoSchedule", "broken"),)),
    ]
    pod = template(8)
    outcome = index(nodes, {}, pod).try_place(shape(pod), 2)
    assert isinstance(outcome, Shortfall)
    assert outcome.fits == 1
    assert "1 of 2 members fit at once (on 1 node)" in outcome.explanation
    assert (
        "binding constraint: UntoleratedTaint gpu=broken:NoSchedule (2 nodes)"
        in outcome.explanation
    )
    assert "NotReady (1 node)" in outcome.explanation
    assert "Unschedulable (1 node)" in outcome.explanation


def test_tolerated_taint_admits() -> None:
    nodes = [gpu_node("tainted", taints=(Taint("dedicated", "NoSchedule", "ml"),))]
    pod = template(8, tolerations=(Toleration("dedicated", "Equal", "ml", "NoSchedule"),))
    assert place(index(nodes, {}, pod), pod, 1) == {"tainted": 1}


def test_cpu_only_gang_stays_off_gpu_nodes() -> None:
    nodes = [gpu_node("gpu-box", 8, cpu="64"), gpu_node("cpu-box", 0, cpu="64")]
    cpu_pod = template(0, cpu="4")
    gpu_pod = template(1)
    placer = index(nodes, {}, cpu_pod, gpu_pod)
    assert place(placer, cpu_pod, 2) == {"cpu-box": 2}


def test_node_selector_on_hostname_targets_one_node() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    pod = template(1, node_selector={"kubernetes.io/hostname": "n2"})
    assert place(index(nodes, {}, pod), pod, 3) == {"n2": 3}


def test_commit_consumes_capacity_and_invalidates_cached_counts() -> None:
    nodes = [gpu_node("a"), gpu_node("b")]
    pod = template(4)
    placer = index(nodes, {}, pod)
    assert placer.capacity(shape(pod)) == 4
    first = placer.try_place(shape(pod), 3)
    assert isinstance(first, Placement)
    placer.commit(shape(pod), first)
    assert placer.capacity(shape(pod)) == 1
    assert isinstance(placer.try_place(shape(pod), 2), Shortfall)


def test_try_place_changes_nothing() -> None:
    nodes = [gpu_node("a")]
    pod = template(2)
    placer = index(nodes, {}, pod)
    for _ in range(3):
        assert place(placer, pod, 4) == {"a": 4}


def test_cpu_or_memory_can_be_the_binding_constraint() -> None:
    nodes = [gpu_node("a", 8, cpu="10")]
    pod = template(1, cpu="4")
    outcome = index(nodes, {}, pod).try_place(shape(pod), 3)
    assert isinstance(outcome, Shortfall)
    assert outcome.fits == 2
    assert "binding constraint: Insufficient cpu" in outcome.explanation


def test_resource_absent_from_node_is_insufficient() -> None:
    nodes = [gpu_node("h100", 8)]
    pod = template(1, resource="nvidia.com/mig-1g.10gb")
    outcome = index(nodes, {}, pod).try_place(shape(pod), 1)
    assert isinstance(outcome, Shortfall)
    assert "Insufficient nvidia.com/mig-1g.10gb (1 node)" in outcome.explanation


def test_node_pod_slots_limit_members() -> None:
    node = gpu_node("small", 0, cpu="64")
    node = type(node)(
        name="small", allocatable={**node.allocatable, "pods": 2000}, conditions={"Ready": "True"}
    )
    pod = template(0, cpu="1")
    outcome = index([node], {}, pod).try_place(shape(pod), 3)
    assert isinstance(outcome, Shortfall)
    assert "Insufficient pods" in outcome.explanation


def test_mig_gang_avoids_node_being_reconfigured() -> None:
    mig = {"nvidia.com/mig-3g.40gb": "4"}
    nodes = [
        gpu_node("ready", 0, labels={"nvidia.com/mig.config.state": "success"}, extra=mig),
        gpu_node("busy", 0, labels={"nvidia.com/mig.config.state": "pending"}, extra=mig),
    ]
    pod = template(1, resource="nvidia.com/mig-3g.40gb")
    placer = index(nodes, {}, pod)
    assert place(placer, pod, 4) == {"ready": 4}
    assert isinstance(placer.try_place(shape(pod), 5), Shortfall)


def test_best_fit_reads_every_accelerator_whatever_else_is_pending() -> None:
    """Whether a node strands accelerators a gang does not use is read from the node,
    not only from the resources other pending gangs happen to ask for: a gang's place
    must not depend on which other gangs are in the cycle (the simulator leaves out
    the ones that cannot be admitted, and must get the very same decisions)."""
    one, two = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"
    mig = {one: "4", two: "2"}
    nodes = [gpu_node("a", 0, extra=mig), gpu_node("b", 0, extra=mig)]
    used = {"a": {one: 1000}, "b": {one: 1000, two: 2000}}  # a still has two 2g slices free
    small, other = template(1, resource=one), template(1, resource=two)
    alone = index(nodes, used, small)
    with_other = index(nodes, used, small, other)
    assert place(alone, small, 1) == place(with_other, small, 1) == {"b": 1}


def test_time_sliced_replicas_are_counted_as_advertised() -> None:
    nodes = [gpu_node("l4", 16, resource="nvidia.com/gpu.shared")]  # 4 GPUs x 4 replicas
    pod = template(1, resource="nvidia.com/gpu.shared")
    placer = index(nodes, {}, pod)
    assert place(placer, pod, 16) == {"l4": 16}
    assert isinstance(placer.try_place(shape(pod), 17), Shortfall)


def test_overcommitted_node_offers_nothing() -> None:
    nodes = [gpu_node("a", 4)]
    pod = template(1)
    outcome = index(nodes, used_gpus(a=6), pod).try_place(shape(pod), 1)
    assert isinstance(outcome, Shortfall)
    assert outcome.fits == 0


def test_empty_cluster_says_so() -> None:
    pod = template(1)
    outcome = index([], {}, pod).try_place(shape(pod), 1)
    assert isinstance(outcome, Shortfall)
    assert "the cluster has no nodes" in outcome.explanation


def test_both_placers_agree_on_simple_explanations() -> None:
    nodes = [gpu_node(f"n{i}") for i in range(4)]
    pod = template(4)
    used = used_gpus(n0=5, n1=5, n2=6, n3=6)
    fast = index(nodes, used, pod).try_place(shape(pod), 2)
    slow = PodByPodPlacer(nodes, used).try_place(shape(pod), 2)
    assert isinstance(fast, Shortfall)
    assert isinstance(slow, Shortfall)
    assert fast.explanation == slow.explanation


def test_explanation_of_an_oversized_member_follows_later_admissions() -> None:
    """A member larger than any node never fits, but the free GPUs it reports must stay current."""
    nodes = [gpu_node(f"n{i}") for i in range(3)]
    huge, whole = template(16), template(8)
    placer = index(nodes, {}, huge, whole)
    first = placer.try_place(shape(huge), 1)
    assert isinstance(first, Shortfall)
    assert "24 nvidia.com/gpu free on eligible nodes but at most 8" in first.explanation
    taken = placer.try_place(shape(whole), 1)
    assert isinstance(taken, Placement)
    placer.commit(shape(whole), taken)
    again = placer.try_place(shape(huge), 1)
    assert isinstance(again, Shortfall)
    assert "16 nvidia.com/gpu free on eligible nodes but at most 8" in again.explanation


def test_the_binding_constraint_is_what_stops_the_nodes_the_gang_asked_for() -> None:
    nodes = [gpu_node(f"n{i}", labels={"pool": "a" if i < 2 else "b"}) for i in range(6)]
    pod = template(8, node_selector={"pool": "a"})
    outcome = index(nodes, used_gpus(n0=4, n1=4), pod).try_place(shape(pod), 1)
    assert isinstance(outcome, Shortfall)
    assert "binding constraint: Insufficient nvidia.com/gpu (2 nodes)" in outcome.explanation
    assert "also NodeSelector didn't match (4 nodes)" in outcome.explanation


def test_a_selector_that_matches_no_node_is_itself_the_binding_constraint() -> None:
    nodes = [gpu_node("n0", unschedulable=True), gpu_node("n1")]
    pod = template(1, node_selector={"gpu": "b200"})
    outcome = index(nodes, {}, pod).try_place(shape(pod), 1)
    assert isinstance(outcome, Shortfall)
    assert outcome.explanation == (
        "0 of 1 members fit at once; binding constraint: NodeSelector didn't match (2 nodes)"
    )
