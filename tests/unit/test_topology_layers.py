"""Layered slices (Kueue's podset-slice-required-topology-constraints, ours
queue-controller.io/topology-slices): parsed as Kueue parses them, refused where
Kueue refuses them (naming the annotation), and placed with every outer slice in
one domain of its level, its inner slices in index order inside it."""

from __future__ import annotations

import json

import pytest

from queue_controller.core import Verdict, Workload
from queue_controller.core.model.objects import PodSet, TopologyMode, TopologyRequest
from queue_controller.kube.kinds.topology import topology_request
from tests.builders import running_pod, template
from tests.unit.test_topology import BLOCK, FIELD, HOST, RACK, decide, rack_of, racks

TPL = "spec.template.metadata.annotations"
KUEUE = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
OURS = "queue-controller.io/topology-slices"
RACK_HOST = [{"topology": RACK, "size": 4}, {"topology": HOST, "size": 2}]


def layered(
    name: str,
    members: int,
    gpus_each: int = 1,
    *,
    layers: tuple[tuple[str, int], ...] = ((RACK, 4), (HOST, 2)),
    mode: TopologyMode = TopologyMode.UNCONSTRAINED,
    level: str = "",
) -> Workload:
    (outer, size), *inner = layers
    request = TopologyRequest(
        mode,
        level,
        size,
        outer,
        field=FIELD,
        inner_slices=tuple(inner),
        slices_field=f"{TPL}[{KUEUE}]",
    )
    pod_set = PodSet("main", template(gpus_each), members, members, topology=request)
    return Workload("ns", name, "q", (pod_set,), "Job")


# -- parsing ------------------------------------------------------------------------


@pytest.mark.parametrize("key", [KUEUE, OURS])
def test_either_spelling_gives_the_outer_layer_and_the_layers_inside(key: str) -> None:
    request, error = topology_request(
        {"kueue.x-k8s.io/podset-required-topology": BLOCK, key: json.dumps(RACK_HOST)},
        prefix=TPL,
    )
    assert error == ""
    assert request == TopologyRequest(
        TopologyMode.REQUIRED,
        BLOCK,
        4,
        RACK,
        field=f"{TPL}[kueue.x-k8s.io/podset-required-topology]",
        inner_slices=((HOST, 2),),
        slices_field=f"{TPL}[{key}]",
    )


def test_layers_alone_bind_only_the_slices_and_one_layer_is_a_single_slice_layer() -> None:
    request, _ = topology_request({KUEUE: json.dumps(RACK_HOST[:1])}, prefix=TPL)
    assert request is not None
    assert (request.mode, request.slice_level, request.slice_size) == (
        TopologyMode.UNCONSTRAINED,
        RACK,
        4,
    )
    assert request.inner_slices == ()


def test_both_spellings_where_they_agree_spacing_aside() -> None:
    written = {KUEUE: json.dumps(RACK_HOST), OURS: json.dumps(RACK_HOST, indent=2)}
    request, error = topology_request(written, prefix=TPL)
    assert error == ""
    assert request is not None
    assert request.inner_slices == ((HOST, 2),)
    written[OURS] = json.dumps([RACK_HOST[0], {"topology": HOST, "size": 1}])
    request, error = topology_request(written, prefix=TPL)
    assert request is None
    assert error.startswith(f"{TPL}[{OURS}] and {TPL}[{KUEUE}] disagree")


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("invalid-json", f"{TPL}[{KUEUE}]: not a JSON list of layers"),
        ("[]", f"{TPL}[{KUEUE}]: a JSON list of 1 to 3 layers"),
        ('{"topology": "x", "size": 1}', f"{TPL}[{KUEUE}]: a JSON list of 1 to 3 layers"),
        (
            json.dumps([{"topology": f"l{i}", "size": 1} for i in range(4)]),
            f"{TPL}[{KUEUE}]: a JSON list of 1 to 3 layers",
        ),
        ('[{"topology": "x", "size": 0}]', f"{TPL}[{KUEUE}][0].size: 0 is not a positive"),
        ('[{"topology": "x", "size": "4"}]', f'{TPL}[{KUEUE}][0].size: "4" is not a positive'),
        ('[{"topology": "x", "size": true}]', f"{TPL}[{KUEUE}][0].size: true is not a positive"),
        ('[{"topology": "", "size": 1}]', f"{TPL}[{KUEUE}][0].topology: name a level"),
        ('[{"size": 1}]', f"{TPL}[{KUEUE}][0].topology: name a level"),
        ('["x"]', f"{TPL}[{KUEUE}][0]: a layer is an object"),
        (
            '[{"topology": "x", "sizes": [1, 3]}]',
            f'{TPL}[{KUEUE}][0]: unknown key(s) "sizes"',
        ),
        (
            json.dumps([RACK_HOST[0], {"topology": HOST, "size": 3}]),
            f"{TPL}[{KUEUE}][1].size: 3 does not divide the size of the layer above (4)",
        ),
        (
            json.dumps([RACK_HOST[0], {"topology": RACK, "size": 2}]),
            f'{TPL}[{KUEUE}][1].topology: "{RACK}" is also layer 0',
        ),
    ],
)
def test_layers_written_wrong_are_refused_naming_the_annotation(value: str, needle: str) -> None:
    request, error = topology_request({KUEUE: value}, prefix=TPL)
    assert request is None
    assert error.startswith(needle), error


