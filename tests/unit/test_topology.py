"""Topology-aware gangs in the core: a required domain or nothing, the narrowest
preferred domain, slices by index, the domain that keeps whole domains whole, and
a clear word for every request that cannot be met as written."""

from __future__ import annotations

from dataclasses import replace

from queue_controller.core import (
    PriorityClass,
    Reason,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.model.decisions import Decision
from queue_controller.core.model.objects import (
    Node,
    PodSet,
    Preemption,
    Queue,
    TeamQuota,
    Topology,
    TopologyMode,
    TopologyRequest,
    WithinPolicy,
)
from tests.builders import GPU, gang, gpu_node, gpus, running_pod, snapshot, template

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
TOPOLOGY = Topology("dc", (BLOCK, RACK, HOST))
QUEUE = Queue("ns", "q", "team", topology_name="dc")
FIELD = "spec.template.metadata.annotations[queue-controller.io/topology-required]"


def racks(*layout: tuple[str, str, int]) -> list[Node]:
    """Nodes of 8 GPUs, ``count`` of them in each (block, rack)."""
    nodes = []
    for block, rack, count in layout:
        for i in range(count):
            labels = {BLOCK: block, RACK: rack}
            nodes.append(gpu_node(f"{rack}-n{i}", 8, labels=labels))
    return nodes


def asking(
    name: str,
    members: int,
    gpus_each: int,
    mode: TopologyMode = TopologyMode.REQUIRED,
    level: str = RACK,
    *,
    slice_size: int = 0,
    slice_level: str = "",
    created: float = 0.0,
    priority_class: str = "",
) -> Workload:
    request = TopologyRequest(mode, level, slice_size, slice_level, field=FIELD)
    pod_template = template(gpus_each, priority_class=priority_class)
    pod_set = PodSet("main", pod_template, members, members, topology=request)
    return Workload("ns", name, "q", (pod_set,), "Job", created=created)


def decide(
    nodes: list[Node], *gangs: Workload, pods: tuple[object, ...] = (), **kw: object
) -> dict[str, Decision]:
    kw.setdefault("queues", [QUEUE])
    kw.setdefault("topologies", (TOPOLOGY,))
    result = schedule(snapshot(nodes=nodes, workloads=gangs, pods=pods, **kw))
    return {d.workload.split("/")[1]: d for d in result.decisions}


def rack_of(node: str) -> str:
    return node.split("-n")[0]


def test_a_required_rack_is_admitted_inside_one_rack() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 3))
    found = decide(nodes, asking("g", 3, 8))["g"]
    assert found.verdict is Verdict.ADMIT
    assert {rack_of(n) for n in found.placement} == {"r1"}
    assert found.domains == {"main": "b0/r1"}
    assert found.message.endswith("; in domain b0/r1")


def test_enough_gpus_over_two_racks_but_not_in_one_waits_and_says_so() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2))
    found = decide(nodes, asking("g", 3, 8))["g"]
    assert (found.verdict, found.reason) == (Verdict.PENDING, Reason.NO_NODE_FIT)
    assert found.message == (
        "32 nvidia.com/gpu free in total in Topology dc, at most 16 in any one rack "
        "(example.com/rack); the gang needs 24 in one rack"
    )


def test_without_topology_the_same_gang_spreads_over_the_racks() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2))
    plain = gang("g", 3, 8)
    found = decide(nodes, plain)["g"]
    assert found.verdict is Verdict.ADMIT
    assert {rack_of(n) for n in found.placement} == {"r0", "r1"}


def test_a_preferred_rack_falls_back_to_one_block_then_to_the_fewest_racks() -> None:
    nodes = racks(("b0", "r0", 1), ("b0", "r1", 2), ("b1", "r2", 1), ("b1", "r3", 1))
    one_rack = decide(nodes, asking("g", 2, 8, TopologyMode.PREFERRED))["g"]
    assert {rack_of(n) for n in one_rack.placement} == {"r1"}
    one_block = decide(nodes, asking("g", 3, 8, TopologyMode.PREFERRED))["g"]
    assert one_block.domains == {"main": "b0"}
    assert {rack_of(n) for n in one_block.placement} == {"r0", "r1"}
    everywhere = decide(nodes, asking("g", 5, 8, TopologyMode.PREFERRED))["g"]
    assert everywhere.verdict is Verdict.ADMIT
    assert everywhere.domains == {"main": ""}
    assert "spread over top-level domains" in everywhere.message


