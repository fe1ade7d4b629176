"""One cycle of the scheduling loop, from the objects its watches hold to its writes, reads
each raw object once: the translation in kube/ reads it, and every later step (the core,
the planner, the metrics, the applier) reads the typed views it made."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar
from unittest import mock

from queue_controller.controller import writer
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState, key_of, slim_pod
from queue_controller.kube import objects, pieces, views
from queue_controller.kube.kinds.batchjob import BatchJob
from queue_controller.kube.kinds.plainpods import PlainPods
from tests.fakes.gateway import FakeGateway
from tests.loops import scheduling_loop
from tests.unit.test_kind_plainpods import group as pod_group
from tests.unit.test_kind_plainpods import pod
from tests.unit.test_lifecycle import NOW, QUEUE, job

NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "resourceVersion": "3", "labels": {}},
    "status": {
        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}
TEAM = {
    "apiVersion": "queue-controller.io/v1alpha1",
    "kind": "TeamQuota",
    "metadata": {"name": "team", "resourceVersion": "2"},
    "spec": {"resources": {"nvidia.com/gpu": {"nominal": 16}}},
}
# Reading a raw object is the translation's job: these modules, and nothing after them.
TRANSLATION = ("queue_controller.kube.",)
KEYING = {"kind", "metadata", "name", "namespace", "resourceVersion"}


class Tracked(dict[str, Any]):
    """A raw object that notes which module reads which key (nested maps too)."""

    readers: ClassVar[Counter[tuple[str, str]]] = Counter()

    def _note(self, key: str) -> None:
        frame = sys._getframe(2)
        Tracked.readers[(frame.f_globals.get("__name__", "?"), key)] += 1

    def __getitem__(self, key: str) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self._note(key)
        return super().get(key, default)


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    return slim_pod(obj) if obj["kind"] == "Pod" else obj


def tracked(value: Any) -> Any:
    if isinstance(value, dict):
        return Tracked({k: tracked(v) for k, v in value.items()})
    if isinstance(value, list):
        return [tracked(v) for v in value]
    return value


def raw_objects() -> list[dict[str, Any]]:
    # A Job gang to admit, a pod group to admit, and one admitted pod group to bind.
    admitted = pod_group("Admitted", name="pods-bound", placement={"n1": 1}, admittedAt=None)
    admitted["status"].pop("admittedAt")
    return [
        QUEUE,
        TEAM,
        NODE,
        job("train", parallelism=2),
        pod("ring-0"),
        pod("ring-1"),
        pod("bound-0", group="bound", total=1),
        admitted,
    ]


def run_one_cycle(
    state: ClusterState,
    gateway: FakeGateway,
    *,
    cycles: int = 1,
    creation_backlog: int | None = None,
) -> Metrics:
    metrics = Metrics()
    loop = scheduling_loop(
        state, now=NOW, gateway=gateway, metrics=metrics, creation_backlog=creation_backlog
    )
    for _ in range(cycles):
        asyncio.run(loop.cycle())
    return metrics


@mock.patch.object(Tracked, "readers", Counter())
def test_only_the_translation_reads_the_raw_objects() -> None:
    # Held as the watches left them (upsert copies the top level, which would hide
    # reads of it from the tracking), then every read from here on is the cycle's.
    state = ClusterState(_objects={key_of(o): tracked(slim(o)) for o in raw_objects()})
    gateway = FakeGateway(*raw_objects())
    run_one_cycle(state, gateway)
    assert any(c.method == "patch" for c in gateway.calls), "the cycle wrote nothing"
    reads = {(m, k) for m, k in Tracked.readers if m.startswith("queue_controller")}
    assert any(m.startswith(TRANSLATION) for m, _ in reads), "the tracking is broken"
    strays = {
        (module, key)
        for module, key in reads
        if not module.startswith(TRANSLATION)
        # The state keys what it holds (assuming a write compares versions): no more.
        and not (module == "queue_controller.controller.state" and key in KEYING)
    }
    assert not strays, f"raw objects read after the translation: {sorted(strays)}"


def counted(target: Any, name: str, calls: Counter[str], key: str) -> Any:
    original = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[key] += 1
        return original(*args, **kwargs)

    return mock.patch.object(target, name, wrapper)


def patches(calls: Counter[str]) -> Iterator[Any]:
    yield counted(views, "member_pod", calls, "pod")
    yield counted(pieces, "member_pod", calls, "pod")
    yield counted(objects, "pod_group", calls, "podgroup")
    yield counted(writer, "pod_group", calls, "podgroup")
    yield counted(objects, "node", calls, "node")
    yield counted(objects, "queue", calls, "queue")
    yield counted(objects, "team_quota", calls, "teamquota")
    yield counted(BatchJob, "read", calls, "job")
    yield counted(PlainPods, "read", calls, "podgang")


def test_each_object_is_translated_once_per_cycle() -> None:
    state = ClusterState()
    for obj in raw_objects():
        state.upsert(obj)
    calls: Counter[str] = Counter()
    managers = list(patches(calls))
    for manager in managers:
        manager.start()
    gateway = FakeGateway(*raw_objects())
    try:
        run_one_cycle(state, gateway)
    finally:
        for manager in managers:
            manager.stop()
    # Besides the one PodGroup the cycle started with, the applier reads each PodGroup
    # its own writes return (two created, then admitted, in this cycle), once each.
    written = [
        c
        for c in gateway.calls
        if c.resource.kind == "PodGroup" and c.method in ("create", "patch") and not c.failed
    ]
    assert len(written) >= 4
    assert calls == Counter(
        pod=3, podgroup=1 + len(written), node=1, queue=1, teamquota=1, job=1, podgang=2
    )


def test_a_cycle_times_each_of_its_phases() -> None:
    state = ClusterState()
    for obj in raw_objects():
        state.upsert(obj)
    metrics = run_one_cycle(state, FakeGateway(*raw_objects()), cycles=2)
    registry = metrics.registry
    for phase in ("translate", "core", "plan", "apply"):
        labels = {"phase": phase}
        count = registry.get_sample_value(
            "queue_controller_scheduling_cycle_phase_seconds_count", labels
        )
        total = registry.get_sample_value(
            "queue_controller_scheduling_cycle_phase_seconds_sum", labels
        )
        assert count == 2, phase
        assert total is not None, phase
        assert total > 0, phase
    # The bench harness reads the same figures from the exposition text.
    from tests.bench.e2e.systems import cycle_phases

    parsed = cycle_phases(metrics.exposition().decode())
    assert parsed["cycles"] == 2
    assert set(parsed["phase_seconds"]) == {"translate", "core", "plan", "apply"}
