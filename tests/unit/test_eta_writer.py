"""The controller's ETA writer: PodGroup status.eta from the forecast, only what changed."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import replace

from queue_controller.controller.eta import EtaWriter
from queue_controller.controller.state import ClusterState
from queue_controller.core import RuntimeEstimate, RuntimeSource, WorkloadPhase
from queue_controller.dump import bundled_example, read_objects, translate_all
from queue_controller.kube.fields import describe
from queue_controller.kube.snapshot import Located, Translation
from tests.fakes.gateway import FakeGateway

NOW = 1_800_000_000.0


def translation(runtime: float | None) -> tuple[Translation, list[dict[str, object]]]:
    """The bundled example cluster, every admitted gang given ``runtime`` seconds to run."""
    name, text = bundled_example()
    located = read_objects(name, text)
    first, _ = translate_all(located, now=NOW)
    # Every gang its PodGroup, as the controller makes one for each (the dump lacks most).
    groups = [
        {
            "apiVersion": "queue-controller.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": g.workload.name, "namespace": g.namespace},
            "spec": {"queue": g.workload.queue, "minMember": max(g.size, 1)},
        }
        for g in first.gangs
        if g.group is None and g.workload.phase is WorkloadPhase.PENDING
    ]
    located += [Located(describe(obj), obj) for obj in groups]
    seen, left_out = translate_all(located, now=NOW)
    assert not left_out
    estimate = RuntimeEstimate(
        runtime, RuntimeSource.ANNOTATION if runtime else RuntimeSource.UNKNOWN
    )
    workloads = tuple(
        replace(w, runtime=estimate, admitted_at=NOW - 60)
        if w.phase is WorkloadPhase.ADMITTED
        else w
        for w in seen.snapshot.workloads
    )
    seen = replace(seen, snapshot=replace(seen.snapshot, workloads=workloads))
    return seen, [dict(item.obj) for item in located]


def writer(gateway: FakeGateway, state: ClusterState, clock: list[float]) -> EtaWriter:
    return EtaWriter(
        gateway=gateway,
        state=state,
        leading=lambda: True,
        clock=lambda: clock[0],
        interval_seconds=60,
    )


def eta_of(gateway: FakeGateway, namespace: str, name: str) -> dict[str, object] | None:
    held = gateway.held("PodGroup", namespace, name)
    assert held is not None
    eta = (held.get("status") or {}).get("eta")
    return eta if isinstance(eta, dict) else None


def test_pending_gangs_get_status_eta_and_only_changes_are_written_again() -> None:
    seen, objects = translation(600)
    gateway, state, clock = FakeGateway(*objects), ClusterState(), [NOW]
    etas = writer(gateway, state, clock)
    etas.offer(seen)
    written = asyncio.run(etas.refresh())
    pending = [
        g for g in seen.gangs if g.group is not None and g.workload.phase is WorkloadPhase.PENDING
    ]
    assert written == len(pending) > 0
    starts = [eta_of(gateway, g.namespace, g.workload.name) for g in pending]
    assert any(s is not None and s["reason"] == "Estimated" and "start" in s for s in starts)
    for call in gateway.writes():
        assert call.subresource == "status"
        assert call.body is not None
        assert list(call.body) == ["status"]
        assert list(call.body["status"]) == ["eta"]  # nothing a cycle writes is touched
        assert call.resource_version is None
    # A minute later the same forecast: nothing moved by a whole interval, nothing written.
    before = len(gateway.writes())
    again, _ = translation(600)
    groups_now = [gateway.held("PodGroup", g.namespace, g.workload.name) for g in pending]
    state_seen = _with_groups(again, groups_now)
    clock[0] = NOW + 30
    etas.offer(state_seen)
    assert asyncio.run(etas.refresh()) == 0
    assert len(gateway.writes()) == before


def test_an_unknown_runtime_is_written_as_the_reason() -> None:
    seen, objects = translation(None)
    gateway, state, clock = FakeGateway(*objects), ClusterState(), [NOW]
    etas = writer(gateway, state, clock)
    etas.offer(seen)
    asyncio.run(etas.refresh())
    reasons = {
        (call.namespace, call.name): call.body["status"]["eta"]["reason"]  # type: ignore[index]
        for call in gateway.writes()
    }
    assert "NoRuntimeEstimates" in reasons.values()
    assert all(
        "start" not in (eta_of(gateway, ns, n) or {})
        for (ns, n), r in reasons.items()
        if r != "Estimated"
    )


def test_nothing_is_written_without_a_cycle_or_when_not_leading() -> None:
    seen, objects = translation(600)
    gateway, state = FakeGateway(*objects), ClusterState()
    follower = EtaWriter(gateway=gateway, state=state, leading=lambda: False, clock=lambda: NOW)
    assert asyncio.run(follower.refresh()) == 0  # nothing offered yet
    follower.offer(seen)
    assert asyncio.run(follower.refresh()) == 0
    assert gateway.writes() == []


def _with_groups(seen: Translation, groups: list[dict[str, object] | None]) -> Translation:
    """``seen`` with its PodGroups as the fake now holds them (what the next cycle reads)."""
    from queue_controller.kube.objects import pod_group

    held = {
        (g["metadata"]["namespace"], g["metadata"]["name"]): pod_group(g)  # type: ignore[index]
        for g in groups
        if g is not None
    }
    gangs = []
    for gang in seen.gangs:
        group = gang.group
        if group is not None and (gang.namespace, group.model.metadata.name) in held:
            model = held[(gang.namespace, group.model.metadata.name)]
            gang = replace(gang, group=replace(group, model=model))
        gangs.append(gang)
    return replace(seen, gangs=tuple(gangs))


def test_the_forecast_is_timed_and_its_reasons_counted_by_queue() -> None:
    from queue_controller.controller.metrics import Metrics

    seen, objects = translation(None)
    gateway, state, metrics = FakeGateway(*objects), ClusterState(), Metrics()
    etas = EtaWriter(
        gateway=gateway, state=state, leading=lambda: True, clock=lambda: NOW, metrics=metrics
    )
    etas.offer(seen)
    asyncio.run(etas.refresh())
    registry = metrics.registry
    assert registry.get_sample_value("queue_controller_eta_forecast_seconds_count") == 1
    pending = Counter(
        (f"{g.namespace}/{g.workload.queue}", "NoRuntimeEstimates")
        for g in seen.gangs
        if g.workload.phase is WorkloadPhase.PENDING
    )
    unknown = {
        key: registry.get_sample_value(
            "queue_controller_estimated_gangs", {"queue": key[0], "reason": key[1]}
        )
        for key in pending
    }
    assert any(value for value in unknown.values())