def test_the_rack_already_in_use_is_taken_before_an_empty_one() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2))
    busy = (running_pod("r1-n0", 4),)
    found = decide(nodes, asking("g", 1, 4), pods=busy)["g"]
    assert found.placement == {"r1-n0": 1}  # r0 stays whole for a gang that needs a rack


def test_a_whole_block_is_kept_whole_before_a_whole_rack() -> None:
    # b0 is whole; in b1, r2 is in use and r3 is whole.  A 1-node gang breaking a
    # rack in b1 leaves the whole block b0 to a gang that needs a block.
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2), ("b1", "r2", 1), ("b1", "r3", 2))
    busy = (running_pod("r2-n0", 8),)
    found = decide(nodes, asking("g", 2, 8), pods=busy)["g"]
    assert {rack_of(n) for n in found.placement} == {"r3"}


def test_among_racks_in_use_the_one_with_the_least_room_is_taken() -> None:
    nodes = racks(("b0", "r0", 3), ("b0", "r1", 3))
    busy = (running_pod("r0-n0", 8), running_pod("r1-n0", 8), running_pod("r1-n1", 8))
    found = decide(nodes, asking("g", 1, 8), pods=busy)["g"]
    assert {rack_of(n) for n in found.placement} == {"r1"}


def test_slices_each_stay_inside_one_rack() -> None:
    # Six GPUs free in each of two racks: a gang of 8 one-GPU members fits over both,
    # and slices of 4 must not be cut across them.
    nodes = racks(("b0", "r0", 1), ("b0", "r1", 1))
    busy = (running_pod("r0-n0", 2), running_pod("r1-n0", 2))
    gang_of_8 = asking("g", 8, 1, TopologyMode.UNCONSTRAINED, "", slice_size=4, slice_level=RACK)
    found = decide(nodes, gang_of_8, pods=busy)["g"]
    assert found.verdict is Verdict.ADMIT
    assert found.slices["main"] == ({"r0-n0": 4}, {"r1-n0": 4})
    slices_of_3 = asking("h", 9, 1, TopologyMode.UNCONSTRAINED, "", slice_size=3, slice_level=RACK)
    refused = decide(nodes, slices_of_3, pods=busy)["h"]
    assert refused.verdict is Verdict.ADMIT  # two slices of 3 per rack: 4 >= 3
    assert all(len({rack_of(n) for n in s}) == 1 for s in refused.slices["main"])


def test_slices_per_node_put_whole_slices_on_nodes() -> None:
    nodes = racks(("b0", "r0", 3))
    busy = (running_pod("r0-n0", 5), running_pod("r0-n1", 5), running_pod("r0-n2", 4))
    # Free 3, 3, 4 GPUs: ten one-GPU members would fit, but slices of 2 per node only 8.
    found = decide(
        nodes,
        asking("g", 10, 1, TopologyMode.REQUIRED, RACK, slice_size=2, slice_level=HOST),
        pods=busy,
    )["g"]
    assert found.verdict is Verdict.PENDING
    assert found.message == (
        "the gang needs 5 slices of 2 members, each inside one hostname; at most 4 fit now"
    )
    fits = decide(
        nodes,
        asking("g", 8, 1, TopologyMode.REQUIRED, RACK, slice_size=2, slice_level=HOST),
        pods=busy,
    )["g"]
    assert fits.verdict is Verdict.ADMIT
    assert fits.placement == {"r0-n0": 2, "r0-n1": 2, "r0-n2": 4}
    assert all(len(s) == 1 and sum(s.values()) == 2 for s in fits.slices["main"])


def test_a_required_node_is_one_node() -> None:
    nodes = racks(("b0", "r0", 2))
    found = decide(nodes, asking("g", 4, 2, level=HOST))["g"]
    assert len(found.placement) == 1
    assert found.domains["main"] == f"b0/r0/{next(iter(found.placement))}"
    refused = decide(nodes, asking("g", 5, 2, level=HOST))["g"]
    assert refused.reason is Reason.NO_NODE_FIT
    assert "at most 8 in any one hostname" in refused.message


def test_nodes_without_the_topology_s_labels_are_not_used() -> None:
    nodes = [*racks(("b0", "r0", 1)), gpu_node("unlabelled", 8)]
    found = decide(nodes, asking("g", 2, 8, TopologyMode.UNCONSTRAINED, ""))["g"]
    assert found.verdict is Verdict.PENDING
    plain = decide(nodes, gang("p", 2, 8))["p"]
    assert plain.verdict is Verdict.ADMIT


