"""Hierarchical cohorts (issue 24, item 4): Kueue's arithmetic through a tree of cohorts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.core.model import Cohort, ResourceQuota, TeamQuota
from queue_controller.core.quota import QuotaLedger, cycles, roots_of
from queue_controller.core.quota.tree import Node

GPU = "nvidia.com/gpu"
ONE = 1000  # milli-units of one GPU


def gpus(n: int, *, borrowing: int | None = None, lending: int | None = None) -> ResourceQuota:
    return ResourceQuota(
        nominal=n * ONE,
        borrowing_limit=None if borrowing is None else borrowing * ONE,
        lending_limit=None if lending is None else lending * ONE,
    )


def team(name: str, cohort: str, limits: ResourceQuota) -> TeamQuota:
    return TeamQuota(name=name, resources={GPU: limits}, cohort=cohort)


def cohort(name: str, parent: str = "", limits: ResourceQuota | None = None) -> Cohort:
    resources = {} if limits is None else {GPU: limits}
    return Cohort(name=name, parent=parent, resources=resources)


def org(*, dept_a: ResourceQuota | None = None, root: ResourceQuota | None = None) -> list[Cohort]:
    """org <- dept-a, dept-b."""
    return [cohort("org", limits=root), cohort("dept-a", "org", dept_a), cohort("dept-b", "org")]


def room(ledger: QuotaLedger, name: str) -> int:
    available = ledger.available(name, GPU)
    assert available is not None
    return available // ONE


def test_a_lender_two_levels_away_lends_through_the_tree() -> None:
    quotas = [team("a1", "dept-a", gpus(4)), team("b1", "dept-b", gpus(8))]
    ledger = QuotaLedger(quotas, {}, org())
    assert room(ledger, "a1") == 12  # its 4 and b1's 8, lent up to org and down again
    ledger.reserve("a1", {GPU: 10 * ONE})
    assert room(ledger, "b1") == 2
    assert ledger.borrowers("b1", GPU) == (("a1", 6 * ONE),)


def test_a_cohorts_own_quota_is_lent_within_its_subtree() -> None:
    quotas = [team("a1", "dept-a", gpus(2)), team("b1", "dept-b", gpus(0))]
    ledger = QuotaLedger(quotas, {}, org(dept_a=gpus(6, lending=2)))
    assert room(ledger, "a1") == 8  # its 2 and dept-a's 6
    # A cohort's lending limit bounds all its subtree lends, its members' quota too.
    assert room(ledger, "b1") == 2


def test_a_cohorts_lending_limit_caps_what_leaves_its_subtree() -> None:
    quotas = [
        team("a1", "dept-a", gpus(4)),
        team("a2", "dept-a", gpus(4)),
        team("b1", "dept-b", gpus(0)),
    ]
    ledger = QuotaLedger(quotas, {}, org(dept_a=gpus(0, lending=3)))
    assert room(ledger, "b1") == 3
    assert room(ledger, "a1") == 8  # within dept-a, all of a2's


def test_a_cohorts_borrowing_limit_caps_what_its_subtree_takes_from_the_parent() -> None:
    quotas = [team("a1", "dept-a", gpus(2)), team("b1", "dept-b", gpus(10))]
    ledger = QuotaLedger(quotas, {}, org(dept_a=gpus(0, borrowing=3)))
    assert room(ledger, "a1") == 5
    ledger.reserve("a1", {GPU: 5 * ONE})
    assert room(ledger, "a1") == 0
    assert room(ledger, "b1") == 7


def test_a_tree_without_cohort_objects_is_the_flat_cohort() -> None:
    quotas = [team("a", "pool", gpus(4)), team("b", "pool", gpus(4, lending=1))]
    ledger = QuotaLedger(quotas, {"b": {GPU: 1 * ONE}})
    assert room(ledger, "a") == 5  # its 4 and the 1 b may lend


def test_the_admission_message_names_each_cohort_a_borrowed_gpu_comes_from() -> None:
    quotas = [
        team("a1", "dept-a", gpus(2)),
        team("a2", "dept-a", gpus(2)),
        team("b1", "dept-b", gpus(8)),
    ]
    ledger = QuotaLedger(quotas, {}, org())
    drawn = ledger.drawn_from("a1", {GPU: 6 * ONE})
    # 4 beyond a1's nominal, from dept-a: 2 of a2's, and 2 from org, beyond dept-a's 4.
    assert drawn == {GPU: [("dept-a", 4 * ONE), ("org", 2 * ONE)]}


def test_cycles_are_named_from_their_smallest_member_and_broken() -> None:
    cohorts = [cohort("b", "c"), cohort("c", "a"), cohort("a", "b"), cohort("d", "a")]
    assert cycles(cohorts) == [("a", "b", "c")]
    quotas = [team("t", "d", gpus(1)), team("u", "a", gpus(1))]
    ledger = QuotaLedger(quotas, {}, cohorts)  # builds a forest all the same
    assert room(ledger, "t") == 2
    assert roots_of(quotas, cohorts) == {"t": "a", "u": "a"}


# -- the property --------------------------------------------------------------------


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[TeamQuota], list[Cohort]]:
    """Up to three levels of cohorts with their own limits, and TeamQuotas below them."""

    def limits(parent: bool) -> ResourceQuota:
        nominal = draw(st.integers(0, 6))
        borrowing = draw(st.none() | st.integers(0, 6)) if parent else None
        lending = draw(st.none() | st.integers(0, nominal))
        return gpus(nominal, borrowing=borrowing, lending=lending)

    cohorts: list[Cohort] = []
    for index in range(draw(st.integers(1, 6))):
        parent = draw(st.sampled_from(["", *(c.name for c in cohorts)]))
        depth = 0
        name = parent
        while name:
            depth += 1
            name = next(c.parent for c in cohorts if c.name == name)
        if depth >= 2:
            parent = ""
        own = draw(st.booleans())
        cohorts.append(cohort(f"c{index}", parent, limits(bool(parent)) if own else None))
    quotas = [
        team(f"t{index}", draw(st.sampled_from([c.name for c in cohorts])), limits(True))
        for index in range(draw(st.integers(1, 6)))
    ]
    return quotas, cohorts


def _subtree_leaves(node: Node) -> list[Node]:
    if not node.cohort:
        return [node]
    return [leaf for child in node.children for leaf in _subtree_leaves(child)]


def _check(ledger: QuotaLedger) -> None:
    tree = ledger.tree
    nodes = [*tree.quotas.values(), *tree.cohorts.values()]
    for node in nodes:
        used = node.usage.get(GPU, 0)
        if node.cohort:  # a cohort's use is what its children draw, whatever the order
            drawn = sum(
                max(0, c.usage.get(GPU, 0) - c.guaranteed(GPU))
                for c in node.children
                if c.draws_on_parent(GPU)
            )
            assert used == drawn, node.label
        if node.parent is None:
            assert used <= node.subtree.get(GPU, 0), f"{node.label} overdrawn"
            continue
        limits = node.limits.get(GPU)
        if limits is not None and limits.borrowing_limit is not None:
            assert used <= node.subtree.get(GPU, 0) + limits.borrowing_limit, node.label
        if limits is not None and limits.lending_limit is not None and node.cohort:
            # What the siblings draw beyond all that the parent has besides this
            # cohort's lent part comes from that part: never more than it may lend.
            parent = node.parent
            others = [c for c in parent.children if c is not node]
            outside = sum(max(0, c.usage.get(GPU, 0) - c.guaranteed(GPU)) for c in others)
            supply = parent.subtree.get(GPU, 0) - (node.subtree.get(GPU, 0) - node.guaranteed(GPU))
            from_above = max(0, parent.usage.get(GPU, 0) - parent.guaranteed(GPU))
            lent = max(0, outside - supply - from_above)
            assert lent <= min(limits.lending_limit, node.subtree.get(GPU, 0)), node.label


def _usage_with_is_what_add_makes(ledger: QuotaLedger, name: str, amount: int) -> None:
    tree = ledger.tree
    leaf = tree.quotas[name]
    ahead = {id(n): tree.usage_with(n, leaf, GPU, amount * ONE) for n in leaf.path()}
    tree.add(leaf, GPU, amount * ONE)
    try:
        assert ahead == {id(n): n.usage.get(GPU, 0) for n in leaf.path()}
    finally:
        tree.add(leaf, GPU, -amount * ONE)


@settings(max_examples=150, deadline=None)
@given(
    forest=forests(),
    steps=st.lists(st.tuples(st.integers(0, 5), st.integers(-4, 6)), max_size=30),
)
def test_no_node_or_quota_at_any_level_is_overdrawn(
    forest: tuple[list[TeamQuota], list[Cohort]], steps: list[tuple[int, int]]
) -> None:
    quotas, cohorts = forest
    ledger = QuotaLedger(quotas, {}, cohorts)
    held: dict[str, int] = dict.fromkeys((q.name for q in quotas), 0)
    for index, amount in steps:
        name = quotas[index % len(quotas)].name
        if amount < 0:
            amount = -min(-amount, held[name])  # give back only what it holds
        elif ledger.shortfall(name, {GPU: amount * ONE}) is not None:
            continue  # what the cycle would refuse
        if amount:
            ledger.reserve(name, {GPU: amount * ONE})
            held[name] += amount
        _check(ledger)
        _usage_with_is_what_add_makes(ledger, name, amount + 1)
        for quota in quotas:  # a TeamQuota never holds more than nominal + borrowing
            limits = quota.resources[GPU]
            if limits.borrowing_limit is not None:
                assert held[quota.name] * ONE <= limits.nominal + limits.borrowing_limit
