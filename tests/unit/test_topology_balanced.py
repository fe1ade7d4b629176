"""Balanced placement (a Topology's ``spec.placement: Balanced``, Kueue's
TASBalancedPlacement): a preferred gang that must be split is split evenly, over no
more domains of its level than best fit would take; anything else is placed as before."""

from __future__ import annotations

from dataclasses import replace

from queue_controller.core import Verdict, Workload, schedule
from queue_controller.core.model.decisions import Decision
from queue_controller.core.model.objects import (
    Node,
    PodSet,
    Queue,
    Topology,
    TopologyMode,
    TopologyPlacement,
    TopologyRequest,
)
from queue_controller.core.placement.topology.balanced import _tightest, _water_fill
from tests.builders import gpu_node, running_pod, snapshot, template

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
BEST_FIT = Topology("dc", (BLOCK, RACK, HOST))
BALANCED = replace(BEST_FIT, placement=TopologyPlacement.BALANCED)
QUEUE = Queue("ns", "q", "team", topology_name="dc")
PREFERRED, REQUIRED = TopologyMode.PREFERRED, TopologyMode.REQUIRED


def nodes(*layout: tuple[str, str, int, int]) -> list[Node]:
    """(block, rack, node count, GPUs per node)."""
    return [
        gpu_node(f"{rack}-n{i}", size, labels={BLOCK: block, RACK: rack})
        for block, rack, count, size in layout
        for i in range(count)
    ]


def asking(
    members: int,
    mode: TopologyMode = PREFERRED,
    level: str = RACK,
    *,
    slice_size: int = 0,
    slice_level: str = "",
) -> Workload:
    request = TopologyRequest(mode, level, slice_size, slice_level, field="annotations")
    pod_set = PodSet("main", template(1), members, members, topology=request)
    return Workload("ns", "g", "q", (pod_set,), "Job")


def decide(
    cluster: list[Node], gang: Workload, topology: Topology, pods: tuple[object, ...] = ()
) -> Decision:
    result = schedule(
        snapshot(
            nodes=cluster, workloads=(gang,), pods=pods, queues=[QUEUE], topologies=(topology,)
        )
    )
    (decision,) = result.decisions
    assert decision.verdict is Verdict.ADMIT, decision.message
    return decision


def test_kueue_s_example_twelve_over_two_domains_of_ten_go_six_and_six() -> None:
    # Two racks of one 10-GPU node: no rack holds 12, their block does.
    cluster = nodes(("b0", "r0", 1, 10), ("b0", "r1", 1, 10))
    assert decide(cluster, asking(12), BEST_FIT).placement == {"r0-n0": 10, "r1-n0": 2}
    assert decide(cluster, asking(12), BALANCED).placement == {"r0-n0": 6, "r1-n0": 6}


def test_a_gang_one_rack_holds_stays_in_one_rack_and_is_even_there() -> None:
    # r1 is the tighter rack (best fit: 8 + 4 there); balanced keeps one rack too, but
    # takes the one where both nodes can hold 6.
    cluster = nodes(("b0", "r0", 2, 8), ("b0", "r1", 2, 8))
    busy = (running_pod("r1-n1", 4),)
    best = decide(cluster, asking(12), BEST_FIT, busy)
    assert best.placement == {"r1-n0": 8, "r1-n1": 4}
    balanced = decide(cluster, asking(12), BALANCED, busy)
    assert balanced.placement == {"r0-n0": 6, "r0-n1": 6}
    assert balanced.domains == {"main": "b0/r0"}


def test_the_rest_is_dealt_one_unit_at_a_time() -> None:
    cluster = nodes(("b0", "r0", 1, 8), ("b0", "r1", 1, 8), ("b0", "r2", 1, 8))
    # 20 needs three racks: 7, 7, 6 (best fit: 8, 8, 4).
    placed = decide(cluster, asking(20), BALANCED).placement
    assert sorted(placed.values()) == [6, 7, 7]
    assert sorted(decide(cluster, asking(20), BEST_FIT).placement.values()) == [4, 8, 8]


