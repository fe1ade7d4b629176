"""The controller's state never goes backwards, and settings errors name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_controller.controller import settings
from queue_controller.controller.state import ClusterState, slim_pod
from queue_controller.errors import InputError


def obj(version: str, *, kind: str = "Job", name: str = "a", **extra: object) -> dict[str, object]:
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
        **extra,
    }


def test_an_older_version_never_replaces_a_newer_one() -> None:
    state = ClusterState()
    assert state.upsert(obj("10", spec={"suspend": False}))
    assert not state.upsert(obj("9", spec={"suspend": True}))  # a late watch event
    assert state.get("Job", "ns", "a") == obj("10", spec={"suspend": False})
    assert state.upsert(obj("11", spec={"suspend": True}))


def test_a_deleted_object_stays_deleted_until_a_newer_version_appears() -> None:
    state = ClusterState()
    state.upsert(obj("10"))
    state.delete(obj("12"))
    assert state.get("Job", "ns", "a") is None
    assert not state.upsert(obj("11"))  # an event from before the deletion
    assert state.upsert(obj("13"))  # re-created


def test_every_accepted_change_wakes_the_loop() -> None:
    state = ClusterState()
    state.changed.clear()
    state.upsert(obj("1"))
    assert state.changed.is_set()
    state.changed.clear()
    state.upsert(obj("1"))  # the same version again is harmless, and accepted
    generation = state.generation
    state.upsert(obj("0"))
    assert state.generation == generation


AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}
            ]
        }
    }
}


def test_pods_are_kept_slim() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "nodeName": "n1",
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "env": [{"name": "A"}],
                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                }
            ],
            "volumes": [{"name": "v"}],
            "affinity": AFFINITY,
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "c"}],
        },
    }
    slim = slim_pod(pod)
    assert slim["spec"] == {
        "nodeName": "n1",
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        "initContainers": [],
        # A plain pod group's members are placed by their own constraints.
        "affinity": AFFINITY,
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
    }
    assert slim["status"] == {"phase": "Running"}  # no conditions: no reader looks at them


def test_a_frozen_copy_does_not_see_later_changes() -> None:
    state = ClusterState()
    state.upsert(obj("1"))
    frozen = state.copy()
    state.upsert(obj("2", name="b"))
    assert len(frozen) == 1
    assert len(state) == 2


def test_settings_come_from_flags_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QC_TICK_SECONDS", "2.5")
    monkeypatch.setenv("QC_METRICS_PORT", "9000")
    loaded = settings.load(metrics_port=9100, tick_seconds=None)
    assert loaded.tick_seconds == 2.5
    assert loaded.metrics_port == 9100


@pytest.mark.parametrize(
    ("flags", "field", "words"),
    [
        ({"tick_seconds": -1}, "tick_seconds (QC_TICK_SECONDS)", "greater than 0"),
        ({"metrics_port": 70000}, "metrics_port (QC_METRICS_PORT)", "less than or equal"),
        ({"webhook": "maybe"}, "webhook (QC_WEBHOOK)", "'local'"),
        (
            {"lease_duration_seconds": 5, "renew_deadline_seconds": 10},
            "settings",
            "lease_duration_seconds",
        ),
        ({"webhook": "service"}, "settings", "webhook_cert_dir"),
    ],
)
def test_bad_settings_name_the_setting(flags: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(InputError) as caught:
        settings.load(**flags)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_missing_kubeconfig_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        settings.load(kubeconfig=tmp_path / "nope")


def test_an_unknown_qc_variable_is_a_typo_that_stops_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QC_TICK_SECOND", "2")
    with pytest.raises(InputError) as caught:
        settings.load()
    assert caught.value.field == "QC_TICK_SECOND"
    assert "QC_TICK_SECONDS" in str(caught.value)


def test_reading_a_kind_is_not_broken_by_an_object_taken_meanwhile() -> None:
    """kopf runs the watch handlers on its own threads: an object may be taken while the
    loop (the DCGM source, say) reads the nodes.  Iterating the live dict then raised
    'dictionary changed size during iteration' and ended the controller."""
    state = ClusterState()
    state.upsert({"kind": "Node", "metadata": {"name": "n1", "resourceVersion": "1"}})
    reading = state.of_kind("Node")
    state.upsert({"kind": "Node", "metadata": {"name": "n2", "resourceVersion": "2"}})
    assert [n["metadata"]["name"] for n in reading] == ["n1"]


def test_gated_pods_taken_are_handed_to_the_releaser_once() -> None:
    state = ClusterState()
    gated = {"schedulingGates": [{"name": "queue-controller.io/admission"}]}
    state.upsert({"kind": "Pod", "metadata": {"name": "a", "namespace": "ns"}, "spec": gated})
    state.upsert({"kind": "Pod", "metadata": {"name": "b", "namespace": "ns"}, "spec": {}})
    assert state.gated_arrived.is_set()
    assert state.take_gated_arrivals() == {("Pod", "ns", "a")}
    assert not state.gated_arrived.is_set()
    assert state.take_gated_arrivals() == set()
