"""A chaos run injects in a way that works for the pods at hand, confirms that the fault
took hold, and says "could not inject" (not FAILED) when it did not: without a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_controller import chaos
from queue_controller.chaos.marks import Marks
from queue_controller.chaos.observe import GangSeen, Member, Timeline
from queue_controller.chaos.placement import PLACED_SECONDS, waiting_placeholder
from queue_controller.chaos.runner import Outcome, Runner
from queue_controller.check import Invariant, Timing, Violation
from queue_controller.kube import gateway as gw

TAINT = {"key": chaos.TAINT_KEY, "value": "pp-1", "effect": "NoSchedule"}
EVERYTHING = {"operator": "Exists"}


def as_pairs(*tolerations: dict[str, str]) -> tuple[tuple[tuple[str, str], ...], ...]:
    return tuple(tuple(sorted(t.items())) for t in tolerations)


def gang(
    phase: str = "Running",
    *members: Member,
    template: list[dict[str, str]] | None = None,
    **status: Any,
) -> GangSeen:
    group = {"spec": {"queue": "q"}, "status": {"phase": phase, **status}}
    pod_spec = {"tolerations": template} if template is not None else {}
    job = {"spec": {"backoffLimit": 4, "suspend": False, "template": {"spec": pod_spec}}}
    return GangSeen("ns", "train", job, group, members)


RUNNING = (Member("train-a", "n1", "Running", True), Member("train-b", "n2", "Running", True))


# -- which method ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        (EVERYTHING, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": chaos.TAINT_KEY, "operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, False),
        ({"key": chaos.TAINT_KEY, "value": "pp-1"}, True),  # Equal is the default
        ({"key": chaos.TAINT_KEY, "operator": "Equal", "value": "other"}, False),
        ({"key": chaos.TAINT_KEY, "operator": "Lt", "value": "pp-1"}, False),
    ],
)
def test_tolerates_follows_kubernetes(toleration: dict[str, str], expected: bool) -> None:
    assert chaos.tolerates(toleration, TAINT) is expected


def test_members_that_do_not_tolerate_the_taint_are_stopped_by_it() -> None:
    method = chaos.choose_method([{"key": "nvidia.com/gpu", "operator": "Exists"}], TAINT)
    assert method.name == "taint"
    assert chaos.choose_method([], TAINT).name == "taint"


def test_members_that_tolerate_every_taint_get_a_placeholder() -> None:
    method = chaos.choose_method([{"key": "x", "operator": "Exists"}, EVERYTHING], TAINT)
    assert method.name == "placeholder"
    assert "{operator: Exists}" in method.why


def test_a_forced_method_is_kept_and_says_why_it_would_not_be_chosen() -> None:
    forced = chaos.choose_method([EVERYTHING], TAINT, forced="taint")
    assert forced.name == "taint"
    assert forced.why.startswith("asked for (--method taint), although the members tolerate")
    assert chaos.choose_method([], TAINT, forced="placeholder").name == "placeholder"


@given(
    st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "key": st.sampled_from(["", chaos.TAINT_KEY, "nvidia.com/gpu"]),
                "operator": st.sampled_from(["Exists", "Equal"]),
                "value": st.sampled_from(["", "pp-1", "x"]),
                "effect": st.sampled_from(["", "NoSchedule", "NoExecute", "PreferNoSchedule"]),
            },
        ),
        max_size=4,
    )
)
def test_the_taint_is_chosen_exactly_when_nothing_tolerates_it(
    tolerations: list[dict[str, str]],
) -> None:
    method = chaos.choose_method(tolerations, TAINT)
    assert (method.name == "taint") is not any(chaos.tolerates(t, TAINT) for t in tolerations)


def test_partial_placement_picks_the_placeholder_when_the_job_tolerates_everything() -> None:
    seen = gang("Running", *RUNNING, template=[EVERYTHING], placement={"n1": 1, "n2": 1})
    nodes = {"n1": {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}}
    pods = [pod("train-a", "n1", 8)]
    plan = chaos.partial_placement(seen, members=1, run="pp-1", nodes=nodes, pods=pods)
    assert plan.method == "placeholder"
    assert plan.kept == frozenset({"train-b"})
    assert plan.nodes == plan.avoid == ("n1",)
    assert not any(s.startswith("taint") for s in plan.steps)
    assert plan.steps[0].startswith("create placeholder Pod ns/chaos-pp-1-0 (outside any queue")
    assert plan.steps[0].endswith("(8 now)")
    # The placeholder waits first, and only then are the members deleted.
    assert plan.steps[1] == "delete Pod ns/train-a on n1: the placeholder takes its GPUs"
    assert any(f"{PLACED_SECONDS:.0f}s" in s for s in plan.steps)


def test_partial_placement_reads_the_members_own_tolerations_too() -> None:
    mine = Member("train-a", "n1", "Running", True, tolerations=as_pairs(EVERYTHING))
    seen = gang("Running", mine, RUNNING[1], placement={"n1": 1, "n2": 1})
    assert chaos.partial_placement(seen, members=1, run="pp-1").method == "placeholder"
    plain = gang("Running", *RUNNING, placement={"n1": 1, "n2": 1})
    assert chaos.partial_placement(plain, members=1, run="pp-1").method == "taint"


def test_the_waiting_placeholder_is_outside_any_queue_and_takes_nothing_by_force() -> None:
    body = waiting_placeholder("chaos-pp-1-0", "n1", 8)
    assert "labels" not in body["metadata"]  # Marks.pod adds only the run's label
    spec = body["spec"]
    assert "nodeName" not in spec  # the scheduler places it: no node over-committed
    assert "priorityClassName" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n1"]
    assert spec["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}


# -- placing it --------------------------------------------------------------------------


def pod(name: str, on: str, gpus: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"namespace": "ns", "name": name},
        "spec": {"nodeName": on, "containers": [{"resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


class PodGateway(gw.Gateway):
    """One node and its pods; what create answers is up to the test."""

    def __init__(self, refuse: gw.GatewayError | None = None, gate: bool = False) -> None:
        self.node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
        self.pods: dict[str, dict[str, Any]] = {"train-a": pod("train-a", "n1", 8)}
        self.refuse, self.gate = refuse, gate
        self.deleted: list[str] = []
        self.created_in: list[str] = []

    def get(self, kind: gw.Resource, namespace: str, name: str) -> dict[str, Any]:
        if kind is gw.NODE:
            return self.node
        if name not in self.pods:
            raise gw.NotFound(404, name)
        return self.pods[name]

    def list(self, kind: gw.Resource, **_: str) -> list[dict[str, Any]]:
        return list(self.pods.values()) if kind is gw.POD else []

    def create(self, kind: gw.Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.refuse is not None:
            raise self.refuse
        if self.gate:
            body["spec"]["schedulingGates"] = [{"name": "queue-controller.io/admission"}]
        self.pods[body["metadata"]["name"]] = body
        self.created_in.append(namespace)
        return body

    def patch(self, kind: gw.Resource, namespace: str, name: str, body: Any, **_: Any) -> Any:
        return self.node  # gpu-steal's taint, and its removal

    def delete(self, kind: gw.Resource, namespace: str, name: str) -> None:
        self.deleted.append(name)
        self.pods.pop(name, None)
        for placeholder in self.pods.values():  # the scheduler places it on the freed GPUs
            if not self.gate:
                placeholder["spec"].setdefault("nodeName", "n1")


def tolerant_plan() -> chaos.Injection:
    seen = gang("Running", *RUNNING, template=[EVERYTHING], placement={"n1": 1, "n2": 1})
    return chaos.partial_placement(seen, members=1, run="pp-1")


def test_the_placeholder_is_made_before_the_member_goes_and_waited_for() -> None:
    gateway = PodGateway()
    tolerant_plan().act(Marks(gateway, "pp-1"))
    made = gateway.pods["chaos-pp-1-0"]
    assert made["metadata"]["labels"] == {chaos.LABEL: "pp-1"}
    assert made["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert made["spec"]["nodeName"] == "n1"
    assert gateway.deleted == ["train-a"]


def test_a_refused_placeholder_is_no_injection_and_nothing_is_deleted() -> None:
    refused = gw.GatewayError(403, "POST pods: exceeded quota: gpus")
    gateway = PodGateway(refuse=refused)
    with pytest.raises(chaos.NotInjected, match="was refused: 403: POST pods: exceeded quota"):
        tolerant_plan().act(Marks(gateway, "pp-1"))
    assert gateway.deleted == []


def test_gpu_steal_refused_by_a_managed_namespace_is_no_injection_and_says_what_to_do() -> None:
    refused = gw.GatewayError(403, "ValidatingAdmissionPolicy 'qc-managed-namespaces' denied")
    plan = chaos.gpu_steal(
        gang("Running", *RUNNING, placement={"n1": 1}), PodGateway().node, [], run="gs-1"
    )
    with pytest.raises(chaos.NotInjected, match=r"refused: 403: .*--placeholder-namespace"):
        plan.act(Marks(PodGateway(refuse=refused), "gs-1"))


def test_gpu_steal_puts_its_placeholder_where_it_is_told() -> None:
    gateway = PodGateway()
    seen = gang("Running", *RUNNING, placement={"n1": 1})
    plan = chaos.gpu_steal(seen, gateway.node, [], run="gs-1", placeholder_namespace="chaos")
    assert any("placeholder Pod chaos/chaos-gs-1" in step for step in plan.steps)
    plan.act(Marks(gateway, "gs-1"))
    assert gateway.created_in == ["chaos"]
    assert gateway.pods["chaos-gs-1"]["spec"]["nodeName"] == "n1"


def test_a_placeholder_held_by_a_gate_is_no_injection() -> None:
    gateway = PodGateway(gate=True)
    with pytest.raises(chaos.NotInjected, match="held by the scheduling gates"):
        tolerant_plan().act(Marks(gateway, "pp-1"))
    assert gateway.deleted == []
    assert "chaos-pp-1-0" in gateway.pods  # labelled: undo deletes it


# -- did it take hold ----------------------------------------------------------------------


KEPT = frozenset({"train-b"})


class Looks:
    """One run's confirmation, fed one look at the gang at a time."""

    def __init__(self) -> None:
        self.confirmation = chaos.Confirmation(KEPT)

    def __call__(
        self, *members: Member, seconds: float, evicted: bool = False, phase: str = "Running"
    ) -> tuple[str, str]:
        seen = gang(phase, *members)
        return self.confirmation.observe(seen, seconds=seconds, evicted=evicted)


