"""Failed-node replacement in the core (core/cycle/replacement.py): a lost node of an
admitted topology gang's plan is swapped for one node of the same domain, before any
pending gang is tried, or not at all."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core import BoundPod, Verdict, Workload, WorkloadPhase, schedule
from queue_controller.core.cycle import CycleResult, lost_reason, policy
from queue_controller.core.model import NodeFailure, Replacement
from queue_controller.core.model.objects import (
    Node,
    PodSet,
    Queue,
    TeamQuota,
    Topology,
    TopologyMode,
    TopologyRequest,
)
from tests.builders import GPU, gpu_node, quota, snapshot, template

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
TOPOLOGY = Topology("dc", (BLOCK, RACK, HOST))
REPLACE = Queue("ns", "q", "team", topology_name="dc", on_node_failure=NodeFailure.REPLACE)
KEY = "Job/ns/g"


def racks(*layout: tuple[str, str, int]) -> list[Node]:
    """Nodes of 8 GPUs, ``count`` of them in each (block, rack)."""
    return [
        gpu_node(f"{rack}-n{i}", 8, labels={BLOCK: block, RACK: rack})
        for block, rack, count in layout
        for i in range(count)
    ]


def admitted(
    placement: dict[str, int],
    *,
    gpus_each: int = 8,
    mode: TopologyMode = TopologyMode.REQUIRED,
    level: str = RACK,
    domain: str = "b0/r0",
    slice_size: int = 0,
    slice_level: str = "",
    slices: tuple[dict[str, int], ...] = (),
) -> Workload:
    members = sum(placement.values())
    request = TopologyRequest(mode, level, slice_size, slice_level)
    pod_set = PodSet("main", template(gpus_each), members, members, topology=request)
    return Workload(
        "ns",
        "g",
        "q",
        (pod_set,),
        "Job",
        phase=WorkloadPhase.ADMITTED,
        placement=placement,
        topology_domains={"main": domain},
        slices={"main": slices} if slices else {},
    )


def member(node: str, gpus: int = 8, *, name: str = "", deleting: bool = False) -> BoundPod:
    return BoundPod(
        namespace="ns",
        name=name or f"g-{node}",
        node_name=node,
        request={GPU: gpus * 1000, "cpu": 1000, "memory": 1024**3 * 1000, "pods": 1000},
        workload=KEY,
        pod_set="main",
        deleting=deleting,
    )


def cycle(
    nodes: list[Node],
    *workloads: Workload,
    pods: tuple[BoundPod, ...] = (),
    queue: Queue = REPLACE,
    quotas: tuple[TeamQuota, ...] | None = None,
) -> CycleResult:
    return schedule(
        snapshot(
            nodes=nodes,
            workloads=workloads,
            pods=pods,
            queues=(queue,),
            topologies=(TOPOLOGY,),
            **({"quotas": quotas} if quotas is not None else {}),
        )
    )


def without(nodes: list[Node], name: str) -> list[Node]:
    return [n for n in nodes if n.name != name]


def test_a_deleted_node_is_replaced_inside_its_rack() -> None:
    nodes = racks(("b0", "r0", 3), ("b0", "r1", 2))
    gang = admitted({"r0-n0": 1, "r0-n1": 1})
    result = cycle(without(nodes, "r0-n0"), gang, pods=(member("r0-n1"),))
    assert result.replacements == (
        Replacement(KEY, "main", "r0-n0", "Deleted", "r0-n2", 1, "b0/r0", "b0/r0/r0-n2"),
    )


def test_replace_is_the_default_as_in_kueue_and_evict_opts_out() -> None:
    """Kueue's TASFailedNodeReplacement is on by default (beta since v0.14): a Queue and
    TeamQuota that say nothing replace; ``onNodeFailure: Evict`` keeps the old way."""
    nodes = racks(("b0", "r0", 3))
    gang = admitted({"r0-n0": 1, "r0-n1": 1})
    plain = Queue("ns", "q", "team", topology_name="dc")
    result = cycle(without(nodes, "r0-n0"), gang, pods=(member("r0-n1"),), queue=plain)
    assert [(r.lost, r.node) for r in result.replacements] == [("r0-n0", "r0-n2")]
    evicting = replace(plain, on_node_failure=NodeFailure.EVICT)
    result = cycle(without(nodes, "r0-n0"), gang, pods=(member("r0-n1"),), queue=evicting)
    assert result.replacements == ()


def test_the_queue_wins_over_its_team_quota_and_the_quota_applies_when_the_queue_is_silent() -> (
    None
):
    replacing = replace(quota(), on_node_failure=NodeFailure.REPLACE)
    silent = Queue("ns", "q", "team", topology_name="dc")
    evicting = replace(silent, on_node_failure=NodeFailure.EVICT)
    quotas = {"team": replacing}
    assert policy(silent, quotas) is NodeFailure.REPLACE
    assert policy(evicting, quotas) is NodeFailure.EVICT
    assert policy(silent, {}) is NodeFailure.REPLACE
    nodes = racks(("b0", "r0", 3))
    gang = admitted({"r0-n0": 1, "r0-n1": 1})
    lost = without(nodes, "r0-n0")
    assert cycle(
        lost, gang, pods=(member("r0-n1"),), queue=silent, quotas=(replacing,)
    ).replacements
    assert not cycle(
        lost, gang, pods=(member("r0-n1"),), queue=evicting, quotas=(replacing,)
    ).replacements


def test_a_full_rack_has_no_replacement_even_with_room_in_another_rack() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2))
    gang = admitted({"r0-n0": 1, "r0-n1": 1})
    result = cycle(without(nodes, "r0-n0"), gang, pods=(member("r0-n1"),))
    assert result.replacements == ()
    # Why, for its eviction to say (and chaos to read): the rack, the members, the node.
    assert result.unreplaced == {
        gang.key: "no node of rack b0/r0 takes the 1 member of pod set main that was on r0-n0"
    }


def test_a_busy_node_of_the_rack_is_no_replacement() -> None:
    nodes = racks(("b0", "r0", 3))
    other = BoundPod("other", "x", "r0-n2", {GPU: 4000, "pods": 1000})
    gang = admitted({"r0-n0": 1, "r0-n1": 1})
    result = cycle(without(nodes, "r0-n0"), gang, pods=(member("r0-n1"), other))
    assert result.replacements == ()
    assert "no node of rack b0/r0 takes" in result.unreplaced[gang.key]


def test_a_notready_node_whose_member_still_runs_is_not_replaced_until_the_member_goes() -> None:
    nodes = racks(("b0", "r0", 3))
    nodes[0] = replace(nodes[0], conditions={"Ready": "False"})
    gang = admitted({"r0-n0": 1, "r0-n1": 1})
    running = (member("r0-n0"), member("r0-n1"))
    assert cycle(nodes, gang, pods=running).replacements == ()
    evicted = (member("r0-n0", deleting=True), member("r0-n1"))
    (found,) = cycle(nodes, gang, pods=evicted).replacements
    assert (found.lost, found.why, found.node) == ("r0-n0", "NotReady", "r0-n2")


def test_a_node_whose_gpus_all_failed_is_lost() -> None:
    from queue_controller.core.model import GpuHealth

    node = replace(racks(("b0", "r0", 1))[0], gpu_health=GpuHealth(whole_node=True))
    assert lost_reason(node) == "GPUUnhealthy"
    assert lost_reason(None) == "Deleted"
    assert lost_reason(racks(("b0", "r0", 1))[0]) is None


def test_the_replacement_comes_before_a_pending_gang() -> None:
    nodes = racks(("b0", "r0", 3))
    gang = admitted({"r0-n0": 1, "r0-n1": 1})
    request = TopologyRequest(TopologyMode.REQUIRED, RACK)
    pending = Workload(
        "ns", "p", "q", (PodSet("main", template(8), 1, 1, topology=request),), "Job"
    )
    result = cycle(without(nodes, "r0-n0"), gang, pending, pods=(member("r0-n1"),))
    assert [r.node for r in result.replacements] == ["r0-n2"]
    (decision,) = result.decisions
    assert decision.verdict is Verdict.PENDING


def test_the_nearest_node_is_chosen_inside_a_block() -> None:
    nodes = racks(("b0", "r0", 3), ("b0", "r1", 2))
    nodes[0] = replace(nodes[0], conditions={"Ready": "False"})
    gang = admitted({"r0-n0": 1, "r1-n0": 1}, level=BLOCK, domain="b0")
    (found,) = cycle(nodes, gang, pods=(member("r1-n0"),)).replacements
    assert (found.node, found.domain) == ("r0-n1", "b0")


def test_a_deleted_node_keeps_its_slice_domain_through_a_surviving_node_of_its_slice() -> None:
    nodes = racks(("b0", "r0", 3), ("b0", "r1", 3))
    slices = ({"r0-n0": 1, "r0-n1": 1}, {"r1-n0": 1, "r1-n1": 1})
    gang = admitted(
        {"r0-n0": 1, "r0-n1": 1, "r1-n0": 1, "r1-n1": 1},
        level=BLOCK,
        domain="b0",
        slice_size=2,
        slice_level=RACK,
        slices=slices,
    )
    pods = tuple(member(n) for n in ("r0-n1", "r1-n0", "r1-n1"))
    (found,) = cycle(without(nodes, "r0-n0"), gang, pods=pods).replacements
    assert (found.node, found.domain) == ("r0-n2", "b0/r0")


def test_all_or_nothing_when_one_of_two_lost_nodes_has_no_replacement() -> None:
    nodes = racks(("b0", "r0", 3))
    gang = admitted({"r0-n0": 1, "r0-n1": 1})
    # Two lost, one spare: neither is kept, and the spare stays free for others.
    result = cycle(without(without(nodes, "r0-n0"), "r0-n1"), gang)
    assert result.replacements == ()


def test_a_gang_required_on_one_node_has_nowhere_else_to_go() -> None:
    nodes = racks(("b0", "r0", 2))
    gang = admitted({"r0-n0": 2}, gpus_each=4, level=HOST, domain="b0/r0/r0-n0")
    assert cycle(without(nodes, "r0-n0"), gang).replacements == ()


@settings(max_examples=60, deadline=None)
@given(
    layout=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=3),
    used=st.lists(st.integers(min_value=0, max_value=8), min_size=12, max_size=12),
    gpus_each=st.sampled_from([2, 4, 8]),
    lose=st.integers(min_value=0, max_value=11),
    how=st.sampled_from(["Deleted", "NotReady"]),
)
def test_a_replacement_stays_in_the_rack_never_on_a_lost_node_and_never_overcommits(
    layout: list[int], used: list[int], gpus_each: int, lose: int, how: str
) -> None:
    nodes = racks(*((f"b{i // 2}", f"r{i}", count) for i, count in enumerate(layout)))
    # The gang: one member on each of the first rack's first nodes (up to 2).
    planned = [n.name for n in nodes if n.name.startswith("r0-")][:2]
    lost = planned[lose % len(planned)]
    gang = admitted(dict.fromkeys(planned, 1), gpus_each=gpus_each)
    others = tuple(
        BoundPod("other", f"o{i}", n.name, {GPU: min(used[i], 8) * 1000, "pods": 1000})
        for i, n in enumerate(nodes)
        if n.name not in planned and used[i % len(used)]
    )
    mine = tuple(member(n, gpus_each) for n in planned if n != lost)
    seen = (
        without(nodes, lost)
        if how == "Deleted"
        else [replace(n, conditions={"Ready": "False"}) if n.name == lost else n for n in nodes]
    )
    result = cycle(seen, gang, pods=others + mine)
    free = {
        n.name: 8
        - sum(p.request.get(GPU, 0) // 1000 for p in others + mine if p.node_name == n.name)
        for n in nodes
    }
    for found in result.replacements:
        assert found.lost == lost
        assert found.node != lost
        assert found.node.startswith("r0-")  # the rack the gang is required in
        assert free[found.node] >= gpus_each * found.members
    # A node of the plan with room may take the lost member too.
    spare = [
        n
        for n in nodes
        if n.name.startswith("r0-") and n.name != lost and free[n.name] >= gpus_each
    ]
    assert bool(result.replacements) == bool(spare)
