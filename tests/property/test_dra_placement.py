"""Properties of DRA gang placement, on random clusters of mixed GPUs and held devices.

* Sound: on every node, the devices of the members admitted there can all be
  allocated at once, from free devices that match (Hall's condition over the
  members' kinds of request, checked here by brute force over devices).
* Exact for the head: the first gang of the cycle is admitted if and only if
  the nodes' free matching devices hold every member.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core.cycle.admission import schedule
from queue_controller.core.model.decisions import Verdict
from tests.unit.dra_cluster import (
    A100,
    H100,
    exactly,
    from_template,
    held,
    job,
    product_is,
    snapshot,
    template,
)

PRODUCTS = (H100, A100, "NVIDIA L4")
# Matcher name -> (the selectors of its request, which products it takes).
MATCHERS = {
    "any": ((), frozenset(PRODUCTS)),
    "h100": ((product_is(H100),), frozenset({H100})),
    "a100": ((product_is(A100),), frozenset({A100})),
    "big": ((f"{product_is(H100)} || {product_is(A100)}",), frozenset({H100, A100})),
}

nodes = st.lists(
    st.tuples(
        st.lists(st.sampled_from(PRODUCTS), min_size=0, max_size=8),
        st.sets(st.integers(0, 7), max_size=4),  # indexes held by a claim
    ),
    min_size=1,
    max_size=5,
)
gangs = st.lists(
    st.tuples(st.sampled_from(sorted(MATCHERS)), st.integers(1, 6), st.integers(1, 4)),
    min_size=1,
    max_size=6,
)


def _hall(free_products: list[str], demands: dict[str, int]) -> bool:
    """Whether devices of ``free_products`` serve ``demands`` (matcher -> devices) at once."""
    names = sorted(demands)
    for size in range(1, len(names) + 1):
        for group in combinations(names, size):
            wanted = frozenset().union(*(MATCHERS[m][1] for m in group))
            if sum(demands[m] for m in group) > sum(p in wanted for p in free_products):
                return False
    return True


@settings(max_examples=200, deadline=None)
@given(nodes, gangs)
def test_admitted_members_get_matching_free_devices(
    layout_spec: list[tuple[list[str], set[int]]], gang_spec: list[tuple[str, int, int]]
) -> None:
    layout = {f"n{i}": products for i, (products, _) in enumerate(layout_spec)}
    free: dict[str, list[str]] = {}
    claims = []
    for i, (products, taken) in enumerate(layout_spec):
        taken_here = sorted(t for t in taken if t < len(products))
        if taken_here:
            claims.append(held(f"busy-{i}", f"n{i}", taken_here))
        free[f"n{i}"] = [p for j, p in enumerate(products) if j not in taken_here]
    templates = [
        template(f"{m}-{c}", exactly("gpus", c, *MATCHERS[m][0]))
        for m in MATCHERS
        for c in range(1, 7)
    ]
    workloads = [
        job(f"g{i}", from_template(f"{m}-{count}"), members=members, created=float(i))
        for i, (m, count, members) in enumerate(gang_spec)
    ]
    snap = snapshot(
        layout, *workloads, templates=templates, claims=claims, quota={"gpu.nvidia.com": 10_000}
    )
    decisions = {d.workload: d for d in schedule(snap).decisions}

    on_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for i, (m, count, _) in enumerate(gang_spec):
        decision = decisions[f"team-a/g{i}"]
        for node_name, members in decision.placement.items():
            on_node[node_name][m] += count * members
    for node_name, demands in on_node.items():
        assert _hall(free[node_name], demands), (node_name, free[node_name], dict(demands))

    head, count, members = gang_spec[0]
    room = sum(sum(p in MATCHERS[head][1] for p in products) // count for products in free.values())
    admitted = decisions["team-a/g0"].verdict is Verdict.ADMIT
    assert admitted == (room >= members), (room, members, decisions["team-a/g0"].message)
