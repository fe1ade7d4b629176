import pytest

from queue_controller.core.model.objects import (
    NodeSelectorTerm,
    SelectorRequirement,
    Taint,
    Toleration,
)
from queue_controller.core.rules.nodes import (
    affinity_matches,
    exclusion,
    tolerates,
    untolerated_taint,
    usable_allocatable,
)
from tests.builders import gpu_node, template

BROKEN = Taint("gpu", "NoSchedule", "broken")


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration("gpu", "Equal", "broken", "NoSchedule"), BROKEN, True),
        (Toleration("gpu", "Equal", "fine", "NoSchedule"), BROKEN, False),
        (Toleration("gpu", "Exists", "", "NoSchedule"), BROKEN, True),
        (Toleration("gpu", "Exists"), BROKEN, True),  # empty effect matches all effects
        (Toleration("gpu", "Exists", "", "NoExecute"), BROKEN, False),
        (Toleration("other", "Exists"), BROKEN, False),
        (Toleration("", "Exists"), BROKEN, True),  # empty key + Exists tolerates everything
        (Toleration("gpu", "", "broken"), BROKEN, True),  # operator defaults to Equal
        (Toleration("gpu", "Bogus", "broken"), BROKEN, False),
    ],
)
def test_toleration_rules(toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_prefer_no_schedule_never_blocks() -> None:
    assert untolerated_taint((Taint("soft", "PreferNoSchedule"),), ()) is None


def test_no_execute_blocks_without_toleration() -> None:
    taint = Taint("dying", "NoExecute")
    assert untolerated_taint((taint,), ()) == taint
    assert untolerated_taint((taint,), (Toleration("dying", "Exists"),)) is None


def test_every_blocking_taint_needs_its_own_toleration() -> None:
    taints = (BROKEN, Taint("team", "NoSchedule", "a"))
    assert untolerated_taint(taints, (Toleration("gpu", "Exists"),)) == taints[1]


def expr(key: str, operator: str, *values: str) -> tuple[NodeSelectorTerm, ...]:
    return (NodeSelectorTerm(match_expressions=(SelectorRequirement(key, operator, values),)),)


LABELLED = gpu_node("n1", labels={"zone": "a", "gpu.memory": "81559", "rack": "r7"})


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        (expr("zone", "In", "a", "b"), True),
        (expr("zone", "In", "b"), False),
        (expr("zone", "NotIn", "b"), True),
        (expr("zone", "NotIn", "a"), False),
        (expr("missing", "NotIn", "a"), True),
        (expr("zone", "Exists"), True),
        (expr("missing", "Exists"), False),
        (expr("missing", "DoesNotExist"), True),
        (expr("zone", "DoesNotExist"), False),
        (expr("gpu.memory", "Gt", "40000"), True),
        (expr("gpu.memory", "Gt", "81559"), False),
        (expr("gpu.memory", "Lt", "90000"), True),
        (expr("gpu.memory", "Lt", "1000"), False),
        (expr("rack", "Gt", "1"), False),  # "r7" is not an integer: no match
        (expr("missing", "Lt", "1"), False),
        (None, True),
    ],
)
def test_required_node_affinity_operators(
    terms: tuple[NodeSelectorTerm, ...] | None, expected: bool
) -> None:
    assert affinity_matches(terms, LABELLED) is expected


def test_affinity_terms_are_ored_and_expressions_anded() -> None:
    both = NodeSelectorTerm(
        match_expressions=(
            SelectorRequirement("zone", "In", ("a",)),
            SelectorRequirement("rack", "In", ("r1",)),
        )
    )
    assert not affinity_matches((both,), LABELLED)
    assert affinity_matches((both, expr("rack", "In", "r7")[0]), LABELLED)


def test_empty_affinity_term_matches_nothing() -> None:
    assert not affinity_matches((NodeSelectorTerm(),), LABELLED)


def test_match_fields_select_by_node_name() -> None:
    term = NodeSelectorTerm(match_fields=(SelectorRequirement("metadata.name", "In", ("n1",)),))
    assert affinity_matches((term,), LABELLED)
    assert not affinity_matches((term,), gpu_node("n2"))


def test_exclusion_order_and_codes() -> None:
    pod = template(node_selector={"zone": "a"})
    assert exclusion(gpu_node("x", ready=False, labels={"zone": "a"}), pod).code == "NotReady"  # type: ignore[union-attr]
    assert (
        exclusion(gpu_node("x", unschedulable=True, labels={"zone": "a"}), pod).code
        == "Unschedulable"
    )  # type: ignore[union-attr]
    tainted = exclusion(gpu_node("x", taints=(BROKEN,), labels={"zone": "a"}), pod)
    assert tainted is not None
    assert tainted.describe() == "UntoleratedTaint gpu=broken:NoSchedule"
    assert exclusion(gpu_node("x", labels={"zone": "b"}), pod).code == "NodeSelector"  # type: ignore[union-attr]
    assert exclusion(gpu_node("x", labels={"zone": "a"}), pod) is None


def test_node_without_ready_condition_is_not_ready() -> None:
    node = gpu_node("x")
    unknown = type(node)(name="x", allocatable=node.allocatable, conditions={"Ready": "Unknown"})
    assert exclusion(unknown, template()) is not None
    bare = type(node)(name="x", allocatable=node.allocatable)
    assert exclusion(bare, template()) is not None


MIG = {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "2"}


@pytest.mark.parametrize(
    ("state", "offers_mig"),
    [(None, True), ("success", True), ("pending", False), ("rebooting", False), ("failed", False)],
)
def test_mig_capacity_only_when_configuration_succeeded(
    state: str | None, offers_mig: bool
) -> None:
    labels = {} if state is None else {"nvidia.com/mig.config.state": state}
    node = gpu_node("a100", 2, labels=labels, extra=MIG)
    usable = usable_allocatable(node)
    assert ("nvidia.com/mig-1g.10gb" in usable) is offers_mig
    assert ("nvidia.com/mig-3g.40gb" in usable) is offers_mig
    assert usable["nvidia.com/gpu"] == 2000  # whole GPUs are unaffected
    assert usable["cpu"] == node.allocatable["cpu"]
