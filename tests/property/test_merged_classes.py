"""The index's classes for gangs without a topology are merged from the classes split by
topology levels (fit.EquivalenceIndex._merge) rather than classified node by node a
second time.  Whatever the cluster, they are exactly what classifying would give:

* every node is in one class, in the bucket of its free vector, and ``_where`` says so;
* nodes of one class agree on everything the classes are keyed by (readiness, cordon,
  taints, the labels some gang selects on, allocatable), and nodes of two classes don't;
* classes come in the order of their first node by name, that node is the sample, and
  a bucket's names are sorted (moves bisect them);
* after the same commits, both indexes hold every node at the same free vector.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core.model.objects import (
    Node,
    PodSet,
    Queue,
    Taint,
    Topology,
    TopologyMode,
    TopologyRequest,
)
from queue_controller.core.placement.fit import EquivalenceIndex
from queue_controller.core.placement.shapes import GangShape, Placement, shape_of
from queue_controller.core.rules.requests import pod_request
from queue_controller.core.rules.topology import TopologyAsk, resolve
from tests.builders import GPU, gpu_node, template

BLOCK, RACK, POOL = "example.com/block", "example.com/rack", "example.com/pool"
TOPOLOGY = Topology("t", (BLOCK, RACK, "kubernetes.io/hostname"))


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], dict[str, dict[str, int]]]:
    nodes, used = [], {}
    for i in range(draw(st.integers(1, 24))):
        name = f"n{draw(st.integers(0, 99)):02d}-{i}"
        size = draw(st.sampled_from([4, 8]))
        labels = {BLOCK: f"b{draw(st.integers(0, 2))}", RACK: f"r{draw(st.integers(0, 3))}"}
        if draw(st.booleans()):
            labels[POOL] = draw(st.sampled_from(["a", "b"]))
        if draw(st.integers(0, 5)) == 0:
            del labels[RACK]  # outside the topology
        node = gpu_node(name, size, labels=labels)
        if draw(st.integers(0, 5)) == 0:
            node = replace(node, taints=(Taint("gpu", "broken", "NoSchedule"),))
        nodes.append(node)
        taken = draw(st.integers(0, size))
        if taken:
            used[name] = {GPU: taken * 1000}
    return nodes, used


def ask(gpus: int, members: int) -> TopologyAsk:
    request = TopologyRequest(TopologyMode.PREFERRED, RACK, field="annotations")
    pod_set = PodSet("main", template(gpus), members, members, topology=request)
    found = resolve(
        request,
        pod_set=pod_set,
        queue=Queue("ns", "q", "team", topology_name="t"),
        topologies={"t": TOPOLOGY},
        several_sets=False,
    )
    assert isinstance(found, TopologyAsk), found
    return found


def shapes() -> list[GangShape]:
    plain = template(1)
    pooled = replace(template(2), node_selector={POOL: "a"})
    topology = template(4)
    return [
        shape_of(plain, pod_request(plain)),
        shape_of(pooled, pod_request(pooled)),
        shape_of(topology, pod_request(topology), ask(4, 2)),
    ]


def key_of(node: Node) -> Hashable:
    """What a class for gangs without a topology is keyed by, read off the node itself:
    its taints and the one label a gang selects on (all else is alike here)."""
    return (node.taints, node.labels.get(POOL), node.allocatable.get(GPU))


@settings(max_examples=150, deadline=None)
@given(clusters(), st.lists(st.integers(0, 23), max_size=6))
def test_merged_classes_are_what_classifying_gives(
    cluster: tuple[list[Node], dict[str, dict[str, int]]], picks: list[int]
) -> None:
    nodes, used = cluster
    index = EquivalenceIndex(nodes, used, shapes())
    fine = index._fine
    assert fine is not None
    by_name = {node.name: node for node in nodes}
    # Every node in one class, in its bucket, where _where says.
    seen: dict[str, int] = {}
    for node_class in index._classes:
        for free, names in node_class.buckets.items():
            assert names == sorted(names)
            for name in names:
                assert name not in seen
                seen[name] = node_class.index
                assert index._where[name] == (node_class, free)
    assert sorted(seen) == sorted(by_name)
    # One key per class, one class per key.
    keys = {}
    for node_class in index._classes:
        members = {key_of(by_name[name]) for names in node_class.buckets.values() for name in names}
        assert len(members) == 1, members
        keys[node_class.index] = members.pop()
    assert len(set(keys.values())) == len(keys)
    # Ordered by first node; the first node is the sample.
    firsts = [min(name for names in c.buckets.values() for name in names) for c in index._classes]
    assert firsts == sorted(firsts)
    assert [c.sample.name for c in index._classes] == firsts
    # The same commits leave both indexes agreeing node by node.
    plain = shapes()[0]
    for pick in picks:
        name = sorted(by_name)[pick % len(by_name)]
        if index._request(plain).fits(index._where[name][1]) > 0:
            index.commit(plain, Placement({name: 1}))
    for name in by_name:
        assert index._where[name][1] == fine._where[name][1]
        fine_class = fine._where[name][0]
        assert name in fine_class.buckets[fine._where[name][1]]
