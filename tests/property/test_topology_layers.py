"""Layered slices on random clusters of blocks, racks and nodes, partly used.

Whatever the cluster and the gangs (slices of a size per layer, each size dividing
the one above), in one cycle:

* every innermost slice lies in one domain of its level, and every run of an outer
  layer's size (that many consecutive innermost slices, in index order) lies in one
  domain of the outer layer's level: inner slices nest in outer ones in index order;
* the slices are exactly the placement, and no node gives more GPUs than it has free;
* the first gang of the cycle is admitted exactly when a count made node by node,
  layer by layer, apart from the placer, says that it fits (the counting is exact).
"""

from __future__ import annotations

from collections import Counter

from hypothesis import event, given, settings
from hypothesis import strategies as st

from queue_controller.core import Node, Verdict, Workload, schedule
from queue_controller.core.model.objects import (
    PodSet,
    TopologyMode,
    TopologyRequest,
)
from tests.builders import GPU, template
from tests.property.test_topology_placement import (
    BLOCK,
    DEPTH,
    HOST,
    RACK,
    clusters,
    path,
    snapshot_of,
)

LEVELS = (BLOCK, RACK, HOST)


@st.composite
def layered(draw: st.DrawFn, index: int) -> Workload:
    """Two or three layers, each strictly narrower and of a size dividing the one above."""
    depths = sorted(draw(st.sets(st.sampled_from([0, 1, 2]), min_size=2, max_size=3)))
    sizes = [draw(st.sampled_from([1, 2, 3]))]
    for _ in depths[1:]:
        sizes.insert(0, sizes[0] * draw(st.sampled_from([1, 2])))
    members = sizes[0] * draw(st.integers(1, 3))
    mode = draw(st.sampled_from(list(TopologyMode)))
    level = "" if mode is TopologyMode.UNCONSTRAINED else LEVELS[draw(st.integers(0, depths[0]))]
    layers = [(LEVELS[d], k) for d, k in zip(depths, sizes, strict=True)]
    request = TopologyRequest(
        mode,
        level,
        layers[0][1],
        layers[0][0],
        field="annotations",
        inner_slices=tuple(layers[1:]),
        slices_field="slices",
    )
    pod_set = PodSet(
        "main", template(draw(st.sampled_from([1, 2]))), members, members, topology=request
    )
    return Workload("ns", f"g{index}", "q", (pod_set,), "Job", created=float(index))


def room(
    nodes: dict[str, Node], free: dict[str, int], per_member: int, request: TopologyRequest
) -> Counter[tuple[str, ...]]:
    """Outermost slices per domain of the outermost level, counted node by node."""
    layers = [(request.slice_level, request.slice_size), *request.inner_slices]
    level, k = layers[-1]
    members: Counter[tuple[str, ...]] = Counter()
    for name, spare in free.items():
        members[path(nodes[name], DEPTH[level])] += spare // per_member
    units = Counter({where: count // k for where, count in members.items()})
    for (level, k), (_, inner_k) in zip(layers[-2::-1], layers[:0:-1], strict=True):
        outer: Counter[tuple[str, ...]] = Counter()
        for where, count in units.items():
            outer[where[: DEPTH[level] + 1]] += count
        units = Counter({where: count // (k // inner_k) for where, count in outer.items()})
    return units


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 4).flatmap(lambda n: st.tuples(*(layered(i) for i in range(n)))))
def test_layered_slices_nest_and_are_counted_exactly(
    cluster: tuple[list[Node], dict[str, int]], gangs: tuple[Workload, ...]
) -> None:
    nodes, free = cluster
    by_name = {n.name: n for n in nodes}
    snapshot = snapshot_of(cluster, gangs)
    result = schedule(snapshot)
    left = dict(free)
    by_gang = {d.workload.split("/")[1]: d for d in result.decisions}
    for workload in gangs:
        decision = by_gang[workload.name]
        assert decision.verdict in (Verdict.ADMIT, Verdict.PENDING), decision.message
        pod_set = workload.pod_sets[0]
        request = pod_set.topology
        assert request is not None
        per_member = pod_set.template.containers[0].limits[GPU]
        assert isinstance(per_member, int)
        layers = [(request.slice_level, request.slice_size), *request.inner_slices]
        if workload is gangs[0]:
            # The first gang sees the cluster as drawn: admitted exactly when it fits.
            outer = room(by_name, left, per_member, request)
            need = pod_set.count // request.slice_size
            if request.mode is TopologyMode.REQUIRED:
                depth = DEPTH[request.level]
                per_domain: Counter[tuple[str, ...]] = Counter()
                for where, count in outer.items():
                    per_domain[where[: depth + 1]] += count
                fits = max(per_domain.values(), default=0) >= need
            else:
                fits = sum(outer.values()) >= need
            assert (decision.verdict is Verdict.ADMIT) == fits, (layers, left, decision.message)
            event(f"first gang {'fits' if fits else 'does not fit'}, {len(layers)} layers")
        if decision.verdict is not Verdict.ADMIT:
            continue
        placed = decision.placement
        assert sum(placed.values()) == pod_set.count
        if request.mode is TopologyMode.REQUIRED:
            depth = DEPTH[request.level]
            assert len({path(by_name[n], depth) for n in placed}) == 1, (request, placed)
        slices = decision.slices["main"]
        inner_level, inner_k = layers[-1]
        assert len(slices) == pod_set.count // inner_k
        total: Counter[str] = Counter()
        for one in slices:
            assert sum(one.values()) == inner_k
            assert len({path(by_name[n], DEPTH[inner_level]) for n in one}) == 1, slices
            total.update(one)
        assert total == Counter(placed)
        for level, k in layers[:-1]:
            run = k // inner_k
            for start in range(0, len(slices), run):
                nodes_of = {n for one in slices[start : start + run] for n in one}
                assert len({path(by_name[n], DEPTH[level]) for n in nodes_of}) == 1, (
                    level,
                    k,
                    slices,
                )
        for name, members in placed.items():
            left[name] -= members * per_member
            assert left[name] >= 0, (name, placed)
    assert schedule(snapshot).decisions == result.decisions
