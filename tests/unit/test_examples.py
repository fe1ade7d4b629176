"""The examples tell the truth: the demo's Jobs get the decisions its comments promise.

The real core runs over the examples on the default fake GPU nodes, exactly as
`plan` would over a dump of the demo cluster the moment the Jobs arrive.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from queue_controller import nodepools
from queue_controller.core import schedule
from queue_controller.dump import load_snapshot

ROOT = Path(__file__).resolve().parents[2]


def test_demo_jobs_are_decided_as_the_examples_say() -> None:
    objects = [
        doc
        for path in sorted((ROOT / "examples").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    jobs = [obj for obj in objects if obj["kind"] == "Job"]
    for second, obj in enumerate(jobs):
        obj["spec"]["suspend"] = True  # what the controller's webhook does on creation
        # `make run` submits them a second apart, in file order.
        obj["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{second:02d}Z"
    for node in nodepools.load(ROOT / "deploy/local-cluster/nodes.yaml").nodes():
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]  # as kwok reports
        objects.append(node)
    snapshot, _ = load_snapshot(
        [("examples", yaml.safe_dump_all(objects))], now=0.0, ignore_unknown=True
    )
    decisions = {d.workload: d for d in schedule(snapshot).decisions}
    got = {key: (d.verdict.value, d.reason.value) for key, d in decisions.items()}
    assert got == {
        "research/pretrain-llm": ("Pending", "QuotaExceeded"),
        "research/finetune": ("Admit", "Admitted"),
        "research/sweep": ("Admit", "Admitted"),
        "research/eval": ("Pending", "QuotaExceeded"),
        "research/embed": ("Admit", "Admitted"),
        "prod/train-bert": ("Pending", "QuotaExceeded"),
        "prod/eval-bert": ("Pending", "WaitingForHead"),
    }
    assert "borrowing 8 nvidia.com/gpu from its cohort" in decisions["research/sweep"].message
