"""The health tracker's rules and the Node wire format, without a cluster."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_controller.core.model.objects import UnhealthyGpu
from queue_controller.errors import InputError
from queue_controller.gpuhealth.tracker import LOST, THERMAL, XID, HealthTracker
from queue_controller.kube import nodehealth

T0 = 1_800_000_000.0


def test_a_fault_holds_until_the_clear_period_passes_without_a_sighting() -> None:
    tracker = HealthTracker(clear_seconds=600)
    tracker.fault(index=3, now=T0, reason=XID, xid=79, uuid="GPU-3")
    assert [g.index for g in tracker.unhealthy(T0 + 599)] == [3]
    assert tracker.unhealthy(T0 + 600) == ()


def test_a_persisting_condition_keeps_refreshing_and_keeps_its_start() -> None:
    tracker = HealthTracker(clear_seconds=60)
    for poll in range(20):  # every 30 s, for 10 minutes: longer than the clear period
        tracker.fault(index=0, now=T0 + 30 * poll, reason=THERMAL)
    (gpu,) = tracker.unhealthy(T0 + 19 * 30 + 59)
    assert gpu.since == T0
    assert gpu.last_seen == T0 + 19 * 30


def test_xids_accumulate_and_a_lost_gpu_stays_lost() -> None:
    tracker = HealthTracker(clear_seconds=600)
    tracker.fault(index=1, now=T0, reason=LOST)
    tracker.fault(index=1, now=T0 + 1, reason=XID, xid=79)
    tracker.fault(index=1, now=T0 + 2, reason=XID, xid=48)
    (gpu,) = tracker.unhealthy(T0 + 2)
    assert (gpu.reason, gpu.xids) == (LOST, (79, 48))


def test_a_fault_after_the_clear_period_is_a_new_one() -> None:
    tracker = HealthTracker(clear_seconds=10)
    tracker.fault(index=1, now=T0, reason=LOST)
    tracker.fault(index=1, now=T0 + 100, reason=XID, xid=31)  # no unhealthy() between
    (gpu,) = tracker.unhealthy(T0 + 100)
    assert (gpu.reason, gpu.xids, gpu.since) == (XID, (31,), T0 + 100)


def test_reset_forgets_everything_and_known_faults_survive_a_restart() -> None:
    known = [UnhealthyGpu(index=2, xids=(79,), since=T0, last_seen=T0)]
    tracker = HealthTracker(clear_seconds=600, known=known)
    assert [g.index for g in tracker.unhealthy(T0 + 1)] == [2]
    assert tracker.reset() == 1
    assert tracker.unhealthy(T0 + 1) == ()


def node(**annotations: str) -> dict[str, object]:
    return {"metadata": {"name": "gpu-1", "annotations": annotations}, "status": {}}


def test_a_report_reads_back_as_what_admission_uses() -> None:
    gpus = [
        UnhealthyGpu(
            index=3,
            uuid="GPU-3",
            xids=(79,),
            since=T0,
            last_seen=T0 + 5,
            mig_devices={"1g.10gb": 7},
            pods=("ns/p",),
        )
    ]
    meta, status = nodehealth.report_patches(
        node(), source="node-agent", unhealthy=gpus, gpus=8, now=T0
    )
    written = node(**meta["metadata"]["annotations"])
    written["status"] = status["status"]
    health = nodehealth.gpu_health(written)
    assert health is not None
    assert health.gpu_count == 8
    assert health.unhealthy == tuple(gpus)
    (condition,) = status["status"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "GPUHealthy",
        "False",
        "XidCriticalError",
    )
    assert condition["message"] == "GPU 3 (GPU-3): XID 79; 7 of 8 GPUs healthy"


def test_the_transition_time_moves_only_when_the_status_changes() -> None:
    _, first = nodehealth.report_patches(node(), source="dcgm", unhealthy=(), gpus=4, now=T0)
    current = {**node(), "status": first["status"]}
    _, later = nodehealth.report_patches(current, source="dcgm", unhealthy=(), gpus=4, now=T0 + 60)
    assert later["status"]["conditions"][0]["lastTransitionTime"] == "2027-01-15T08:00:00Z"
    assert later["status"]["conditions"][0]["lastHeartbeatTime"] == "2027-01-15T08:01:00Z"


def test_nothing_changed_means_no_write_even_as_time_passes() -> None:
    meta, status = nodehealth.report_patches(node(), source="dcgm", unhealthy=(), gpus=4, now=T0)
    current = {**node(**meta["metadata"]["annotations"]), "status": status["status"]}
    meta2, status2 = nodehealth.report_patches(
        current, source="dcgm", unhealthy=(), gpus=4, now=T0 + 60
    )
    assert not nodehealth.changed(current, meta2, status2)
    gpu = UnhealthyGpu(index=0, since=T0, last_seen=T0)
    meta3, status3 = nodehealth.report_patches(
        current, source="dcgm", unhealthy=[gpu], gpus=4, now=T0 + 60
    )
    assert nodehealth.changed(current, meta3, status3)


def test_our_taint_is_added_once_and_removed_leaving_others_alone() -> None:
    other = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    current = {"metadata": {"name": "n"}, "spec": {"taints": [other]}}
    tainted = nodehealth.taints_with(current, tainted=True)
    assert tainted == [
        other,
        {"key": nodehealth.TAINT_KEY, "value": "true", "effect": "NoSchedule"},
    ]
    assert nodehealth.taints_with({**current, "spec": {"taints": tainted}}, tainted=True) is None
    assert nodehealth.taints_with({**current, "spec": {"taints": tainted}}, tainted=False) == [
        other
    ]


def test_a_reset_is_new_only_until_a_report_records_it() -> None:
    annotation = nodehealth.HealthAnnotation(source="x", updated="2026-01-01T00:00:00Z")
    asked = node(**{nodehealth.RESET_ANNOTATION: "r1"})
    assert nodehealth.reset_requested(asked, annotation) == "r1"
    seen = annotation.model_copy(update={"resetSeen": "r1"})
    assert nodehealth.reset_requested(asked, seen) is None


def test_an_unknown_key_in_the_annotation_is_named() -> None:
    text = json.dumps({"source": "x", "updated": "2026-01-01T00:00:00Z", "gpu": 8})
    with pytest.raises(InputError, match=r"gpu-health\]: gpu: Extra inputs are not permitted"):
        nodehealth.gpu_health(node(**{nodehealth.ANNOTATION: text}))


@given(
    st.lists(
        st.tuples(st.integers(0, 7), st.integers(0, 1000), st.sampled_from([XID, LOST, THERMAL])),
        max_size=30,
    ),
    st.integers(0, 2000),
)
def test_every_gpu_reported_was_seen_within_the_clear_period(
    sightings: list[tuple[int, int, str]], at: int
) -> None:
    tracker = HealthTracker(clear_seconds=100)
    for index, seconds, reason in sorted(sightings, key=lambda s: s[1]):
        tracker.fault(index=index, now=T0 + seconds, reason=reason)
    reported = tracker.unhealthy(T0 + at)
    assert [g.index for g in reported] == sorted({g.index for g in reported})
    for gpu in reported:
        assert at - 100 < gpu.last_seen - T0 <= max(at, gpu.last_seen - T0)
        assert gpu.since <= gpu.last_seen
