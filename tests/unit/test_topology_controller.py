"""Topology-aware gangs on the controller's write side: the domain and slices an admission
writes to the PodGroup (and an eviction clears), and the binder sending each member of a
sliced pod set to its slice's nodes.  In process, against the fake gateway."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.controller.status import topology_domain
from queue_controller.core import CycleResult, Decision, Reason, Verdict
from queue_controller.journal import Journal, read_history
from queue_controller.kube.views import COMPLETION_INDEX
from tests.fakes.gateway import FakeGateway
from tests.unit.test_apply import cluster, only
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job, plan, pod
from tests.views import seen

DOMAIN = "block-a/rack-2"


def admit_in_racks(**extra: Any) -> Decision:
    return Decision(
        "ns/train",
        "q",
        Verdict.ADMIT,
        Reason.ADMITTED,
        "4 members",
        {"n1": 2, "n2": 2},
        kind="Job",
        **extra,
    )


def test_the_domain_of_one_pod_set_or_several() -> None:
    assert topology_domain({"main": DOMAIN}) == DOMAIN
    assert topology_domain({"workers": "b/r1", "launcher": "b/r0"}) == (
        "launcher=b/r0, workers=b/r1"
    )
    assert topology_domain({"main": ""}) == ""  # it spans top-level domains


def test_an_admission_carries_the_domains_and_slices_to_the_pod_group() -> None:
    slices = ({"n2": 2}, {"n1": 2})
    decision = admit_in_racks(domains={"main": DOMAIN}, slices={"main": slices})
    (admit,) = only(plan(job(), group(phase="Pending"), decisions=(decision,)), act.Admit)
    assert isinstance(admit, act.Admit)
    assert admit.domains == {"main": DOMAIN}
    assert admit.slices == {"main": slices}

    c = cluster(job(), group(phase="Pending"))
    assert c.cycle(decision) == 0
    status = c.held("PodGroup", "train")["status"]
    assert status["topologyDomain"] == DOMAIN
    assert status["topologyAssignment"] == {
        "main": {"domain": DOMAIN, "slices": [{"n2": 2}, {"n1": 2}]}
    }
    told = [e["message"] for e in c.fake.events if e["reason"] == "Admitted"]
    assert told  # on the PodGroup and the Job
    assert all(f"topology domain {DOMAIN}" in message for message in told)


def test_an_admission_without_a_topology_writes_none() -> None:
    c = cluster(job(), group(phase="Pending", topologyDomain="old", topologyAssignment={}))
    assert c.cycle(admit_in_racks()) == 0
    status = c.held("PodGroup", "train")["status"]
    assert "topologyDomain" not in status
    assert "topologyAssignment" not in status
    told = [e["message"] for e in c.fake.events if e["reason"] == "Admitted"]
    assert told
    assert not any("topology" in message for message in told)


def test_an_eviction_clears_the_domain_with_the_placement() -> None:
    c = cluster(
        job(suspend=False),
        group(
            phase="Admitted",
            placement={"n1": 2},
            admittedAt=iso(61),
            topologyDomain=DOMAIN,
            topologyAssignment={"main": {"domain": DOMAIN, "slices": [{"n1": 2}]}},
        ),
        pod("a", node="n1"),
    )
    (eviction,) = only(c.plan(), act.Evict)
    assert c.apply([eviction]) == 0
    status = c.held("PodGroup", "train")["status"]
    assert status["phase"] == "Evicted"
    assert "placement" not in status
    assert "topologyDomain" not in status
    assert "topologyAssignment" not in status


# --- the binder ---------------------------------------------------------------------------------


def member(name: str, index: int | None, **kw: Any) -> dict[str, Any]:
    body = pod(name, phase="Pending", **kw)
    if index is not None:
        body["metadata"]["labels"] = {COMPLETION_INDEX: str(index)}
    return body


def sliced_group(slices: list[dict[str, int]], placement: dict[str, int]) -> dict[str, Any]:
    return group(
        phase="Admitted",
        placement=placement,
        admittedAt=iso(5),
        min_member=sum(placement.values()),
        topologyDomain="b",
        topologyAssignment={"main": {"domain": "b", "slices": slices}},
    )


def bound(*objects: dict[str, Any]) -> dict[str, str | None]:
    return {a.pod.ref.name: a.node for a in plan(*objects) if isinstance(a, act.BindMember)}


def test_members_go_to_the_nodes_of_their_slice_by_completion_index() -> None:
    # Slice 0 (indexes 0, 1) on n2; slice 1 (indexes 2, 3) on n1.  Without slices the
    # binder would fill n1 first, splitting ranks 0 and 1 from each other's slice.
    binds = bound(
        job(suspend=False, parallelism=4),
        sliced_group([{"n2": 2}, {"n1": 2}], {"n1": 2, "n2": 2}),
        *(member(f"p{i}", i, gated=True) for i in (3, 0, 2, 1)),
    )
    assert binds == {"p0": "n2", "p1": "n2", "p2": "n1", "p3": "n1"}


def test_a_slice_spread_over_nodes_and_members_already_sent_hold_their_slots() -> None:
    slices = [{"n1": 1, "n2": 1}, {"n3": 2}]
    binds = bound(
        job(suspend=False, parallelism=4),
        sliced_group(slices, {"n1": 1, "n2": 1, "n3": 2}),
        member("p0", 0, selector="n2"),  # sent already: holds n2 in slice 0
        member("p1", 1, gated=True),
        member("p2", 2, gated=True),
        member("p3", 3, gated=True),
    )
    assert binds == {"p1": "n1", "p2": "n3", "p3": "n3"}


def test_a_member_without_an_index_takes_a_slot_left_and_a_duplicate_is_beyond_the_gang() -> None:
    binds = bound(
        job(suspend=False, parallelism=4),
        sliced_group([{"n1": 2}, {"n2": 2}], {"n1": 2, "n2": 2}),
        member("a0", 0, gated=True),
        member("b0", 0, gated=True),  # index 0 again
        member("c0", 0, gated=True),  # and again: slice 0 is full
        member("x", None, gated=True),
    )
    # Indexed members first: a0 and b0 fill slice 0, c0 is beyond the gang (stays gated),
    # x takes slice 1.
    assert binds == {"a0": "n1", "b0": "n1", "x": "n2"}


def test_the_journal_says_where_a_topology_gang_was_admitted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    fake = FakeGateway(QUEUE, job(), group(phase="Pending"), clock=lambda: NOW)
    state = ClusterState()
    state.replace_all(fake.all())
    journal = Journal(url)
    journal.start()  # brings the schema up
    try:
        applier = Applier(fake, state, journal, Metrics(), clock=lambda: NOW)
        decision = admit_in_racks(domains={"main": DOMAIN})
        actions = Planner(300).plan(seen(state, NOW), CycleResult((decision,), {}), now=NOW)
        assert asyncio.run(applier.apply_all(actions)) == 0
        assert journal.flush()
    finally:
        journal.close()
    (entry,) = read_history(url, namespace="ns")
    assert entry.event.value == "Admitted"
    assert entry.message == f"4 members; topology domain {DOMAIN}"
