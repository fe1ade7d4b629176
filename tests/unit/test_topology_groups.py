"""Pod-set groups (Kueue's podset-group-name): a leader and its workers, with different
requests, counted together into one domain of their level; and the groups Kueue refuses,
refused with the annotation named."""

from __future__ import annotations

import pytest

from queue_controller.core import Reason, Verdict, Workload
from queue_controller.core.model.objects import PodSet, TopologyMode, TopologyRequest
from queue_controller.kube.kinds.topology import topology_request
from tests.builders import gpu_node, running_pod, template
from tests.unit.test_topology import BLOCK, HOST, RACK, decide, rack_of, racks

GROUP_FIELD = "spec.template.metadata.annotations[queue-controller.io/topology-group]"
TPL = "spec.template.metadata.annotations"


def ask(
    group: str = "g", mode: TopologyMode = TopologyMode.REQUIRED, level: str = RACK
) -> TopologyRequest:
    return TopologyRequest(
        mode, level, field=f"{TPL}[required]", group=group, group_field=GROUP_FIELD
    )


def leader_and_workers(
    name: str,
    workers: int,
    *,
    worker_gpus: int = 8,
    worker_cpu: str = "1",
    leader_cpu: str = "8",
    leader: TopologyRequest | None = None,
    worker: TopologyRequest | None = None,
    leaders: int = 1,
) -> Workload:
    """A Ray-style head (CPU only) and its GPU workers, both asking for ``ask()``."""
    head = PodSet(
        "head",
        template(0, cpu=leader_cpu),
        leaders,
        leaders,
        topology=leader if leader is not None else ask(),
    )
    pool = PodSet(
        "workers",
        template(worker_gpus, cpu=worker_cpu),
        workers,
        workers,
        topology=worker if worker is not None else ask(),
    )
    return Workload("ns", name, "q", (head, pool), "RayCluster")


def racks_of(decision_placement: dict[str, dict[str, int]]) -> set[str]:
    return {rack_of(node) for nodes in decision_placement.values() for node in nodes}


# --- placed together ---------------------------------------------------------------------


def test_the_leader_goes_to_its_workers_rack_not_to_the_rack_in_use() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 3))
    busy = (running_pod("r0-n0", 4),)  # r0 in use: a pod set alone would go there first
    apart = decide(
        nodes,
        leader_and_workers("apart", 3, leader=ask(""), worker=ask("")),
        pods=busy,
    )["apart"]
    assert racks_of(apart.pod_set_placement) == {"r0", "r1"}  # each in its own rack
    together = decide(nodes, leader_and_workers("ray", 3), pods=busy)["ray"]
    assert together.verdict is Verdict.ADMIT
    assert racks_of(together.pod_set_placement) == {"r1"}
    assert together.domains["workers"] == "b0/r1"
    assert together.domains["head"].startswith("b0/r1")


def test_the_leader_s_cpu_and_the_workers_gpus_are_counted_together() -> None:
    # r1's three nodes hold the workers exactly, leaving 4 CPUs a node: not the head's 8.
    # Alone, the workers best-fit r1; together they go to r2, where the head fits too.
    nodes = racks(("b0", "r1", 3), ("b0", "r2", 4))
    workers = leader_and_workers("a", 3, worker_cpu="60", worker=ask("")).pod_sets[1]
    alone = decide(nodes, Workload("ns", "a", "q", (workers,), "Job"))["a"]
    assert {rack_of(n) for n in alone.placement} == {"r1"}
    found = decide(nodes, leader_and_workers("ray", 3, worker_cpu="60"))["ray"]
    assert found.verdict is Verdict.ADMIT
    assert racks_of(found.pod_set_placement) == {"r2"}


def test_a_required_group_that_fits_only_apart_waits_and_says_why() -> None:
    nodes = racks(("b0", "r1", 3), ("b0", "r2", 3))
    found = decide(nodes, leader_and_workers("ray", 3, worker_cpu="60"))["ray"]
    assert (found.verdict, found.reason) == (Verdict.PENDING, Reason.NO_NODE_FIT)
    assert found.message == (
        "pod sets head, workers of topology group 'g': each fits alone, but no one rack "
        "(example.com/rack) holds them together now"
    )


def test_a_member_that_does_not_fit_even_alone_is_named_with_its_own_reason() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2))
    found = decide(nodes, leader_and_workers("ray", 3))["ray"]
    assert found.reason is Reason.NO_NODE_FIT
    assert found.message.startswith("pod set workers of topology group 'g': ")
    assert "the gang needs 24 in one rack" in found.message


def test_a_preferred_group_falls_back_to_one_block() -> None:
    nodes = racks(("b0", "r1", 3), ("b0", "r2", 3), ("b1", "r3", 1))
    preferred = ask(mode=TopologyMode.PREFERRED)
    workload = leader_and_workers("ray", 3, worker_cpu="60", leader=preferred, worker=preferred)
    found = decide(nodes, workload)["ray"]
    assert found.verdict is Verdict.ADMIT
    assert racks_of(found.pod_set_placement) <= {"r1", "r2"}  # block b0, not b1


def test_a_group_on_one_node_shares_the_node() -> None:
    nodes = [gpu_node("n0", 8, labels={BLOCK: "b0", RACK: "r0"})]
    nodes += [gpu_node("n1", 8, cpu="2", labels={BLOCK: "b0", RACK: "r0"})]
    host = ask(level=HOST)
    found = decide(nodes, leader_and_workers("ray", 1, leader=host, worker=host))["ray"]
    assert found.verdict is Verdict.ADMIT
    # n1 best-fits the worker alone, but has too little CPU left for the head.
    assert found.pod_set_placement == {"head": {"n0": 1}, "workers": {"n0": 1}}


