"""Topology-aware gangs in the simulator: domain labels on simulated nodes reach the
core, and the report's two topology figures, on scenarios worked out by hand.

The hand scenarios run with the zero-delay INSTANT policy of test_engine: ticks
fall on multiples of 10 s, and a gang admitted at a tick binds and starts then.
Four 8-GPU nodes: n0 and n1 in rack r0, n2 and n3 in rack r1, one block b0.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from queue_controller.cli import cli
from queue_controller.core import Node, Queue, ResourceQuota, TeamQuota
from queue_controller.core.model.objects import Topology, TopologyMode, TopologyRequest
from queue_controller.errors import InputError
from queue_controller.journal import Entry
from queue_controller.nodepools import BLOCK_LABEL, RACK_LABEL
from queue_controller.sim.engine.compare import simulate
from queue_controller.sim.report.render import comparison, report_json
from queue_controller.sim.scenario import topologyspec
from queue_controller.sim.scenario.generate import (
    DEFAULT_FAULTS,
    WorkloadShape,
    bundled_scenario,
    generate_workload,
)
from queue_controller.sim.scenario.inputs import load_cluster
from queue_controller.sim.scenario.spec import Faults, Scenario, SimJob
from tests.sim.test_cli_simulate import error_of
from tests.sim.test_engine import GPU, HOSTNAME, INSTANT, job

LEVELS = (BLOCK_LABEL, RACK_LABEL, HOSTNAME)


def racked(name: str, rack: str) -> Node:
    return Node(
        name=name,
        allocatable={GPU: 8000, "cpu": 64_000, "memory": 2**40 * 1000, "pods": 110_000},
        labels={HOSTNAME: name, BLOCK_LABEL: "b0", RACK_LABEL: rack},
        conditions={"Ready": "True"},
    )


NODES = (racked("n0", "r0"), racked("n1", "r0"), racked("n2", "r1"), racked("n3", "r1"))


def on(node: str) -> dict[str, str]:
    return {HOSTNAME: node}


def asks(mode: TopologyMode, level: str = RACK_LABEL) -> TopologyRequest:
    return TopologyRequest(mode=mode, level=level)


def racks_scenario(jobs: list[SimJob]) -> Scenario:
    queue = Queue(namespace="team", name="q", team_quota="team", topology_name="racks")
    quota = TeamQuota(name="team", resources={GPU: ResourceQuota(nominal=64_000)})
    return Scenario(
        name="racks",
        nodes=NODES,
        queues=(queue,),
        quotas=(quota,),
        jobs=tuple(jobs),
        topologies=(Topology("racks", LEVELS),),
    )


def run(scenario: Scenario, entries: list[Entry] | None = None) -> dict[str, object]:
    report = simulate(
        scenario,
        policy=INSTANT,
        faults=Faults(),
        seed=1,
        compare=["gang-fit"],
        record=None if entries is None else entries.append,
    )
    return report_json(report)


def _without_fragmentation(figures: dict[str, object]) -> dict[str, object]:
    # Fragmentation is sampled (tests/sim/test_topology_placement.py checks it).
    return {k: v for k, v in figures.items() if k not in ("free_on_used_nodes", "broken_domains")}


def test_a_required_rack_gang_waits_for_a_whole_rack_and_the_wait_is_counted() -> None:
    # Fillers pinned to n0 (until 3610) and n2 (until 1810) leave n1 and n3 free: 16
    # GPUs, enough for the gang but in two racks.  The gang waits from the tick at 10
    # until the tick after n2 frees (1820), then takes rack r1: 16 GPUs x 1810 s.
    entries: list[Entry] = []
    document = run(
        racks_scenario(
            [
                job("f1", arrival=0, pods=1, gpus=8, duration=3600, node_selector=on("n0")),
                job("f2", arrival=0, pods=1, gpus=8, duration=1800, node_selector=on("n2")),
                job(
                    "gang",
                    arrival=5,
                    pods=2,
                    gpus=8,
                    duration=600,
                    topology=asks(TopologyMode.REQUIRED),
                ),
            ]
        ),
        entries,
    )
    (admitted,) = [e for e in entries if e.name == "gang" and e.event.value == "Admitted"]
    assert admitted.placement == {"n2": 1, "n3": 1}
    assert "in domain b0/r1" in admitted.message
    (pending,) = [e for e in entries if e.name == "gang" and e.event.value == "Pending"]
    assert "in any one rack" in pending.message
    assert (admitted.at - pending.at).total_seconds() == 1810
    policy = document["policies"]["gang-fit"]  # type: ignore[index]
    assert _without_fragmentation(policy["topology"]) == {
        "preferred_placements": 0,
        "preferred_in_domain": None,
        "domain_wait_gpu_hours": round(16 * 1810 / 3600, 2),
    }


def test_a_full_cluster_is_not_counted_as_waiting_for_a_domain() -> None:
    # Both racks are full until 1010: the gang waits for room, not for a domain.
    document = run(
        racks_scenario(
            [
                job("fill", arrival=0, pods=4, gpus=8, duration=1000),
                job(
                    "gang",
                    arrival=5,
                    pods=2,
                    gpus=8,
                    duration=100,
                    topology=asks(TopologyMode.REQUIRED),
                ),
            ]
        )
    )
    policy = document["policies"]["gang-fit"]  # type: ignore[index]
    assert policy["topology"]["domain_wait_gpu_hours"] == 0
    assert policy["jobs_completed"] == 2


def test_the_fraction_of_preferred_gangs_in_one_domain() -> None:
    # "split" comes while only n1 and n3 are free: it runs across the two racks.
    # "whole" comes when every node is free: it runs inside one rack.  One of two.
    document = run(
        racks_scenario(
            [
                job("f1", arrival=0, pods=1, gpus=8, duration=1000, node_selector=on("n0")),
                job("f2", arrival=0, pods=1, gpus=8, duration=1000, node_selector=on("n2")),
                job(
                    "split",
                    arrival=5,
                    pods=2,
                    gpus=8,
                    duration=100,
                    topology=asks(TopologyMode.PREFERRED),
                ),
                job(
                    "whole",
                    arrival=2000,
                    pods=2,
                    gpus=8,
                    duration=100,
                    topology=asks(TopologyMode.PREFERRED),
                ),
            ]
        )
    )
    policy = document["policies"]["gang-fit"]  # type: ignore[index]
    assert _without_fragmentation(policy["topology"]) == {
        "preferred_placements": 2,
        "preferred_in_domain": 0.5,
        "domain_wait_gpu_hours": 0,
    }


def test_without_a_topology_the_report_has_no_topology_figures() -> None:
    scenario = racks_scenario([job("a", arrival=0, pods=1, gpus=1, duration=10)])
    scenario = replace(
        scenario,
        topologies=(),
        queues=tuple(replace(q, topology_name="") for q in scenario.queues),
    )
    report = simulate(scenario, policy=INSTANT, faults=Faults(), seed=1, compare=["gang-fit"])
    assert report_json(report)["policies"]["gang-fit"]["topology"] is None  # type: ignore[index]
    _, rows = comparison(report)
    assert not any("domain" in row[0] for row in rows)


# -- the bundled cluster's racks, the topology file, and a whole run --------------------


def test_the_bundled_cluster_is_cut_into_racks_and_blocks() -> None:
    nodes = bundled_scenario(jobs=1).nodes
    h100 = [n for n in nodes if n.name.startswith("h100-")]
    racks = {n.labels[RACK_LABEL] for n in h100}
    blocks = {n.labels[BLOCK_LABEL] for n in h100}
    assert len(racks) == 6
    assert len(blocks) == 2
    by_name = {n.name: n.labels for n in h100}
    assert by_name["h100-0003"][RACK_LABEL] == "h100-rack-0"
    assert by_name["h100-0004"][RACK_LABEL] == "h100-rack-1"
    assert by_name["h100-0012"][BLOCK_LABEL] == "h100-block-1"


def _topology_file(tmp_path: Path, rule: str) -> Path:
    path = tmp_path / "topology.yaml"
    path.write_text(
        "kind: SimulationTopology\n"
        "topologies:\n"
        f"- name: racks\n  levels: [{BLOCK_LABEL}, {RACK_LABEL}, {HOSTNAME}]\n"
        "queues: {'*': racks}\n"
        f"gangs:\n- {rule}\n"
    )
    return path


def test_required_rack_gangs_of_a_generated_run_never_span_racks(tmp_path: Path) -> None:
    # Gangs of at most 32 GPUs: every one fits in a rack of four 8-GPU nodes.
    base = bundled_scenario(jobs=1)
    workload = generate_workload(
        seed=5,
        jobs=400,
        queues=base.queues,
        nodes=base.nodes,
        quotas=base.quotas,
        priority_classes=base.priority_classes,
        shape=WorkloadShape(max_gang_gpus=32),
    )
    path = _topology_file(
        tmp_path, f"{{minPods: 2, fraction: 1, mode: Required, level: {RACK_LABEL}}}"
    )
    scenario = topologyspec.apply(
        topologyspec.load(path), replace(base, jobs=workload), seed=5, where=str(path)
    )
    asking = {j.name for j in scenario.jobs if j.topology is not None}
    assert asking == {j.name for j in scenario.jobs if j.pods >= 2}
    assert len(asking) > 20
    entries: list[Entry] = []
    report = simulate(
        scenario, policy=INSTANT, faults=DEFAULT_FAULTS, seed=5, record=entries.append
    )
    rack_of = {n.name: n.labels[RACK_LABEL] for n in scenario.nodes}
    placed = [
        e
        for e in entries
        if e.name in asking and e.event.value == "Admitted" and e.source.endswith(":gang-fit")
    ]
    assert len(placed) >= len(asking)  # every asking gang was admitted, some again
    assert all(len({rack_of[n] for n in e.placement}) == 1 for e in placed)
    # Gangs over several nodes, which could have been split between racks.
    assert sum(1 for e in placed if len(e.placement) > 1) >= 5
    assert report.policies["gang-fit"].jobs_completed == 400


@pytest.mark.parametrize(
    ("rule", "field", "words"),
    [
        (
            f"{{fraction: 0.5, mode: Required, level: {RACK_LABEL}x}}",
            "gangs.0.level",
            "is not a level of Topology racks",
        ),
        (f"{{fraction: 1.5, mode: Required, level: {RACK_LABEL}}}", "gangs.0.fraction", "1"),
        (f"{{fraction: 0.5, mode: Sometimes, level: {RACK_LABEL}}}", "gangs.0.mode", "Required"),
    ],
)
def test_a_bad_topology_file_is_one_line_naming_the_field(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    rule: str,
    field: str,
    words: str,
) -> None:
    path = _topology_file(tmp_path, rule)
    err = error_of(["--topology", str(path), "--jobs", "10", "--no-journal"], monkeypatch, capsys)
    assert str(path) in err
    assert field in err
    assert words in err


def test_a_bad_topology_option_names_the_pool_field(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "apiVersion: queue-controller.io/v1alpha1\nkind: NodePools\n"
        "pools:\n- name: a\n  count: 2\n  topology: {nodesPerRack: 0}\n"
    )
    with pytest.raises(InputError) as caught:
        load_cluster(path)
    assert caught.value.field == "pools.0.topology.nodesPerRack"


def test_a_topology_file_naming_a_missing_queue_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(
        "kind: SimulationTopology\ntopologies: [{name: t, levels: [a]}]\nqueues: {no/such: t}\n"
    )
    with pytest.raises(InputError) as caught:
        topologyspec.apply(
            topologyspec.load(path), bundled_scenario(jobs=1), seed=1, where=str(path)
        )
    assert caught.value.field == "queues.no/such"


def test_simulate_with_the_bundled_topology_reports_both_figures(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            *("simulate", "--topology", "bundled", "--jobs", "300", "--no-journal"),
            *("--out", str(tmp_path), "-o", "json"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["sources"]["topology"] == "bundled sim-topology.yaml"
    ours = document["policies"]["gang-fit"]["topology"]
    assert ours["preferred_placements"] > 0
    assert 0 <= ours["preferred_in_domain"] <= 1
    assert ours["domain_wait_gpu_hours"] >= 0
    # Not measured where the core does not place.
    assert document["policies"]["per-pod"]["topology"]["domain_wait_gpu_hours"] is None
    assert "GPU hours waiting for a domain" in (tmp_path / "report.md").read_text()


def test_a_topology_no_node_is_in_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "topology.yaml"
    path.write_text(
        "kind: SimulationTopology\n"
        f"topologies: [{{name: t, levels: [zone, {HOSTNAME}]}}]\nqueues: {{'*': t}}\n"
    )
    with pytest.raises(InputError) as caught:
        topologyspec.apply(
            topologyspec.load(path), bundled_scenario(jobs=1), seed=1, where=str(path)
        )
    assert caught.value.field == "topologies.0.levels"
    assert "zone" in caught.value.detail
