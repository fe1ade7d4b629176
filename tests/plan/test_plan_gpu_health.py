"""``plan`` over a dump with GPU health: the same condition and annotation the controller reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plan.harness import by_workload, dump, outcome, plan_json, run_main


def test_unhealthy_gpus_are_skipped_as_the_controller_skips_them() -> None:
    decisions = by_workload(plan_json("gpu-health.yaml"))
    assert {key: outcome(d) for key, d in decisions.items()} == {
        "t/whole-node": ("Pending", "NoNodeFit"),
        "t/seven": ("Admit", "Admitted"),
        "t/mig": ("Pending", "NoNodeFit"),
        "t/mig-seven": ("Admit", "Admitted"),
        "t/l4": ("Pending", "NoNodeFit"),
    }
    assert decisions["t/seven"]["placement"] == {"gpu-a": 1}
    assert decisions["t/mig-seven"]["placement"] == {"gpu-c": 1}
    # The node whose condition says unhealthy without a list is out, and says why.
    assert "GPUUnhealthy all 8 GPUs (1 node)" in decisions["t/whole-node"]["message"]
    # Partly unhealthy nodes are named where they would have counted.
    assert decisions["t/mig"]["message"].endswith("; 1 unhealthy GPU not offered (on gpu-c)")
    assert decisions["t/l4"]["message"].endswith("; 1 unhealthy GPU not offered (on gpu-d)")


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ("{not json", "not JSON"),
        ('{"source": "node-agent", "updated": "2026-12-01T00:00:00Z", "gpus": -1}', "gpus"),
        (
            '{"source": "x", "updated": "2026-12-01T00:00:00Z", "unhealthy": [{"index": 1}]}',
            "unhealthy.0.reason",
        ),
        (
            '{"source": "x", "updated": "2026-12-01T00:00:00Z", "unhealthy": [{"index": 1,'
            ' "reason": "GPULost", "since": "yesterday", "lastSeen": "yesterday"}]}',
            "bad time",
        ),
    ],
)
def test_a_malformed_health_annotation_names_the_node_and_the_field(
    annotation: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = Path(dump("gpu-health.yaml")).read_text()
    start = text.index("queue-controller.io/gpu-health: '") + len(
        "queue-controller.io/gpu-health: '"
    )
    end = text.index("'\n", start)
    broken = tmp_path / "broken.yaml"
    broken.write_text(text[:start] + annotation.replace("'", "''") + text[end:])
    run = run_main(["plan", "-f", str(broken)], monkeypatch, capsys)
    # The node is left out and named; the rest of the dump is still decided.
    assert run.code == 0, run.stderr
    assert "pending gangs over" in run.stdout
    (line,) = run.stderr.splitlines()
    assert line.startswith("left out: ")
    assert "Node/gpu-a" in line
    assert "metadata.annotations[queue-controller.io/gpu-health]" in line
    assert expected in line