def test_a_second_group_is_placed_after_the_first_took_its_room() -> None:
    nodes = racks(("b0", "r0", 2), ("b0", "r1", 2))
    first = leader_and_workers("first", 2)
    second = leader_and_workers("second", 2)
    found = decide(nodes, first, second)
    assert racks_of(found["first"].pod_set_placement) != racks_of(found["second"].pod_set_placement)
    assert all(found[n].verdict is Verdict.ADMIT for n in ("first", "second"))


# --- refused as Kueue refuses ---------------------------------------------------------------


def test_a_group_of_three_pod_sets_is_refused_naming_the_annotation() -> None:
    extra = PodSet("extra", template(1), 1, 1, topology=ask())
    base = leader_and_workers("ray", 2)
    three = Workload("ns", "ray", "q", (*base.pod_sets, extra), "RayCluster")
    found = decide(racks(("b0", "r0", 4)), three)["ray"]
    assert (found.verdict, found.reason) == (Verdict.INVALID, Reason.INVALID_SPEC)
    assert found.message.startswith(f"{GROUP_FIELD}: group 'g' has 3 pod set(s)")


def test_a_group_of_one_pod_set_is_refused() -> None:
    one = Workload("ns", "j", "q", (PodSet("main", template(1), 2, 2, topology=ask()),), "Job")
    found = decide(racks(("b0", "r0", 2)), one)["j"]
    assert found.reason is Reason.INVALID_SPEC
    assert "has 1 pod set(s) (main)" in found.message


def test_a_group_without_a_single_pod_leader_is_refused() -> None:
    found = decide(racks(("b0", "r0", 4)), leader_and_workers("ray", 2, leaders=2))["ray"]
    assert found.reason is Reason.INVALID_SPEC
    assert "one of its 2 pod sets must be a single pod" in found.message


@pytest.mark.parametrize(
    "other",
    [ask(level=BLOCK), ask(mode=TopologyMode.PREFERRED)],
)
def test_a_group_asking_two_ways_is_refused(other: TopologyRequest) -> None:
    found = decide(racks(("b0", "r0", 4)), leader_and_workers("ray", 2, worker=other))["ray"]
    assert found.reason is Reason.INVALID_SPEC
    assert found.message.startswith(f"{GROUP_FIELD}: group 'g': pod sets head and workers")


def test_different_groups_are_placed_each_in_its_own_domain() -> None:
    base = leader_and_workers("ray", 2)
    other = [
        PodSet("head2", template(0, cpu="8"), 1, 1, topology=ask("h")),
        PodSet("workers2", template(8), 2, 2, topology=ask("h")),
    ]
    both = Workload("ns", "two", "q", (*base.pod_sets, *other), "RayCluster")
    found = decide(racks(("b0", "r0", 2), ("b0", "r1", 2)), both)["two"]
    assert found.verdict is Verdict.ADMIT
    placement = found.pod_set_placement
    assert racks_of({k: placement[k] for k in ("head", "workers")}) == {"r0"} or racks_of(
        {k: placement[k] for k in ("head", "workers")}
    ) == {"r1"}
    assert len(racks_of({k: placement[k] for k in ("head2", "workers2")})) == 1


# --- the annotation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["queue-controller.io/topology-group", "kueue.x-k8s.io/podset-group-name"]
)
def test_the_group_annotation_in_either_spelling(key: str) -> None:
    request, error = topology_request(
        {key: "ray", "kueue.x-k8s.io/podset-required-topology": RACK}, prefix=TPL
    )
    assert error == ""
    assert request is not None
    assert (request.group, request.group_field) == ("ray", f"{TPL}[{key}]")


@pytest.mark.parametrize(
    ("written", "needle"),
    [
        (
            {
                "queue-controller.io/topology-group": "a",
                "kueue.x-k8s.io/podset-group-name": "b",
            },
            "disagree",
        ),
        ({"queue-controller.io/topology-group": "12"}, "must not be a number"),
        ({"queue-controller.io/topology-group": " "}, "empty"),
        ({"queue-controller.io/topology-unconstrained": "true"}, "needs"),
        ({}, "needs"),
        (
            {
                "queue-controller.io/topology-slice-required": RACK,
                "queue-controller.io/topology-slice-size": "2",
            },
            "may not be set together with",
        ),
    ],
)
def test_a_group_written_wrong_names_the_annotation(written: dict[str, str], needle: str) -> None:
    annotations = {"queue-controller.io/topology-group": "g", **written}
    if "topology-unconstrained" not in str(written) and written:
        annotations.setdefault("queue-controller.io/topology-required", RACK)
    request, error = topology_request(annotations, prefix=TPL)
    assert request is None
    assert needle in error
    assert "topology-group" in error or "podset-group-name" in error


def test_layered_slices_in_a_group_are_refused_naming_the_group() -> None:
    # As Kueue: podset-group-name may not be set with the layered slices annotation.
    layered = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
    request, error = topology_request(
        {
            "kueue.x-k8s.io/podset-required-topology": RACK,
            "kueue.x-k8s.io/podset-group-name": "g",
            layered: '[{"topology": "kubernetes.io/hostname", "size": 2}]',
        },
        prefix=TPL,
    )
    assert request is None
    assert error == (
        f"{TPL}[kueue.x-k8s.io/podset-group-name]: may not be set together with {TPL}[{layered}]"
    )
