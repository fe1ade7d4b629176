"""A Job deleted while admitted: its quota is free at the next cycle, and the journal
says what became of it (nothing else is left to write to)."""

from __future__ import annotations

from pathlib import Path

from queue_controller.controller.loop import SUMMARY_SECONDS
from queue_controller.journal import Journal, read_history
from queue_controller.kube.resources import JOB, POD, POD_GROUP
from tests.fakes.gateway import FakeGateway
from tests.unit.test_lifecycle import NOW, QUEUE
from tests.unit.test_preemption_metrics import NODE, TEAM, Controller, gang, priority_class


def test_a_job_deleted_while_admitted_frees_its_quota_and_is_journalled(tmp_path: Path) -> None:
    fake = FakeGateway(
        QUEUE,
        TEAM,
        NODE,
        priority_class("low", 10),
        *gang("runs", "low", running_since=100),
        clock=lambda: NOW,
    )
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = Journal(url, flush_interval=0.01)
    journal.start()
    now = [NOW]
    controller = Controller(fake, lambda: now[0], journal)
    controller.cycle()
    quota = fake.held("TeamQuota", "", "team")
    assert quota is not None
    assert quota["status"]["used"]["nvidia.com/gpu"] == "2"
    # Deleted, with its PodGroup (garbage-collected) and pods.
    fake.delete(JOB, "ns", "runs")
    fake.delete(POD_GROUP, "ns", "runs")
    for i in range(2):
        fake.delete(POD, "ns", f"runs-{i}")
    now[0] += SUMMARY_SECONDS  # a later cycle, past the pacing of status figures
    controller.cycle()
    controller.cycle()  # nothing more to say about it
    journal.close()
    quota = fake.held("TeamQuota", "", "team")
    assert quota is not None
    assert quota["status"]["used"]["nvidia.com/gpu"] == "0"
    entries = [e for e in read_history(url, namespace="ns") if e.name == "runs"]
    deleted = [e for e in entries if e.reason == "Deleted"]
    assert len(deleted) == 1
    assert deleted[0].event.value == "Finished"
    assert "deleted while admitted" in deleted[0].message
