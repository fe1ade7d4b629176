"""Queue and TeamQuota status figures are written at most every SUMMARY_SECONDS
(issue 26, item 6): in a busy cluster they changed every cycle, about two API requests
for every gang admitted.  A later cycle writes how things stand then."""

from __future__ import annotations

from queue_controller.controller.loop import SUMMARY_SECONDS
from queue_controller.kube.resources import JOB, POD, POD_GROUP
from tests.fakes.gateway import FakeGateway
from tests.unit.test_lifecycle import NOW, QUEUE
from tests.unit.test_preemption_metrics import NODE, TEAM, Controller, gang, priority_class


def used(fake: FakeGateway) -> str:
    quota = fake.held("TeamQuota", "", "team")
    assert quota is not None
    return str(quota["status"]["used"]["nvidia.com/gpu"])


def status_writes(fake: FakeGateway) -> int:
    return sum(1 for c in fake.calls if c.method == "patch" and c.resource.kind == "TeamQuota")


def test_a_changed_figure_waits_for_the_pace_and_is_then_written_as_it_stands() -> None:
    fake = FakeGateway(
        QUEUE, TEAM, NODE, priority_class("low", 10), *gang("runs", "low", running_since=100)
    )
    now = [NOW]
    controller = Controller(fake, lambda: now[0])
    controller.cycle()
    assert used(fake) == "2"
    writes = status_writes(fake)
    fake.delete(JOB, "ns", "runs")
    fake.delete(POD_GROUP, "ns", "runs")
    for i in range(2):
        fake.delete(POD, "ns", f"runs-{i}")
    now[0] += SUMMARY_SECONDS / 2
    controller.cycle()
    assert used(fake) == "2", "within the pace: not yet"
    assert status_writes(fake) == writes
    now[0] += SUMMARY_SECONDS / 2
    controller.cycle()
    assert used(fake) == "0"
    assert status_writes(fake) == writes + 1
