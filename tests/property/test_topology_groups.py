"""Pod-set groups on random clusters of blocks, racks and nodes, partly used.

Whatever the cluster and the gangs (a leader and its workers in one group, with their own
GPU and CPU requests, among plain topology gangs), in one cycle:

* a group that requires a level has both its pod sets in one domain of that level;
* a preferred group that one domain of its level holds with room to spare (judged from the
  free room alone, apart from the placer: its GPUs and CPUs on whole empty nodes) is kept
  in one domain of the level;
* no node gives more GPUs or CPUs than it has free;
* the same input gives the same decisions.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core import Node, Verdict, Workload, schedule
from queue_controller.core.model.objects import (
    PodSet,
    TopologyMode,
    TopologyRequest,
)
from tests.builders import gpu_node, template
from tests.property.test_topology_placement import (
    BLOCK,
    DEPTH,
    LEVELS,
    RACK,
    path,
    snapshot_of,
)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], dict[str, int]]:
    """Blocks of racks of 8-GPU nodes of 8, 16 or 64 CPUs, and the GPUs each has free."""
    nodes, free = [], {}
    for b in range(draw(st.integers(1, 2))):
        for r in range(draw(st.integers(1, 3))):
            cpus = draw(st.sampled_from([8, 16, 64]))
            for i in range(draw(st.integers(1, 3))):
                name = f"n-{b}-{r}-{i}"
                labels = {BLOCK: f"b{b}", RACK: f"r{b}{r}"}
                nodes.append(gpu_node(name, 8, cpu=str(cpus), labels=labels))
                free[name] = 8 - draw(st.integers(0, 8))
    return nodes, free


# pod set name -> (GPUs, CPUs) per member, for every gang drawn
Sizes = dict[tuple[str, str], tuple[int, int]]


@st.composite
def gangs(draw: st.DrawFn, index: int, sizes: Sizes) -> Workload:
    name = f"g{index}"
    mode = draw(st.sampled_from([TopologyMode.REQUIRED, TopologyMode.PREFERRED]))
    level = LEVELS[draw(st.sampled_from(sorted(LEVELS)))]
    grouped = draw(st.booleans())
    request = TopologyRequest(
        mode, level, field="annotations", group="g" if grouped else "", group_field="group"
    )
    sets = []
    for set_name, count in (("leader", 1), ("workers", draw(st.integers(1, 5)))):
        gpu_each = draw(st.sampled_from([0, 1, 2, 4, 8] if set_name == "leader" else [1, 2, 4]))
        cpu_each = draw(st.sampled_from([1, 4, 8]))
        sizes[(name, set_name)] = (gpu_each, cpu_each)
        pod_template = template(gpu_each, cpu=str(cpu_each))
        sets.append(PodSet(set_name, pod_template, count, count, topology=request))
    return Workload("ns", name, "q", tuple(sets), "RayCluster", created=float(index))


@settings(max_examples=250, deadline=None)
@given(clusters(), st.data())
def test_groups_share_one_domain_and_nothing_is_overcommitted(
    cluster: tuple[list[Node], dict[str, int]], data: st.DataObject
) -> None:
    nodes, free = cluster
    sizes: Sizes = {}
    drawn = data.draw(st.integers(1, 5))
    workloads = tuple(data.draw(gangs(i, sizes)) for i in range(drawn))
    by_name = {n.name: n for n in nodes}
    snapshot = snapshot_of(cluster, workloads)
    result = schedule(snapshot)
    gpu_left = dict(free)
    cpu_left = {n.name: n.allocatable["cpu"] // 1000 for n in nodes}
    for decision in result.decisions:
        assert decision.verdict in (Verdict.ADMIT, Verdict.PENDING), decision.message
        name = decision.workload.split("/")[1]
        workload = next(w for w in workloads if w.name == name)
        ask = workload.pod_sets[0].topology
        assert ask is not None
        if decision.verdict is not Verdict.ADMIT:
            continue
        by_set = decision.pod_set_placement
        everywhere = [node for placed in by_set.values() for node in placed]
        depth = DEPTH[ask.level]
        if ask.group and ask.mode is TopologyMode.REQUIRED:
            assert len({path(by_name[n], depth) for n in everywhere}) == 1, by_set
        if ask.group and ask.mode is TopologyMode.PREFERRED:
            # One domain of the level with enough wholly free nodes for every member, each
            # on its own node: surely it holds the group.
            need = sum(ps.count for ps in workload.pod_sets)
            empty: dict[tuple[str, ...], int] = {}
            for node_name, spare in gpu_left.items():
                node = by_name[node_name]
                if spare == 8 and cpu_left[node_name] == node.allocatable["cpu"] // 1000:
                    where = path(node, depth)
                    empty[where] = empty.get(where, 0) + 1
            biggest = max(empty.values(), default=0)
            fits_each = all(
                sizes[(name, ps.name)][1] <= min(cpu_left.values()) for ps in workload.pod_sets
            )
            if depth < 2 and biggest >= need and fits_each:
                assert len({path(by_name[n], depth) for n in everywhere}) == 1, by_set
        for set_name, placed in by_set.items():
            gpu_each, cpu_each = sizes[(name, set_name)]
            for node_name, members in placed.items():
                gpu_left[node_name] -= members * gpu_each
                cpu_left[node_name] -= members * cpu_each
                assert gpu_left[node_name] >= 0, (node_name, by_set)
                assert cpu_left[node_name] >= 0, (node_name, by_set)
    assert schedule(snapshot).decisions == result.decisions
