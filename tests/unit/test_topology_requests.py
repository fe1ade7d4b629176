"""Topology-aware gangs outside the core: what a workload asks (its pod template's
annotations, ours and Kueue's), the Topology object and a Queue's spec.topologyName, as
the kube translation reads them."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from queue_controller.controller.state import ClusterState
from queue_controller.core import Topology, TopologyMode, TopologyRequest
from queue_controller.errors import InputError
from queue_controller.kube import objects
from queue_controller.kube.kinds.batchjob import BatchJob
from queue_controller.kube.kinds.plainpods import PlainPods
from queue_controller.kube.kinds.topology import topology_request
from queue_controller.kube.views import member_pod
from tests.unit.test_kind_plainpods import pod as plain_pod
from tests.unit.test_lifecycle import NOW, QUEUE, job
from tests.views import seen

RACK = "topology.queue-controller.io/rack"
BLOCK = "topology.queue-controller.io/block"
TPL = "spec.template.metadata.annotations"
OURS = "queue-controller.io/topology-"
KUEUE = "kueue.x-k8s.io/podset-"


# --- the annotations -------------------------------------------------------------------------


def test_nothing_asked_is_no_request() -> None:
    assert topology_request({"other": "x"}, prefix=TPL) == (None, "")


@pytest.mark.parametrize(
    ("key", "mode"),
    [
        (f"{OURS}required", TopologyMode.REQUIRED),
        (f"{KUEUE}required-topology", TopologyMode.REQUIRED),
        (f"{OURS}preferred", TopologyMode.PREFERRED),
        (f"{KUEUE}preferred-topology", TopologyMode.PREFERRED),
    ],
)
def test_required_and_preferred_in_either_spelling(key: str, mode: TopologyMode) -> None:
    request, error = topology_request({key: RACK}, prefix=TPL)
    assert error == ""
    assert request == TopologyRequest(mode=mode, level=RACK, field=f"{TPL}[{key}]")


@pytest.mark.parametrize("key", [f"{OURS}unconstrained", f"{KUEUE}unconstrained-topology"])
def test_unconstrained_in_either_spelling(key: str) -> None:
    request, error = topology_request({key: "true"}, prefix=TPL)
    assert error == ""
    assert request == TopologyRequest(mode=TopologyMode.UNCONSTRAINED, field=f"{TPL}[{key}]")
    assert topology_request({key: "false"}, prefix=TPL) == (None, "")


def test_slices_with_a_level() -> None:
    request, error = topology_request(
        {f"{OURS}required": BLOCK, f"{OURS}slice-required": RACK, f"{OURS}slice-size": "4"},
        prefix=TPL,
    )
    assert error == ""
    assert request == TopologyRequest(
        mode=TopologyMode.REQUIRED,
        level=BLOCK,
        slice_size=4,
        slice_level=RACK,
        field=f"{TPL}[{OURS}required]",
    )


def test_kueue_slices_alone_are_unconstrained_but_sliced() -> None:
    request, error = topology_request(
        {f"{KUEUE}slice-required-topology": RACK, f"{KUEUE}slice-size": "2"}, prefix=TPL
    )
    assert error == ""
    assert request == TopologyRequest(
        mode=TopologyMode.UNCONSTRAINED,
        slice_size=2,
        slice_level=RACK,
        field=f"{TPL}[{KUEUE}slice-required-topology]",
    )


def test_both_spellings_may_agree() -> None:
    request, error = topology_request(
        {f"{OURS}required": RACK, f"{KUEUE}required-topology": RACK}, prefix=TPL
    )
    assert error == ""
    assert request is not None
    assert request.field == f"{TPL}[{OURS}required]"  # ours is named where both are written


@pytest.mark.parametrize(
    ("written", "needles"),
    [
        pytest.param(
            {f"{OURS}required": RACK, f"{KUEUE}required-topology": BLOCK},
            (f"{TPL}[{OURS}required]", f"{TPL}[{KUEUE}required-topology]", "disagree"),
            id="aliases-disagree",
        ),
        pytest.param(
            {f"{OURS}slice-size": "2", f"{KUEUE}slice-size": "4"},
            (f"{TPL}[{OURS}slice-size]", f"{TPL}[{KUEUE}slice-size]", "disagree"),
            id="slice-size-aliases-disagree",
        ),
        pytest.param(
            {f"{OURS}required": RACK, f"{OURS}preferred": BLOCK},
            (f"{TPL}[{OURS}required]", f"{TPL}[{OURS}preferred]"),
            id="required-and-preferred",
        ),
        pytest.param(
            {f"{OURS}required": RACK, f"{KUEUE}unconstrained-topology": "true"},
            (f"{TPL}[{OURS}required]", f"{TPL}[{KUEUE}unconstrained-topology]"),
            id="required-and-unconstrained",
        ),
        pytest.param(
            {f"{OURS}slice-size": "2"},
            (f"{TPL}[{OURS}slice-size]", f"{OURS}slice-required"),
            id="size-without-level",
        ),
        pytest.param(
            {f"{KUEUE}slice-required-topology": RACK},
            (f"{TPL}[{KUEUE}slice-required-topology]", f"{OURS}slice-size"),
            id="level-without-size",
        ),
        pytest.param(
            {f"{OURS}slice-required": RACK, f"{OURS}slice-size": "x"},
            (f'{TPL}[{OURS}slice-size]: "x" is not a positive whole number',),
            id="size-not-a-number",
        ),
        pytest.param(
            {f"{OURS}slice-required": RACK, f"{OURS}slice-size": "0"},
            (f'{TPL}[{OURS}slice-size]: "0" is not a positive whole number',),
            id="size-zero",
        ),
        pytest.param(
            {f"{OURS}slice-required": RACK, f"{OURS}slice-size": "-2"},
            (f'{TPL}[{OURS}slice-size]: "-2" is not a positive whole number',),
            id="size-negative",
        ),
        pytest.param(
            {f"{OURS}required": ""},
            (f"{TPL}[{OURS}required]: empty",),
            id="empty-level",
        ),
        pytest.param(
            {f"{OURS}unconstrained": "yes"},
            (f'{TPL}[{OURS}unconstrained]: "yes"',),
            id="unconstrained-not-a-boolean",
        ),
    ],
)
def test_every_mistake_names_its_field(written: dict[str, str], needles: tuple[str, ...]) -> None:
    request, error = topology_request(written, prefix=TPL)
    assert request is None
    for needle in needles:
        assert needle in error


def test_slices_without_an_index_are_refused() -> None:
    written = {f"{OURS}slice-required": RACK, f"{OURS}slice-size": "2"}
    request, error = topology_request(written, prefix=TPL, no_index="no index here")
    assert request is None
    assert error == f"{TPL}[{OURS}slice-required]: no index here"


# --- a Job -------------------------------------------------------------------------------------


def a_job(annotations: dict[str, str], *, indexed: bool = True) -> dict[str, Any]:
    body = copy.deepcopy(job(parallelism=4))
    body["spec"]["template"]["metadata"] = {"annotations": annotations}
    if indexed:
        body["spec"]["completionMode"] = "Indexed"
        body["spec"]["completions"] = 4
    return body


def read_job(body: dict[str, Any]) -> Any:
    return BatchJob().read(namespace="ns", name="train", head=body, members=())


def test_a_job_asks_on_its_pod_template() -> None:
    facts = read_job(a_job({f"{KUEUE}required-topology": RACK})).facts
    assert facts.spec_error == ""
    (pod_set,) = facts.pod_sets
    assert pod_set.topology == TopologyRequest(
        mode=TopologyMode.REQUIRED, level=RACK, field=f"{TPL}[{KUEUE}required-topology]"
    )


def test_a_job_that_asks_nothing_has_no_request() -> None:
    facts = read_job(a_job({}, indexed=False)).facts
    assert facts.pod_sets[0].topology is None
    assert facts.spec_error == ""


def test_a_job_annotation_on_the_job_itself_is_not_read() -> None:
    body = a_job({})
    body["metadata"]["annotations"] = {f"{OURS}required": RACK}
    assert read_job(body).facts.pod_sets[0].topology is None


def test_a_job_mistake_is_its_spec_error() -> None:
    facts = read_job(a_job({f"{OURS}slice-required": RACK, f"{OURS}slice-size": "x"})).facts
    assert facts.spec_error == f'{TPL}[{OURS}slice-size]: "x" is not a positive whole number'


def test_a_job_sliced_needs_indexed_completion() -> None:
    written = {f"{OURS}slice-required": RACK, f"{OURS}slice-size": "2"}
    facts = read_job(a_job(written, indexed=False)).facts
    assert facts.spec_error.startswith(f"{TPL}[{OURS}slice-required]: ")
    assert "completionMode: Indexed" in facts.spec_error
    sliced = read_job(a_job(written)).facts
    assert sliced.spec_error == ""
    assert sliced.pod_sets[0].topology is not None
    assert sliced.pod_sets[0].topology.slice_size == 2


# --- plain pods --------------------------------------------------------------------------------


def read_pods(*bodies: dict[str, Any]) -> Any:
    members = [member_pod(b) for b in bodies]
    kind = PlainPods()
    placed = []
    for m in members:
        membership = kind.membership(m)
        assert membership is not None
        placed.append(replace(m, pod_set=membership.pod_set))
    return kind.read(namespace="ns", name="ring", head=None, members=placed).facts


def test_plain_pods_ask_on_their_own_annotations() -> None:
    notes: dict[str, Any] = {f"{OURS}preferred": RACK}
    facts = read_pods(plain_pod("a", **notes), plain_pod("b", **notes))
    assert facts.spec_error == ""
    (pod_set,) = facts.pod_sets
    assert pod_set.topology == TopologyRequest(
        mode=TopologyMode.PREFERRED,
        level=RACK,
        field=f"metadata.annotations[{OURS}preferred]",
    )


def test_plain_pods_of_one_pod_set_must_agree() -> None:
    required: dict[str, Any] = {f"{OURS}required": RACK}
    facts = read_pods(plain_pod("a", **required), plain_pod("b"))
    assert "metadata.annotations" in facts.spec_error
    assert "pods a and b" in facts.spec_error


def test_plain_pods_cannot_ask_for_slices() -> None:
    notes: dict[str, Any] = {f"{OURS}slice-required": RACK, f"{OURS}slice-size": "1"}
    facts = read_pods(plain_pod("a", **notes), plain_pod("b", **notes))
    assert facts.spec_error.startswith(f"metadata.annotations[{OURS}slice-required]: ")
    assert "plain pods" in facts.spec_error
    assert "(on pod a)" in facts.spec_error


# --- the Topology object and a Queue's topologyName ---------------------------------------------


def topology(name: str, *labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
    }


def test_topologies_and_the_queue_topology_are_translated() -> None:
    state = ClusterState()
    queue: dict[str, Any] = copy.deepcopy(QUEUE)
    queue["spec"]["topologyName"] = "racks"
    for obj in (queue, topology("racks", BLOCK, RACK, "kubernetes.io/hostname")):
        state.upsert(obj)
    snapshot = seen(state, NOW).snapshot
    assert snapshot.topologies == (Topology("racks", (BLOCK, RACK, "kubernetes.io/hostname")),)
    (translated,) = snapshot.queues
    assert translated.topology_name == "racks"


def test_a_queue_without_a_topology_names_none() -> None:
    assert objects.queue(QUEUE).topology_name == ""


@pytest.mark.parametrize(
    ("labels", "needles"),
    [
        ((BLOCK, RACK, BLOCK), ("spec", "levels[2].nodeLabel", "already a level")),
        ((BLOCK, "kubernetes.io/hostname", RACK), ("levels[1].nodeLabel", "last")),
        ((), ("spec.levels",)),
        (("not a key",), ("spec.levels.0.nodeLabel",)),
    ],
)
def test_a_bad_topology_names_the_field(labels: tuple[str, ...], needles: tuple[str, ...]) -> None:
    with pytest.raises(InputError) as raised:
        objects.topology(topology("racks", *labels))
    shown = str(raised.value)
    for needle in needles:
        assert needle in shown
