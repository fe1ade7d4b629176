"""Topology-aware placement on random clusters of blocks, racks and nodes, partly used.

Whatever the cluster and the gangs, in one cycle:

* a gang that requires a level is never split across domains of it;
* a gang that prefers a level is never split when one domain of it could hold it
  (judged node by node, independently of the placer, before the cycle);
* every slice lies in one domain of its level, slices are whole and in order, and
  together they are exactly the placement;
* no node takes more GPUs than it has free.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core import Node, Snapshot, Verdict, Workload, schedule
from queue_controller.core.model.objects import (
    PodSet,
    Queue,
    Topology,
    TopologyMode,
    TopologyRequest,
)
from tests.builders import GPU, gpu_node, gpus, quota, running_pod, template

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = {"block": BLOCK, "rack": RACK, "host": HOST}
TOPOLOGY = Topology("t", (BLOCK, RACK, HOST))


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], dict[str, int]]:
    """Blocks of racks of nodes of 4 or 8 GPUs, and how many GPUs each has free."""
    nodes, free = [], {}
    for b in range(draw(st.integers(1, 3))):
        for r in range(draw(st.integers(1, 3))):
            size = draw(st.sampled_from([4, 8]))
            for i in range(draw(st.integers(1, 3))):
                name = f"n-{b}-{r}-{i}"
                nodes.append(gpu_node(name, size, labels={BLOCK: f"b{b}", RACK: f"r{b}{r}"}))
                free[name] = size - draw(st.integers(0, size))
    return nodes, free


@st.composite
def asks(draw: st.DrawFn, index: int) -> Workload:
    members = draw(st.integers(1, 8))
    mode = draw(st.sampled_from(list(TopologyMode)))
    level = "" if mode is TopologyMode.UNCONSTRAINED else draw(st.sampled_from(sorted(LEVELS)))
    slice_size, slice_level = 0, ""
    if draw(st.booleans()):
        divisors = [k for k in range(1, members + 1) if members % k == 0]
        slice_size = draw(st.sampled_from(divisors))
        narrower = list(LEVELS)[list(LEVELS).index(level) :] if level else list(LEVELS)
        slice_level = LEVELS[draw(st.sampled_from(narrower))]
    request = TopologyRequest(
        mode, LEVELS[level] if level else "", slice_size, slice_level, field="annotations"
    )
    pod_set = PodSet(
        "main", template(draw(st.sampled_from([1, 2, 4]))), members, members, topology=request
    )
    return Workload("ns", f"g{index}", "q", (pod_set,), "Job", created=float(index))


def path(node: Node, depth: int) -> tuple[str, ...]:
    """The node's domain at a depth: 0 block, 1 rack, 2 the node itself."""
    return (node.labels[BLOCK], node.labels[RACK], node.name)[: depth + 1]


DEPTH = {BLOCK: 0, RACK: 1, HOST: 2}


def snapshot_of(
    cluster: tuple[list[Node], dict[str, int]],
    workloads: tuple[Workload, ...],
    topology: Topology = TOPOLOGY,
) -> Snapshot:
    """The drawn cluster, its used GPUs held by running pods, and ``workloads`` pending in
    one Queue of ``topology`` with quota to spare (shared by the topology properties)."""
    nodes, free = cluster
    by_name = {n.name: n for n in nodes}
    pods = [
        running_pod(n.name, n.allocatable[GPU] // 1000 - f)
        for n, f in ((by_name[k], v) for k, v in free.items())
        if n.allocatable[GPU] // 1000 - f
    ]
    return Snapshot(
        nodes=tuple(nodes),
        pods=tuple(pods),
        workloads=workloads,
        queues=(Queue("ns", "q", "team", topology_name="t"),),
        quotas=(quota(gpu=gpus(10_000)),),
        topologies=(topology,),
    )


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 6).flatmap(lambda n: st.tuples(*(asks(i) for i in range(n)))))
def test_domains_and_slices_hold(
    cluster: tuple[list[Node], dict[str, int]], gangs: tuple[Workload, ...]
) -> None:
    nodes, free = cluster
    by_name = {n.name: n for n in nodes}
    snapshot = snapshot_of(cluster, gangs)
    result = schedule(snapshot)
    left = dict(free)
    for decision in result.decisions:
        assert decision.verdict in (Verdict.ADMIT, Verdict.PENDING), decision.message
        workload = next(g for g in gangs if g.name == decision.workload.split("/")[1])
        pod_set = workload.pod_sets[0]
        ask = pod_set.topology
        assert ask is not None
        per_member = pod_set.template.containers[0].limits[GPU]
        assert isinstance(per_member, int)
        if decision.verdict is not Verdict.ADMIT:
            continue
        placed = decision.placement
        assert sum(placed.values()) == pod_set.count
        if ask.mode is TopologyMode.REQUIRED:
            depth = DEPTH[ask.level]
            assert len({path(by_name[n], depth) for n in placed}) == 1, (ask, placed)
        if ask.mode is TopologyMode.PREFERRED:
            depth = DEPTH[ask.level]
            # Room in one domain of the level, in slices when the gang is cut in slices:
            # members are counted per slice domain, whole slices only.
            k = ask.slice_size or 1
            cut = DEPTH[ask.slice_level] if ask.slice_size else 2
            members: Counter[tuple[str, ...]] = Counter()
            for name, spare in left.items():
                members[path(by_name[name], max(depth, cut))] += spare // per_member
            room: Counter[tuple[str, ...]] = Counter()
            for where, count in members.items():
                room[where[: depth + 1]] += count // k
            if max(room.values(), default=0) >= pod_set.count // k:
                assert len({path(by_name[n], depth) for n in placed}) == 1, (ask, placed, left)
        if ask.slice_size:
            slices = decision.slices["main"]
            assert len(slices) == pod_set.count // ask.slice_size
            total: Counter[str] = Counter()
            for one in slices:
                assert sum(one.values()) == ask.slice_size
                assert len({path(by_name[n], DEPTH[ask.slice_level]) for n in one}) == 1
                total.update(one)
            assert total == Counter(placed)
        for name, members in placed.items():
            left[name] -= members * per_member
            assert left[name] >= 0, (name, placed)
    # The same input, the same decisions.
    assert schedule(snapshot).decisions == result.decisions