def test_requests_that_cannot_be_met_as_written_name_where_they_were_written() -> None:
    nodes = racks(("b0", "r0", 2))
    no_topology = decide(nodes, asking("g", 1, 1), queues=[replace(QUEUE, topology_name="")])
    assert no_topology["g"].verdict is Verdict.INVALID
    assert no_topology["g"].message == (
        f"{FIELD}: asks for a topology, but Queue ns/q names no Topology (spec.topologyName)"
    )
    missing = decide(nodes, asking("g", 1, 1), topologies=())["g"]
    assert (missing.verdict, missing.reason) == (Verdict.PENDING, Reason.TOPOLOGY_NOT_FOUND)
    assert missing.message == "Queue ns/q uses Topology 'dc', which does not exist"
    unknown = decide(nodes, asking("g", 1, 1, level="example.com/row"))["g"]
    assert unknown.verdict is Verdict.INVALID
    assert unknown.message == (
        f"{FIELD}: 'example.com/row' is not a level of Topology dc (its levels: "
        "example.com/block, example.com/rack, kubernetes.io/hostname)"
    )
    broader = decide(nodes, asking("g", 4, 1, slice_size=2, slice_level=BLOCK))["g"]
    assert "slice level 'example.com/block' is broader than" in broader.message
    uneven = decide(nodes, asking("g", 5, 1, slice_size=2, slice_level=RACK))["g"]
    assert uneven.verdict is Verdict.INVALID
    assert uneven.message.endswith("slice size 2 does not divide the pod set's 5 members")


def test_gangs_without_topology_are_placed_as_if_none_asked() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2), ("b1", "r2", 2))
    plain = [gang(f"p{i}", i + 1, 2 + 2 * (i % 3), created=float(i)) for i in range(6)]
    refused = asking("t", 99, 8, created=-1.0)  # tried first, refused, changes nothing
    alone = decide(nodes, *plain)
    beside = decide(nodes, refused, *plain)
    assert {k: v.placement for k, v in beside.items() if k != "t"} == {
        k: v.placement for k, v in alone.items()
    }


def test_preemption_frees_a_whole_rack_for_a_required_rack_gang() -> None:
    # Low-priority one-node gangs fill both racks; the newest sit in different racks.
    # The gang needing a rack evicts the gangs of one rack, not the newest ones.
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2))
    low, pods = [], []
    for i, node in enumerate(["r0-n0", "r1-n0", "r0-n1", "r1-n1"]):
        workload = gang(
            f"low{i}",
            1,
            pod_template=template(8, priority_class="low"),
            phase=WorkloadPhase.ADMITTED,
            created=float(i),
            placement={node: 1},
        )
        low.append(workload)
        pods.append(running_pod(node, 8, name=f"low{i}-0", workload=workload.key))
    team = TeamQuota(
        "team",
        {GPU: gpus(32)},
        preemption=Preemption(within_team_quota=WithinPolicy.LOWER_PRIORITY),
    )
    found = decide(
        nodes,
        *low,
        asking("big", 2, 8, created=10.0, priority_class="high"),
        pods=tuple(pods),
        quotas=[team],
        priority_classes=[PriorityClass("low", 0), PriorityClass("high", 100)],
    )["big"]
    assert found.verdict is Verdict.PREEMPT, found.message
    victims = {key.rsplit("/", 1)[1] for key, _ in found.victims}
    assert victims in ({"low0", "low2"}, {"low1", "low3"})
    racks_freed = {rack_of(n) for plan in found.nominated.values() for n in plan}
    assert len(racks_freed) == 1


def test_a_preemptor_admitted_on_its_nominated_room_keeps_its_domain_and_slices() -> None:
    nodes = racks(("b0", "r0", 2))
    waiting = asking("g", 4, 4, slice_size=2, slice_level=HOST)
    held = replace(waiting, nominated={"main": {"r0-n0": 2, "r0-n1": 2}})
    found = decide(nodes, held)["g"]
    assert found.verdict is Verdict.ADMIT
    assert found.domains == {"main": "b0/r0"}
    assert found.slices["main"] == ({"r0-n0": 2}, {"r0-n1": 2})