@pytest.fixture
def look() -> Looks:
    return Looks()


def test_a_replacement_that_starts_on_its_node_means_the_fault_did_not_hold(look: Looks) -> None:
    started = Member("train-c", "n1", "Running", True)
    assert look(started, RUNNING[1], seconds=2) == (
        "failed",
        "Pod ns/train-c started on n1 all the same",
    )


def test_the_scheduler_finding_no_node_confirms_it(look: Looks) -> None:
    message = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu"
    waiting = Member("train-c", "", "Pending", True, unschedulable=message)
    assert look(waiting, RUNNING[1], seconds=1) == (
        "confirmed",
        f"Pod ns/train-c cannot start: {message}",
    )


def test_a_released_member_confirms_it_once_it_has_waited_the_stated_time(look: Looks) -> None:
    released = Member("train-c", "", "Pending", True)
    assert look(released, RUNNING[1], seconds=3) == ("pending", "")
    assert look(released, RUNNING[1], seconds=12.9) == ("pending", "")
    assert look(released, RUNNING[1], seconds=13) == (
        "confirmed",
        "Pod ns/train-c released and still not started after 10s, while 1 others run",
    )


def test_nothing_is_confirmed_while_the_replacement_is_not_made_or_still_gated(look: Looks) -> None:
    # A Job makes its replacement after a backoff, and the admission gate holds it until
    # the controller releases it: neither says the fault holds.
    assert look(RUNNING[1], seconds=30) == ("pending", "")
    gated = Member("train-c", "", "Pending", True, gated=True)
    assert look(gated, RUNNING[1], seconds=60) == ("pending", "")
    released = Member("train-c", "", "Pending", True)
    assert look(released, RUNNING[1], seconds=61) == ("pending", "")
    assert look(Member("train-c", "n1", "Running", True), RUNNING[1], seconds=62)[0] == "failed"


