"""``plan``'s table names the topology domain a gang that asked for one is admitted into."""

from __future__ import annotations

from rich.console import Console

from queue_controller.cli.render import decisions_table
from queue_controller.core import Decision, Reason, Snapshot, Verdict


def test_the_table_names_the_domain() -> None:
    decision = Decision(
        "fabric/nvl-fits",
        "nvlink",
        Verdict.ADMIT,
        Reason.ADMITTED,
        "4 members",
        {"gb200-0004": 1, "gb200-0005": 1},
        kind="Job",
        domains={"main": "gb200-block-0/gb200-nvl-1.1"},
    )
    plain = Decision(
        "fabric/anywhere", "nvlink", Verdict.ADMIT, Reason.ADMITTED, "1", {"n": 1}, kind="Job"
    )
    console = Console(record=True, width=200)
    decisions_table([decision, plain], snapshot=Snapshot(), skipped=0, console=console)
    shown = console.export_text()
    assert "in gb200-block-0/gb200-nvl-1.1: gb200-0004: 1, gb200-0005: 1" in shown
    assert "n: 1" in shown
    assert "in :" not in shown