@pytest.mark.parametrize(
    "single", ["kueue.x-k8s.io/podset-slice-size", "queue-controller.io/topology-slice-required"]
)
def test_layers_and_a_single_slice_layer_together_are_refused(single: str) -> None:
    request, error = topology_request({KUEUE: json.dumps(RACK_HOST), single: "4"}, prefix=TPL)
    assert request is None
    assert error == f"{TPL}[{KUEUE}]: may not be set together with {TPL}[{single}]"


def test_layers_on_members_without_an_index_are_refused() -> None:
    request, error = topology_request(
        {OURS: json.dumps(RACK_HOST)}, prefix=TPL, no_index="plain pods have no index"
    )
    assert request is None
    assert error == f"{TPL}[{OURS}]: plain pods have no index"


# -- against the Topology -----------------------------------------------------------


def test_layers_out_of_order_or_unknown_or_uneven_are_invalid_naming_the_annotation() -> None:
    nodes = racks(("b0", "r0", 2))
    found = decide(
        nodes,
        layered("backwards", 4, layers=((HOST, 4), (RACK, 2))),
        layered("unknown", 4, layers=((RACK, 4), ("example.com/row", 2))),
        layered("uneven", 6),
        layered(
            "broader", 4, layers=((BLOCK, 4), (HOST, 2)), mode=TopologyMode.REQUIRED, level=RACK
        ),
    )
    where = f"{TPL}[{KUEUE}]"
    assert all(d.verdict is Verdict.INVALID for d in found.values())
    assert found["backwards"].message.startswith(
        f"{where}[1].topology: '{RACK}' is not narrower than the layer above ('{HOST}')"
    )
    assert found["unknown"].message.startswith(
        f"{where}[1].topology: 'example.com/row' is not a level of Topology dc"
    )
    assert found["uneven"].message == (
        f"{where}: slice size 4 does not divide the pod set's 6 members"
    )
    assert found["broader"].message.startswith(
        f"{where}[0].topology: slice level '{BLOCK}' is broader than"
    )


# -- placing ------------------------------------------------------------------------


def test_host_slices_nest_in_rack_slices_in_index_order() -> None:
    # r0: 3 and 8 GPUs free (one and four host slices of 2: two rack slices of 4);
    # r1: 1 and 8 free (four host slices: two rack slices).  Twelve members are three
    # rack slices: two in one rack, one in the other, each made of two host slices.
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2))
    busy = (running_pod("r0-n0", 5), running_pod("r1-n0", 7))
    found = decide(nodes, layered("g", 12), pods=busy)["g"]
    assert found.verdict is Verdict.ADMIT
    slices = found.slices["main"]
    assert len(slices) == 6
    assert all(len(s) == 1 and sum(s.values()) == 2 for s in slices)
    outer = [{rack_of(n) for s in slices[i : i + 2] for n in s} for i in range(0, len(slices), 2)]
    assert all(len(racks_of) == 1 for racks_of in outer)
    assert sum(found.placement.values()) == 12


def test_a_rack_with_members_enough_but_too_few_whole_host_slices_is_not_taken() -> None:
    # Host slices of 2 inside rack slices of 6.  r0 has 3 + 3 GPUs free: six members,
    # but two host slices, not the three a rack slice needs; r1's one node holds four.
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 1))
    busy = (running_pod("r0-n0", 5), running_pod("r0-n1", 5))
    found = decide(nodes, layered("g", 6, layers=((RACK, 6), (HOST, 2))), pods=busy)["g"]
    assert found.verdict is Verdict.ADMIT
    assert {rack_of(n) for n in found.placement} == {"r1"}
    too_big = decide(nodes, layered("h", 12, layers=((RACK, 6), (HOST, 2))), pods=busy)["h"]
    assert too_big.verdict is Verdict.PENDING
    assert "slices of 6 members, each inside one rack; at most 1 fit now" in too_big.message


def test_three_layers_block_rack_host() -> None:
    # Every node has 2 GPUs free (one host slice of 2), but r3's have 1: b1 holds one
    # rack slice of 4, not a block slice of 8; b0 holds one, over its four nodes.
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2), ("b1", "r2", 2), ("b1", "r3", 2))
    busy = tuple(running_pod(n.name, 7 if n.name.startswith("r3") else 6) for n in nodes)
    layers = ((BLOCK, 8), (RACK, 4), (HOST, 2))
    found = decide(nodes, layered("g", 8, layers=layers), pods=busy)["g"]
    assert found.verdict is Verdict.ADMIT
    slices = found.slices["main"]
    assert [sorted(s) for s in slices] == [["r0-n0"], ["r0-n1"], ["r1-n0"], ["r1-n1"]]
    assert found.domains == {"main": "b0"}
    too_big = decide(nodes, layered("h", 16, layers=layers), pods=busy)["h"]
    assert too_big.verdict is Verdict.PENDING
