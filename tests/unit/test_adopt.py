"""Jobs that got past the webhook in a managed namespace are queued after the fact, as
Kueue's reconciler suspends them (controller/adopt.py), against the fake gateway."""

from __future__ import annotations

import asyncio
from typing import Any

from queue_controller.controller.adopt import Adopter
from queue_controller.controller.leader import Leadership
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.settings import Settings
from queue_controller.kube.resources import JOB
from tests.fakes.gateway import FakeGateway

Obj = dict[str, Any]
LABEL = "queue-controller.io/queue"
MANAGED = {"team-a"}


def job(name: str, *, namespace: str = "team-a", gpus: int = 1, **extra: Any) -> Obj:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, **extra.pop("meta", {})},
        "spec": {
            "suspend": False,
            "template": {"spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}},
        },
        **extra,
    }


def adopter(fake: FakeGateway, *, leading: bool = True) -> Adopter:
    settings = Settings(leader_election=not leading)
    return Adopter(
        gateway=fake,  # type: ignore[arg-type]
        leadership=Leadership(settings, Metrics()),
        managed=lambda namespace: namespace in MANAGED,
    )


def offered(fake: FakeGateway, *names: tuple[str, str], leading: bool = True) -> int:
    a = adopter(fake, leading=leading)
    for namespace, name in names:
        held = fake.held("Job", namespace, name)
        assert held is not None
        a.offer(held)
    return asyncio.run(a.adopt())


def test_an_unlabelled_gpu_job_that_got_past_the_webhook_is_queued_and_suspended() -> None:
    fake = FakeGateway(job("slipped"))
    assert offered(fake, ("team-a", "slipped")) == 1
    held = fake.held("Job", "team-a", "slipped")
    assert held is not None
    assert held["metadata"]["labels"] == {LABEL: "default"}
    assert held["spec"]["suspend"] is True
    # Conditional on the version the watch saw: a Job changed meanwhile is not overwritten.
    (patch,) = [c for c in fake.calls if c.method == "patch"]
    assert patch.body is not None
    assert patch.resource_version == "1"


def test_what_is_not_ours_is_left_alone() -> None:
    done: Obj = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    fake = FakeGateway(
        job("cpu", gpus=0),
        job("elsewhere", namespace="team-b"),
        job("labelled", meta={"labels": {LABEL: "research"}}),
        job("finished", **done),
    )
    names = [("team-a", "cpu"), ("team-b", "elsewhere"), ("team-a", "labelled")]
    assert offered(fake, *names, ("team-a", "finished")) == 0
    assert [c for c in fake.calls if c.method == "patch"] == []


def test_only_the_leader_queues() -> None:
    fake = FakeGateway(job("slipped"))
    assert offered(fake, ("team-a", "slipped"), leading=False) == 0
    held = fake.held("Job", "team-a", "slipped")
    assert held is not None
    assert "labels" not in held["metadata"]


def test_a_job_changed_since_its_event_is_left_for_its_next_event() -> None:
    fake = FakeGateway(job("slipped"))
    a = adopter(fake)
    seen = fake.held("Job", "team-a", "slipped")
    assert seen is not None
    a.offer(seen)
    fake.patch(JOB, "team-a", "slipped", {"metadata": {"annotations": {"x": "y"}}})
    assert asyncio.run(a.adopt()) == 0  # conflicted: nothing overwritten
    held = fake.held("Job", "team-a", "slipped")
    assert held is not None
    assert held["spec"]["suspend"] is False
