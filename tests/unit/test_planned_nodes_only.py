"""A gang's members are only ever released onto planned nodes (issue 22).

With a min-member below its parallelism, a Job's members past the plan were released
with no node pinned, so kube-scheduler could put them on GPUs the core had planned for
another gang.  They now stay gated until a slot of the plan is free.  Driven through the
cycle's planner, the releaser and the applier against the fake gateway.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from queue_controller.controller import actions as act
from queue_controller.controller.binding import bindings
from queue_controller.kube.resources import ADMISSION_GATE, HOSTNAME_LABEL
from tests.unit.test_apply import Cluster, cluster
from tests.unit.test_lifecycle import group, iso, job, pod
from tests.unit.test_release import releaser
from tests.views import seen

MIN_MEMBER = {"queue-controller.io/min-member": "2"}


def gated(c: Cluster, name: str) -> bool:
    spec: dict[str, Any] = c.held("Pod", name)["spec"]
    return any(g["name"] == ADMISSION_GATE for g in spec.get("schedulingGates") or [])


def pinned(c: Cluster, name: str) -> str | None:
    selector: dict[str, str] = c.held("Pod", name)["spec"].get("nodeSelector") or {}
    return selector.get(HOSTNAME_LABEL)


def four_pods_two_planned(*phases: str) -> Cluster:
    """A Job of 4 pods with min-member 2, admitted with 2 slots on n1; 4 gated members."""
    return cluster(
        job("bind", suspend=False, parallelism=4, annotations=MIN_MEMBER),
        group("bind", phase="Admitted", placement={"n1": 2}, admittedAt=iso(5)),
        *(
            pod(f"bind-{i}", gated=True, phase=phase, owner="bind")
            for i, phase in enumerate(phases or ("Pending",) * 4)
        ),
    )


def test_a_cycle_releases_no_member_past_the_plan() -> None:
    c = four_pods_two_planned()
    assert c.cycle() == 0
    sent = {name: pinned(c, name) for name in ("bind-0", "bind-1") if not gated(c, name)}
    assert sent == {"bind-0": "n1", "bind-1": "n1"}
    # The other two would have gone anywhere, GPUs planned for other gangs included.
    assert gated(c, "bind-2")
    assert gated(c, "bind-3")
    assert pinned(c, "bind-2") is None
    assert pinned(c, "bind-3") is None


def test_the_releaser_releases_no_member_past_the_plan() -> None:
    c = four_pods_two_planned()
    assert asyncio.run(releaser(c).release()) == 2
    assert [gated(c, f"bind-{i}") for i in range(4)] == [False, False, True, True]


def test_a_member_past_the_plan_takes_the_slot_a_finished_member_left() -> None:
    c = four_pods_two_planned()
    c.cycle()
    for name in ("bind-0", "bind-1", "bind-2", "bind-3"):
        c.watch("Pod", name)
    # bind-0 is done: its slot on n1 is free, and one member past the plan takes it.
    done = c.held("Pod", "bind-0")
    done["status"] = {"phase": "Succeeded"}
    c.state.upsert(c.fake.update(done))
    c.cycle()
    assert not gated(c, "bind-2")
    assert pinned(c, "bind-2") == "n1"
    assert gated(c, "bind-3")


@given(
    plan=st.dictionaries(st.sampled_from(["n1", "n2", "n3"]), st.integers(1, 3), min_size=1),
    members=st.integers(0, 10),
    sent=st.lists(st.sampled_from(["n1", "n2", "n3", "elsewhere"]), max_size=4),
)
def test_every_release_is_onto_a_node_of_the_plan_with_a_slot(
    plan: dict[str, int], members: int, sent: list[str]
) -> None:
    """Whatever the plan and whoever was sent already, no member goes off the plan or
    past a node's slots."""
    objects: list[dict[str, Any]] = [
        job("bind", suspend=False, parallelism=members + len(sent)),
        group("bind", phase="Admitted", placement=plan, admittedAt=iso(5), min_member=1),
        *(
            pod(f"s{i}", selector=node, phase="Running", owner="bind")
            for i, node in enumerate(sent)
        ),
        *(pod(f"g{i}", gated=True, phase="Pending", owner="bind") for i in range(members)),
    ]
    c = cluster(*objects)
    (gang,) = seen(c.state, 0.0).gangs
    chosen = list(bindings(gang, plan, {}))
    assert all(isinstance(b, act.BindMember) and b.node in plan for b in chosen)
    for node, slots in plan.items():
        taken = sum(1 for n in sent if n == node) + sum(1 for b in chosen if b.node == node)
        assert taken <= max(slots, sum(1 for n in sent if n == node))
