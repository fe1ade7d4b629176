"""Which watch events wake a cycle, and what the state holds of each object (issue 26,
items 3 and 4).

A change that cannot move a decision (a Job's pod counts, a pod's container statuses,
the watch's echo of our own write) is held at its new version but starts no cycle; a
change that can (a Job's Complete condition, a pod's phase) starts one at once.  The
state holds no ``managedFields`` (but a PodGroup's owners of ``status.phase``) and no
``kubectl apply`` copy.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from queue_controller.controller.state import ClusterState
from queue_controller.kube import kinds
from queue_controller.kube.relevance import moves_a_decision
from queue_controller.kube.snapshot import phase_writer
from tests.unit.test_kind_kubeflow import pytorchjob
from tests.unit.test_kind_ray import raycluster, rayjob
from tests.unit.test_lifecycle import group, job, pod

Obj = dict[str, Any]


def newer(obj: Obj, version: int, **status: Any) -> Obj:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(version)
    out.setdefault("status", {}).update(status)
    return out


def holding(obj: Obj) -> ClusterState:
    state = ClusterState()
    assert state.upsert(obj)
    state.changed.clear()
    return state


def woke(state: ClusterState, obj: Obj) -> bool:
    before = state.generation
    assert state.upsert(obj), "a newer version is always held"
    assert state.generation > before or not state.changed.is_set()
    return state.changed.is_set()


def test_a_jobs_pod_counts_are_held_but_wake_no_cycle() -> None:
    state = holding(job("train", suspend=False))
    counted = newer(job("train", suspend=False), 20, active=3, ready=2, startTime="x")
    assert not woke(state, counted)
    held = state.get("Job", "ns", "train")
    assert held is not None
    assert held["metadata"]["resourceVersion"] == "20"
    assert held["status"]["active"] == 3, "held at its new version all the same"


def test_a_jobs_finishing_condition_wakes_a_cycle() -> None:
    state = holding(job("train", suspend=False))
    done = newer(
        job("train", suspend=False), 20, conditions=[{"type": "Complete", "status": "True"}]
    )
    assert woke(state, done)


def test_a_change_to_the_spec_or_labels_wakes_a_cycle() -> None:
    state = holding(job("train", suspend=True))
    assert woke(state, newer(job("train", suspend=False), 20))
    relabelled = newer(job("train", suspend=False), 21)
    relabelled["metadata"]["labels"]["team"] = "b"
    assert woke(state, relabelled)


def test_the_echo_of_a_held_version_is_not_a_change() -> None:
    state = holding(job("train"))
    before = state.generation
    assert not state.upsert(job("train"))  # the same resourceVersion: our write's echo
    assert state.generation == before
    assert not state.changed.is_set()


def test_a_pods_container_statuses_and_conditions_wake_nothing_but_its_phase_does() -> None:
    running = pod("p-0", phase="Running", node="n1")
    running["metadata"]["resourceVersion"] = "5"
    state = holding(running)
    restarted = newer(running, 6, containerStatuses=[{"name": "main", "restartCount": 1}])
    assert not woke(state, restarted)
    ready = [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T00:00:05Z"}]
    assert not woke(state, newer(running, 7, conditions=ready))
    assert "conditions" not in (state.get("Pod", "ns", "p-0") or {})["status"]
    assert woke(state, newer(running, 8, phase="Succeeded"))


def test_a_rayjobs_deployment_status_wakes_a_cycle_and_its_other_status_does_not() -> None:
    state = holding(rayjob(suspend=False))
    assert not woke(state, newer(rayjob(suspend=False), 20, rayClusterName="tune-x1"))
    assert woke(state, newer(rayjob(suspend=False), 21, jobDeploymentStatus="Complete"))


def test_no_managed_fields_or_last_applied_copy_is_held() -> None:
    raw = job("train")
    raw["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    raw["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": "{...the whole Job...}",
        "queue-controller.io/topology": "rack",
    }
    p = pod("p-0")
    p["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    state = ClusterState()
    state.upsert(raw)
    state.upsert(p)
    held_job, held_pod = state.get("Job", "ns", "train"), state.get("Pod", "ns", "p-0")
    assert held_job is not None
    assert held_pod is not None
    assert "managedFields" not in held_job["metadata"]
    assert "managedFields" not in held_pod["metadata"]
    assert held_job["metadata"]["annotations"] == {"queue-controller.io/topology": "rack"}
    assert raw["metadata"]["managedFields"], "the event's object is left as it came"


@given(
    owners=st.lists(
        st.tuples(
            st.sampled_from(["queue-controller", "kubectl", "someone"]),
            st.booleans(),  # owns status.phase
            st.booleans(),  # owns other fields too
        ),
        max_size=4,
    )
)
def test_a_pod_groups_phase_writer_reads_the_same_from_what_is_held(
    owners: list[tuple[str, bool, bool]],
) -> None:
    raw = group("train", phase="Admitted")
    entries = []
    for manager, phase, other in owners:
        status: Obj = {"f:phase": {}} if phase else {}
        if other:
            status["f:conditions"] = {}
        entries.append({"manager": manager, "fieldsV1": {"f:status": status, "f:spec": {}}})
    raw["metadata"]["managedFields"] = entries
    state = ClusterState()
    state.upsert(raw)
    held = state.get("PodGroup", "ns", "train")
    assert held is not None
    assert phase_writer(held) == phase_writer(raw)
    assert len(held["metadata"]["managedFields"]) == sum(1 for _, p, _ in owners if p)


# Status fields a head kind may carry that its read() must not depend on: if one did,
# leaving it out of ``status_read`` would let its change go unnoticed until the tick.
_NOISE = st.dictionaries(
    st.sampled_from(
        [
            "active",
            "ready",
            "succeeded",
            "failed",
            "terminating",
            "startTime",
            "observedGeneration",
            "rayClusterName",
            "dashboardURL",
            "replicaStatuses",
            "state",
            "endpoints",
            "head",
        ]
    ),
    st.one_of(
        st.integers(0, 9),
        st.text(max_size=5),
        st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2),
    ),
    max_size=6,
)
HEADS = {
    "Job": job("train", suspend=False),
    "PyTorchJob": pytorchjob(suspend=False),
    "RayJob": rayjob(suspend=False),
    "RayCluster": raycluster(suspend=False),
}


@given(kind_name=st.sampled_from(sorted(HEADS)), noise=_NOISE)
def test_a_status_change_that_wakes_nothing_reads_the_same(kind_name: str, noise: Obj) -> None:
    """The invariant behind the rule: where relevance says a change moves nothing, the
    kind reads the object exactly as before."""
    before = HEADS[kind_name]
    after = newer(before, 99, **noise)
    kind = kinds.BY_HEAD[kind_name]
    assert not moves_a_decision(before, after)
    name = before["metadata"]["name"]

    def read(head: Obj) -> Any:
        gang = kind.read(namespace="ns", name=name, head=head, members=())
        return gang.facts, gang.labels, gang.created

    assert read(before) == read(after)


def test_every_head_kind_says_which_status_fields_it_reads() -> None:
    for kind in kinds.KINDS:
        assert isinstance(kind.status_read, frozenset)
        if kind.head is None:
            assert kind.status_read == frozenset()


def test_a_pod_groups_eta_wakes_no_cycle_but_its_reason_does() -> None:
    state = holding(group("train", phase="Pending"))
    estimated = newer(group("train", phase="Pending"), 30, eta={"start": "2026-12-04T11:00:00Z"})
    assert not woke(state, estimated)
    reserved = newer(estimated, 31, reservedStart="2026-12-04T11:00:00Z")
    assert woke(state, reserved)