def test_an_eviction_before_any_stopped_member_started_confirms_it(look: Looks) -> None:
    assert look(seconds=1, evicted=True, phase="Evicted")[0] == "confirmed"
    # Readmitted members bound after the eviction are the recovery, not a failed injection.
    back = Member("train-c", "n3", "Running", True)
    assert look(back, seconds=9, evicted=True, phase="Admitted") == (
        "confirmed",
        "evicted with none of the stopped members started",
    )


# -- the verdict ---------------------------------------------------------------------------


def outcome(**fields: Any) -> Outcome:
    plan = tolerant_plan()
    return Outcome("pp-1", plan, Timeline(0.0, 0), 60.0, **fields)


def test_could_not_inject_is_its_own_verdict() -> None:
    assert outcome().verdict == "passed"
    missed = outcome(not_injected="Pod ns/train-c started on n1 all the same")
    assert missed.verdict == "could not inject"
    assert not missed.passed
    report = missed.as_dict()
    assert report["verdict"] == "could not inject"
    assert report["notInjected"] == "Pod ns/train-c started on n1 all the same"
    assert report["method"] == "placeholder"
    broken = Violation(Invariant.PARTIALLY_PLACED_TOO_LONG, ("Job ns/train",), "")
    assert outcome(violations=[broken]).verdict == "failed"
    assert outcome(interrupted="SIGINT", not_injected="x").verdict == "interrupted"


