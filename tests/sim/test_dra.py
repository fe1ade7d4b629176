"""`simulate --dra`: whole GPUs asked and offered through DRA, on the same hardware.

A small cluster cut from the bundled one (H100 nodes with whole GPUs, A100s in
MIG, time-sliced L4s) runs a generated workload with and without DRA.  The
core must see devices instead of ``nvidia.com/gpu`` where GPUs are whole, the
simulator's device book must agree with its own count of GPUs at every step,
and gang-fit must admit the same way: it is the same hardware.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from queue_controller.cli import cli
from queue_controller.core.model.resources import GPU, ONE
from queue_controller.errors import InputError
from queue_controller.journal import Entry
from queue_controller.sim.engine.compare import simulate, with_preemption
from queue_controller.sim.engine.preempting import Terminating
from queue_controller.sim.engine.run import PolicyRun
from queue_controller.sim.report.render import report_json, report_markdown
from queue_controller.sim.scenario.dra import DRIVER, GPU_CLASS
from queue_controller.sim.scenario.generate import (
    DEFAULT_FAULTS,
    WorkloadShape,
    bundled_scenario,
    generate_workload,
)
from queue_controller.sim.scenario.gpus import PRODUCT_LABEL
from queue_controller.sim.scenario.policy import load, resolve
from queue_controller.sim.scenario.setup import with_dra
from queue_controller.sim.scenario.spec import Faults, Scenario
from queue_controller.sim.world.faults import FaultPlan
from tests.sim.test_cli_simulate import error_of

POLICY = load(resolve("default"))
# Comparing gang-fit's allocation with and without DRA: the same seed on the same
# hardware must give the same figures, up to this (absolute, as a fraction).
ALLOCATION_TOLERANCE = 0.005


def small(seed: int = 3, jobs: int = 160) -> Scenario:
    """6 H100 nodes (48 whole GPUs), 2 A100 MIG nodes, 2 time-sliced L4 nodes."""
    bundled = bundled_scenario(seed=seed, jobs=1)
    by_pool: dict[str, list[Any]] = {}
    for node in bundled.nodes:
        by_pool.setdefault(node.labels.get(PRODUCT_LABEL, ""), []).append(node)
    nodes = tuple(
        node
        for product, count in (
            ("NVIDIA-H100-80GB-HBM3", 6),
            ("NVIDIA-A100-SXM4-80GB", 2),
            ("NVIDIA-L4-SHARED", 2),
        )
        for node in by_pool[product][:count]
    )
    workload = generate_workload(
        seed=seed,
        jobs=jobs,
        queues=bundled.queues,
        nodes=nodes,
        quotas=bundled.quotas,
        priority_classes=bundled.priority_classes,
        shape=WorkloadShape(max_gang_gpus=16, load=1.5),
    )
    return Scenario(
        name="small",
        nodes=nodes,
        queues=bundled.queues,
        quotas=bundled.quotas,
        jobs=workload,
        priority_classes=bundled.priority_classes,
        cohorts=bundled.cohorts,
    )


class CheckedRun(PolicyRun):
    """A run that checks, after every bind, release and tick, that no node has more
    devices allocated than it offers, that the device book agrees with the GPUs
    the simulator counts as taken, and that no device is in two claims."""

    checks = 0

    def _check(self) -> None:
        book = self.book
        devices = book.devices
        for node, offered in devices.offered.items():
            allocated = devices.allocated(node)
            assert 0 <= allocated <= offered, node
            taken = book.allocatable[node][GPU] - book.free[node].get(GPU, 0)
            assert allocated * ONE == taken, (node, allocated, taken)
        claims = devices.claims(lambda owner, node: ("", f"{id(owner)}-{node}", ""))
        named = Counter((d.pool, d.device) for claim in claims for d in claim.allocated)
        assert all(count == 1 for count in named.values()), named.most_common(3)
        self.checks += 1

    def _bind(self, job: Any, node: str, pod: int) -> None:
        super()._bind(job, node, pod)
        self._check()

    def _release(self, job: Any, nodes: list[str] | None = None) -> None:
        super()._release(job, nodes)
        self._check()

    def _gone(self, pods: Terminating, node: str) -> None:
        super()._gone(pods, node)
        self._check()

    def _tick(self, _: object) -> None:
        super()._tick(_)
        self._check()


def checked_run(
    scenario: Scenario, name: str = "gang-fit", faults: Faults = DEFAULT_FAULTS
) -> CheckedRun:
    run = CheckedRun(name, scenario, policy=POLICY, plan=FaultPlan.draw(scenario, faults, 3))
    run.run()
    return run


def test_dra_turns_whole_gpus_into_devices_and_leaves_mig_and_time_slicing_alone() -> None:
    scenario = with_dra(small(), True)
    dra = scenario.dra
    assert dra is not None
    assert dra.device_classes == (GPU_CLASS,)
    assert GPU_CLASS.quota_resource == GPU
    h100 = [n.name for n in scenario.nodes if "H100" in n.labels[PRODUCT_LABEL]]
    assert sorted(dra.devices) == sorted(h100)
    assert all(count == 8 for count in dra.devices.values())
    [one] = [s for s in dra.resource_slices if s.node == h100[0]]
    assert (one.driver, one.pool, len(one.devices)) == (DRIVER, h100[0], 8)
    attributes = one.devices[3].attributes[DRIVER]
    assert attributes["productName"] == "NVIDIA H100 80GB HBM3"
    assert (attributes["type"], attributes["index"]) == ("gpu", 3)
    assert one.devices[3].capacity[DRIVER]["memory"] == 81559 * 2**20 * 1000
    # Templates for H100 jobs select the product; none for MIG or L4 jobs.
    assert dra.claim_templates
    for template in dra.claim_templates:
        [request] = template.requests
        assert request.device_class == DRIVER
        assert request.selectors == (
            f'device.attributes["{DRIVER}"].productName == "NVIDIA H100 80GB HBM3"',
        )
        assert template.name == f"gpu-{request.count}-nvidia-h100-80gb-hbm3"
    assert scenario.sources["dra"].startswith("whole GPUs as DeviceClass gpu.nvidia.com devices")


def test_the_core_sees_devices_where_gpus_are_whole_and_nvidia_gpu_elsewhere() -> None:
    run = PolicyRun(
        "gang-fit",
        with_dra(small(), True),
        policy=POLICY,
        plan=FaultPlan.draw(small(), Faults(), 1),
    )
    core_nodes = {n.name: n for n in run.book.core_nodes()}
    for name in run.book.devices.offered:
        assert GPU not in core_nodes[name].allocatable
    shared = [n for n in core_nodes.values() if "L4" in n.labels[PRODUCT_LABEL]]
    assert shared
    assert all(GPU in n.allocatable for n in shared)
    for job in run.jobs:
        asks_gpu = job.request.get(GPU, 0) > 0
        on_h100 = "H100" in job.spec.node_selector.get(PRODUCT_LABEL, "")
        claims = job.template.resource_claims
        assert bool(claims) == (asks_gpu and on_h100), job.key
        if claims:
            [container] = job.template.containers
            assert GPU not in container.requests
            assert GPU not in container.limits
            assert claims[0].template_name.startswith(f"gpu-{job.request[GPU] // ONE}-")


def test_gang_fit_with_dra_admits_and_completes_and_never_overcommits_a_node() -> None:
    run = checked_run(with_dra(small(), True))
    assert run.checks > 100
    assert run.completed >= 0.9 * len(run.jobs)
    # Something ran on the devices: whole-GPU gangs of several pods among them.
    claimed = [j for j in run.jobs if j.template.resource_claims and j.placed_once]
    assert len(claimed) >= 10
    assert any(j.pods > 1 for j in claimed)
    # Everything was given back at the end.
    assert all(run.book.devices.allocated(n) == 0 for n in run.book.devices.offered)


def test_preemption_with_dra_frees_the_victims_devices_after_their_grace() -> None:
    scenario = with_preemption(with_dra(small(seed=5, jobs=220), True), True)
    run = checked_run(scenario, "gang-fit+preemption")
    assert run.victims > 0
    assert run.completed >= 0.9 * len(run.jobs)
    assert all(run.book.devices.allocated(n) == 0 for n in run.book.devices.offered)


def test_quota_only_and_per_pod_keep_the_device_book_right_too() -> None:
    scenario = with_dra(small(jobs=80), True)
    for name in ("quota-only", "per-pod"):
        run = checked_run(scenario, name)
        assert run.completed > 0
        assert all(run.book.devices.allocated(n) == 0 for n in run.book.devices.offered)


@pytest.mark.parametrize(("seed", "preemption"), [(3, "as-configured"), (11, "on")])
def test_gang_fit_admits_the_same_with_and_without_dra(seed: int, preemption: str) -> None:
    """Same hardware, same decisions: every journalled event (admissions with their
    placement, evictions, preemptions, completions) at the same time, so the same
    allocation.  ALLOCATION_TOLERANCE is what the report's figure may differ by,
    should a future core break ties between devices otherwise; today it is equal."""
    scenario = small(seed=seed, jobs=200)
    journals: list[list[tuple[object, ...]]] = []
    reports = []
    for dra in (False, True):
        entries: list[Entry] = []
        reports.append(
            simulate(
                with_dra(scenario, dra),
                policy=POLICY,
                faults=DEFAULT_FAULTS,
                seed=seed,
                compare=["gang-fit"],
                record=entries.append,
                preemption=preemption,
            )
        )
        journals.append(
            [(e.name, e.event, e.reason, e.at, tuple(sorted(e.placement.items()))) for e in entries]
        )
    plain, dra_report = reports
    a, b = plain.policies["gang-fit"], dra_report.policies["gang-fit"]
    assert journals[0] == journals[1]
    assert abs(a.gpu_allocation - b.gpu_allocation) <= ALLOCATION_TOLERANCE
    assert a.gpu_allocation == b.gpu_allocation
    assert (a.jobs_started, a.jobs_completed) == (b.jobs_started, b.jobs_completed)
    assert a.preemption == b.preemption
    if preemption == "on":
        assert a.preemption.victims > 0
    assert (plain.dra, dra_report.dra) == (False, True)
    assert report_json(plain)["dra"] is False
    assert report_json(dra_report)["dra"] is True
    assert "| GPUs through DRA | yes" in report_markdown(dra_report)


def test_simulate_dra_on_the_bundled_cluster(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            *("simulate", "--dra", "--jobs", "120", "--compare", "gang-fit", "--no-journal"),
            *("--out", str(tmp_path), "-o", "json"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["dra"] is True
    assert "192 on 24 nodes" in document["sources"]["dra"]
    assert document["policies"]["gang-fit"]["jobs_completed"] > 100
    assert "GPUs through DRA" in (tmp_path / "report.md").read_text()


def test_help_describes_dra() -> None:
    result = CliRunner().invoke(cli, ["simulate", "--help"])
    assert "--dra" in result.output
    assert "MIG slices and time-sliced GPUs stay extended resources" in " ".join(
        result.output.split()
    )


L4_ONLY = """\
apiVersion: queue-controller.io/v1alpha1
kind: NodePools
pools:
- name: l4
  count: 2
  cpu: "46"
  memory: 180Gi
  gpu:
    product: NVIDIA-L4
    count: 4
    memoryMiB: 23034
    family: ada-lovelace
    sharing: {strategy: time-slicing, replicas: 4}
"""


def test_dra_on_a_cluster_without_whole_gpus_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(L4_ONLY)
    queues = Path(__file__).parents[2] / "queue_controller" / "data" / "sim-queues.yaml"
    argv = ["--cluster", str(cluster), "--queues", str(queues), "--generate", "--jobs", "5"]
    err = error_of([*argv, "--dra", "--no-journal"], monkeypatch, capsys)
    assert "--dra" in err
    assert "no node of the cluster offers whole, unshared nvidia.com/gpu" in err


def test_with_dra_off_changes_nothing() -> None:
    scenario = small(jobs=5)
    assert with_dra(scenario, False) is scenario
    with pytest.raises(InputError):
        with_dra(Scenario("empty", (), (), (), ()), True)
