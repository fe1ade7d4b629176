"""``simulate --topology-placement``: the same workload with every Topology best fit
and balanced (Kueue's TASBalancedPlacement), and the figures that tell them apart:
fragmentation inside the Topology, and the share of preferred gangs in one domain."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from queue_controller.cli import cli
from queue_controller.core.model.objects import TopologyMode
from queue_controller.journal import Entry
from queue_controller.sim.engine.compare import TOPOLOGY_PLACEMENT_MODES, runs, simulate
from queue_controller.sim.report.render import comparison, report_json
from queue_controller.sim.scenario.spec import Faults
from tests.sim.test_engine import INSTANT, job
from tests.sim.test_topology import asks, on, racks_scenario


def compared(entries: list[Entry]) -> dict[str, Any]:
    # r1 is in use (4 GPUs of n2, all run long); a 12-member gang prefers a rack.
    # Best fit packs it into r1 (8 on n3, 4 on n2) and keeps r0 whole; balanced
    # takes r0, where both nodes can hold 6, and breaks it.
    scenario = racks_scenario(
        [
            job("filler", arrival=0, pods=1, gpus=4, duration=5000, node_selector=on("n2")),
            job(
                "gang",
                arrival=5,
                pods=12,
                gpus=1,
                duration=3000,
                topology=asks(TopologyMode.PREFERRED),
            ),
        ]
    )
    report = simulate(
        scenario,
        policy=INSTANT,
        faults=Faults(),
        seed=1,
        compare=["gang-fit"],
        record=entries.append,
        topology_placement="compare",
    )
    assert list(report.policies) == ["gang-fit", "gang-fit+balanced"]
    assert "Racks with room that are broken" in [row[0] for row in comparison(report)[1]]
    document: dict[str, Any] = report_json(report)
    return document


def test_balanced_splits_evenly_and_breaks_the_rack_best_fit_keeps_whole() -> None:
    entries: list[Entry] = []
    document = compared(entries)
    admitted = {
        e.source: e.placement for e in entries if e.name == "gang" and e.event.value == "Admitted"
    }
    placements = sorted(admitted.values(), key=lambda p: sorted(p))
    assert {"n0": 6, "n1": 6} in placements
    assert {"n2": 4, "n3": 8} in placements
    best = document["policies"]["gang-fit"]["topology"]
    even = document["policies"]["gang-fit+balanced"]["topology"]
    assert best["preferred_in_domain"] == even["preferred_in_domain"] == 1.0
    assert even["free_on_used_nodes"] > best["free_on_used_nodes"]
    assert even["broken_domains"] > best["broken_domains"]


def test_best_fit_alone_runs_no_balanced_run_and_modes_are_checked() -> None:
    scenario = racks_scenario([job("a", arrival=0, pods=1, gpus=1, duration=10)])
    names = [name for name, _ in runs(scenario, ["gang-fit", "quota-only"], "as-configured")]
    assert names == ["gang-fit", "quota-only"]
    only = runs(scenario, ["gang-fit"], "as-configured", topology_placement="balanced")
    assert [name for name, _ in only] == ["gang-fit+balanced"]
    assert all(t.placement.value == "Balanced" for t in only[0][1].topologies)
    with pytest.raises(ValueError, match="unknown topology placement"):
        runs(scenario, ["gang-fit"], "as-configured", topology_placement="spread")


def test_the_cli_mirrors_the_engine_s_modes_and_needs_a_topology() -> None:
    from queue_controller.cli.simulate import TOPOLOGY_PLACEMENT_MODES as CLI_MODES

    assert CLI_MODES == TOPOLOGY_PLACEMENT_MODES
    result = CliRunner().invoke(cli, ["simulate", "--topology-placement", "compare"])
    assert result.exit_code == 2
    assert "--topology-placement needs --topology" in result.output