def runner() -> Runner:
    said: list[str] = []
    return Runner(PodGateway(), "pp-1", Timing(cycle_seconds=5), 1.0, said.append)


def test_a_fault_never_confirmed_is_not_judged_as_a_controller_that_did_not_recover() -> None:
    done = outcome()
    runner()._judge(done)
    assert done.verdict == "could not inject"
    assert done.not_injected == "the fault was never confirmed to hold"
    assert done.problems == []  # no "not recovered within 60s"


def test_a_confirmed_fault_the_controller_never_recovers_from_fails() -> None:
    done = outcome(confirmed="Pod ns/train-c cannot start: no node")
    done.timeline.mark("injected", 0.0, "")
    runner()._judge(done)
    assert done.verdict == "failed"
    assert done.problems == [
        "not recovered within 60s: never evicted, quota back, requeued, readmitted"
    ]


def test_a_refused_injection_ends_the_run_with_its_reason_and_undoes() -> None:
    said: list[str] = []
    gateway = PodGateway(refuse=gw.GatewayError(403, "exceeded quota"))
    run = Runner(gateway, "pp-1", Timing(cycle_seconds=5), 1.0, said.append)
    seen = gang("Running", *RUNNING, template=[EVERYTHING], placement={"n1": 1, "n2": 1})
    done = run.execute(tolerant_plan(), seen, chaos.Scope(frozenset()), 60.0)
    assert done.verdict == "could not inject"
    assert "was refused: 403: exceeded quota" in done.not_injected
    assert [m.phase for m in done.timeline.marks] == []  # nothing was injected
    assert any(line.startswith("could not inject: ") for line in said)


def test_the_placeholder_can_go_in_another_namespace() -> None:
    seen = gang("Running", *RUNNING, template=[EVERYTHING], placement={"n1": 1, "n2": 1})
    plan = chaos.partial_placement(seen, members=1, run="pp-1", placeholder_namespace="chaos")
    assert plan.steps[0].startswith("create placeholder Pod chaos/chaos-pp-1-0 ")
    gateway = PodGateway()
    created: list[str] = []
    make = gateway.create

    def create(kind: gw.Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        created.append(namespace)
        return make(kind, namespace, body)

    gateway.create = create  # type: ignore[method-assign]
    plan.act(Marks(gateway, "pp-1"))
    assert created == ["chaos"]
    assert gateway.deleted == ["train-a"]  # the member, in its own namespace
