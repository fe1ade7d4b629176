"""Balanced placement (``spec.placement: Balanced``) against best fit, on random
blocks of racks of partly used nodes, one preferred gang at a time:

* it never splits a gang over more domains of its preferred level than best fit;
* where it applies (one domain one level above the preferred level holds the gang,
  Kueue's condition), the counts one level below differ by at most one unit (a
  member, or a slice) except where a part is full: Kueue's "as evenly as possible";
* slices stay whole, and no node takes more than it has free.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core import Node, Snapshot, Verdict, Workload, schedule
from queue_controller.core.model.decisions import Decision
from queue_controller.core.model.objects import (
    PodSet,
    Topology,
    TopologyMode,
    TopologyPlacement,
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

BEST_FIT = Topology("t", (BLOCK, RACK, HOST))
BALANCED = replace(BEST_FIT, placement=TopologyPlacement.BALANCED)


@st.composite
def gangs(draw: st.DrawFn) -> Workload:
    members = draw(st.integers(1, 16))
    level = draw(st.sampled_from([BLOCK, RACK, HOST]))
    slice_size = 0
    if draw(st.booleans()):
        slice_size = draw(st.sampled_from([k for k in (1, 2, 4) if members % k == 0]))
    request = TopologyRequest(
        TopologyMode.PREFERRED, level, slice_size, HOST if slice_size else "", field="a"
    )
    each = draw(st.sampled_from([1, 2]))
    pod_set = PodSet("main", template(each), members, members, topology=request)
    return Workload("ns", "g", "q", (pod_set,), "Job")


def decide(snapshot: Snapshot, topology: Topology) -> Decision:
    (decision,) = schedule(replace(snapshot, topologies=(topology,))).decisions
    return decision


@settings(max_examples=300, deadline=None)
@given(clusters(), gangs())
def test_balanced_is_even_and_never_wider_than_best_fit(
    cluster: tuple[list[Node], dict[str, int]], gang: Workload
) -> None:
    nodes, free = cluster
    by_name = {n.name: n for n in nodes}
    snapshot = snapshot_of(cluster, (gang,), BEST_FIT)
    best, balanced = decide(snapshot, BEST_FIT), decide(snapshot, BALANCED)
    assert best.verdict is balanced.verdict  # balance never turns a gang away
    if balanced.verdict is not Verdict.ADMIT:
        return
    pod_set = gang.pod_sets[0]
    ask = pod_set.topology
    assert ask is not None
    k = ask.slice_size or 1
    each = pod_set.template.containers[0].limits[GPU]
    assert isinstance(each, int)
    depth = DEPTH[ask.level]
    placed = balanced.placement
    assert sum(placed.values()) == pod_set.count
    for name, members in placed.items():
        assert members * each <= free[name], (name, placed, free)
        assert members % k == 0  # slices are per host: whole on one node
    wide = len({path(by_name[n], depth) for n in placed})
    assert wide <= len({path(by_name[n], depth) for n in best.placement}), (placed, best)

    # Where it applies, counts one level below the preferred level are even.
    units = {n: free[n] // each // k for n in free}
    group: Counter[tuple[str, ...]] = Counter()
    for name, room in units.items():
        group[path(by_name[name], depth - 1) if depth else ()] += room
    if max(group.values()) < pod_set.count // k:
        return  # no one domain above holds it: best fit places it, as in Kueue
    below = min(depth + 1, 2)
    count: Counter[tuple[str, ...]] = Counter()
    room: Counter[tuple[str, ...]] = Counter()
    for name, members in placed.items():
        count[path(by_name[name], below)] += members // k
    for name, spare in units.items():
        room[path(by_name[name], below)] += spare
    most = max(count.values())
    for part, got in count.items():
        assert got >= most - 1 or got == room[part], (part, count, room)