def test_a_part_that_is_full_stays_full_and_the_rest_is_even() -> None:
    assert _water_fill([8, 8, 3], 17, 3) == [7, 7, 3]
    assert _water_fill([8, 8], 12, 6) == [6, 6]
    assert _water_fill([8, 8, 8], 20, 6) == [7, 7, 6]


def test_the_tightest_set_of_the_fewest_domains() -> None:
    # Two of (10, 8, 6, 5) holding 11: 6 + 5 has the least room.
    rooms = [(10, ("a",)), (8, ("b",)), (6, ("c",)), (5, ("d",))]
    assert sorted(_tightest(rooms, 2, 11)) == [2, 3]
    assert _tightest(rooms, 1, 7) == [1]
    assert _tightest(rooms, 1, 11) == []


def test_required_and_unconstrained_gangs_are_placed_as_best_fit_places_them() -> None:
    cluster = nodes(("b0", "r0", 2, 8), ("b0", "r1", 2, 8))
    busy = (running_pod("r1-n1", 4),)
    for gang in (asking(12, REQUIRED), asking(12, TopologyMode.UNCONSTRAINED, "")):
        best = decide(cluster, gang, BEST_FIT, busy)
        assert decide(cluster, gang, BALANCED, busy).placement == best.placement


def test_a_gang_no_block_holds_falls_back_to_best_fit() -> None:
    cluster = nodes(("b0", "r0", 1, 8), ("b1", "r1", 1, 8))
    best = decide(cluster, asking(12, level=RACK), BEST_FIT)
    assert decide(cluster, asking(12, level=RACK), BALANCED).placement == best.placement


def test_slices_stay_whole_and_the_slice_counts_are_even() -> None:
    # Slices of 2 per host, preferred block: 12 slices over the two racks of b0 (8
    # slices each) as 6 and 6, where best fit takes 8 and 4.
    cluster = nodes(("b0", "r0", 2, 8), ("b0", "r1", 2, 8))
    gang = asking(24, level=BLOCK, slice_size=2, slice_level=HOST)
    decision = decide(cluster, gang, BALANCED)
    per_rack: dict[str, int] = {}
    for node, members in decision.placement.items():
        assert members % 2 == 0
        per_rack[node.split("-n")[0]] = per_rack.get(node.split("-n")[0], 0) + members
    assert per_rack == {"r0": 12, "r1": 12}
    assert all(sum(s.values()) == 2 and len(s) == 1 for s in decision.slices["main"])


def test_a_preferred_node_spreads_evenly_over_the_nodes_of_one_rack() -> None:
    cluster = nodes(("b0", "r0", 2, 8), ("b0", "r1", 3, 8))
    decision = decide(cluster, asking(12, level=HOST), BALANCED)
    assert decision.placement == {"r0-n0": 6, "r0-n1": 6}


def test_the_topology_object_s_spec_placement_is_read_best_fit_by_default() -> None:
    from queue_controller.kube import objects

    body = {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "dc"},
        "spec": {"levels": [{"nodeLabel": RACK}]},
    }
    assert objects.topology(body).placement is TopologyPlacement.BEST_FIT
    body["spec"] = {"levels": [{"nodeLabel": RACK}], "placement": "Balanced"}
    assert objects.topology(body) == Topology("dc", (RACK,), TopologyPlacement.BALANCED)


def test_the_resolved_request_carries_the_topology_s_placement() -> None:
    from queue_controller.core.rules.topology import TopologyAsk, resolve

    gang = asking(4, slice_size=2, slice_level=HOST)
    pod_set = gang.pod_sets[0]
    assert pod_set.topology is not None
    for topology, balanced in ((BEST_FIT, False), (BALANCED, True)):
        ask = resolve(
            pod_set.topology,
            pod_set=pod_set,
            queue=QUEUE,
            topologies={"dc": topology},
            several_sets=False,
        )
        assert isinstance(ask, TopologyAsk)
        assert (ask.balanced, ask.slice_size) == (balanced, 2)
