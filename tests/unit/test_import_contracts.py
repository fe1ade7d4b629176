"""Each import contract in pyproject.toml fails when the layering it guards is broken.

For every contract, one edit to a copy of the tree breaks exactly that contract:
lint-imports, run on the copy, must exit non-zero, name that contract BROKEN and
the others KEPT.  The unmodified copy keeps them all.  A contract in pyproject.toml
without a breaking edit here fails the coverage test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

LAYERS = "Layers only look downward"
CONTROLLER_LAYERS = "The controller's modules only look downward"
KUBE_LAYERS = "The Kubernetes adapter's modules only look downward"
CORE_PURE = "The core is pure: no Kubernetes, kopf, database, metrics, parsing or I/O libraries"
JOURNAL_ALONE = (
    "The journal stands alone: no Kubernetes, kopf or metrics, and of this package only errors"
)
KUBERNETES_KOPF = (
    "Only the gateway, the credentials, the kopf wiring and leader election import "
    "kubernetes or kopf"
)
CEL_CONTAINED = "Only the DRA selector modules import the CEL interpreter"
CORE_PACKAGES = "The core's packages only look downward"
CYCLE_MODULES = "The admission cycle's modules only look downward"
PREEMPTION_MODULES = "Preemption's modules only look downward"
RESERVATION_MODULES = "Reservation's modules only look downward"
QUOTA_MODULES = "Quota's modules only look downward"
PLACEMENT_MODULES = "Placement's modules only look downward"
TOPOLOGY_MODULES = "Topology placement's modules only look downward"
RULES_MODULES = "The rules' modules only look downward"
DEVICES_MODULES = "DRA matching's modules only look downward"
MODEL_MODULES = "The model's modules only look downward"
SIM_PACKAGES = "The simulator's packages only look downward"
SIM_ENGINE_MODULES = "The simulator engine's modules only look downward"
SIM_REPORT_MODULES = "The simulator report's modules only look downward"
SIM_FORECAST_MODULES = "The simulator forecast's modules only look downward"
SIM_MEASUREMENT_MODULES = "The simulator measurement's modules only look downward"
SIM_WORLD_MODULES = "The simulated world's modules only look downward"
SIM_SCENARIO_MODULES = "The simulator scenario's modules only look downward"


@dataclass(frozen=True)
class Break:
    contract: str
    path: str  # relative to the copy's root
    line: str  # appended to the module

    @property
    def module(self) -> str:
        return self.path.removesuffix(".py").replace("/", ".")


BREAKS = {
    # A lower top-level layer importing a higher one.
    "api-imports-journal": Break(
        LAYERS, "queue_controller/api/v1alpha1.py", "import queue_controller.journal"
    ),
    "envsettings-imports-nodepools": Break(
        LAYERS, "queue_controller/envsettings.py", "import queue_controller.nodepools"
    ),
    # The cycle state -> apply -> state.
    "controller-cycle": Break(
        CONTROLLER_LAYERS,
        "queue_controller/controller/state.py",
        "import queue_controller.controller.apply",
    ),
    # Siblings in one layer stay independent.
    "controller-siblings": Break(
        CONTROLLER_LAYERS,
        "queue_controller/controller/handlers.py",
        "import queue_controller.controller.loop",
    ),
    "kube-lower-imports-snapshot": Break(
        KUBE_LAYERS, "queue_controller/kube/fields.py", "import queue_controller.kube.snapshot"
    ),
    "kube-gateway-imports-objects": Break(
        KUBE_LAYERS, "queue_controller/kube/gateway.py", "import queue_controller.kube.objects"
    ),
    # The bottom of the core looking up at the cycle.
    "model-imports-cycle": Break(
        CORE_PACKAGES,
        "queue_controller/core/model/decisions.py",
        "import queue_controller.core.cycle.pacing",
    ),
    # Quota and placement stay independent.
    "quota-imports-placement": Break(
        CORE_PACKAGES,
        "queue_controller/core/quota/ledger.py",
        "import queue_controller.core.placement.shapes",
    ),
    "pacing-imports-admission": Break(
        CYCLE_MODULES,
        "queue_controller/core/cycle/pacing.py",
        "import queue_controller.core.cycle.admission",
    ),
    "victims-imports-fairvictims": Break(
        PREEMPTION_MODULES,
        "queue_controller/core/preemption/victims.py",
        "import queue_controller.core.preemption.fairvictims",
    ),
    "choose-imports-book": Break(
        RESERVATION_MODULES,
        "queue_controller/core/reservation/choose.py",
        "import queue_controller.core.reservation.book",
    ),
    "reservation-imports-preemption": Break(
        CORE_PACKAGES,
        "queue_controller/core/reservation/choose.py",
        "import queue_controller.core.preemption.victims",
    ),
    "ledger-imports-fairshare": Break(
        QUOTA_MODULES,
        "queue_controller/core/quota/ledger.py",
        "import queue_controller.core.quota.fairshare",
    ),
    # A type-only back-edge is an edge too.
    "shapes-imports-nodeclasses": Break(
        PLACEMENT_MODULES,
        "queue_controller/core/placement/shapes.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    import queue_controller.core.placement.nodeclasses",
    ),
    "slices-imports-domains": Break(
        TOPOLOGY_MODULES,
        "queue_controller/core/placement/topology/slices.py",
        "import queue_controller.core.placement.topology.domains",
    ),
    "requests-imports-prepared": Break(
        RULES_MODULES,
        "queue_controller/core/rules/requests.py",
        "import queue_controller.core.rules.prepared",
    ),
    "celbudget-imports-dracel": Break(
        DEVICES_MODULES,
        "queue_controller/core/devices/celbudget.py",
        "import queue_controller.core.devices.dracel",
    ),
    "quantity-imports-decisions": Break(
        MODEL_MODULES,
        "queue_controller/core/model/quantity.py",
        "import queue_controller.core.model.decisions",
    ),
    # The report and the engine stay independent.
    "report-imports-engine": Break(
        SIM_PACKAGES,
        "queue_controller/sim/report/markdown.py",
        "import queue_controller.sim.engine.run",
    ),
    "world-imports-measurement": Break(
        SIM_PACKAGES,
        "queue_controller/sim/world/events.py",
        "import queue_controller.sim.measurement.results",
    ),
    "forecast-outcome-imports-run": Break(
        SIM_FORECAST_MODULES,
        "queue_controller/sim/forecast/outcome.py",
        "import queue_controller.sim.forecast.run",
    ),
    "sim-admission-imports-run": Break(
        SIM_ENGINE_MODULES,
        "queue_controller/sim/engine/admission.py",
        "import queue_controller.sim.engine.run",
    ),
    "markdown-imports-render": Break(
        SIM_REPORT_MODULES,
        "queue_controller/sim/report/markdown.py",
        "import queue_controller.sim.report.render",
    ),
    "results-imports-outcome": Break(
        SIM_MEASUREMENT_MODULES,
        "queue_controller/sim/measurement/results.py",
        "import queue_controller.sim.measurement.outcome",
    ),
    "events-imports-cluster": Break(
        SIM_WORLD_MODULES,
        "queue_controller/sim/world/events.py",
        "import queue_controller.sim.world.cluster",
    ),
    "gpus-imports-spec": Break(
        SIM_SCENARIO_MODULES,
        "queue_controller/sim/scenario/gpus.py",
        "import queue_controller.sim.scenario.spec",
    ),
    "core-imports-os": Break(CORE_PURE, "queue_controller/core/model/objects.py", "import os"),
    "journal-imports-core": Break(
        JOURNAL_ALONE, "queue_controller/journal/model.py", "import queue_controller.core"
    ),
    "gpuwatch-imports-kubernetes": Break(
        KUBERNETES_KOPF, "queue_controller/controller/gpuwatch.py", "import kubernetes"
    ),
    "status-imports-kopf": Break(
        KUBERNETES_KOPF, "queue_controller/controller/status.py", "import kopf"
    ),
    "snapshot-imports-client": Break(
        KUBERNETES_KOPF, "queue_controller/kube/snapshot.py", "from kubernetes import client"
    ),
    "agent-imports-kopf": Break(KUBERNETES_KOPF, "queue_controller/agent/loop.py", "import kopf"),
    "dra-model-imports-celpy": Break(
        CEL_CONTAINED, "queue_controller/core/model/dra.py", "from celpy import celtypes"
    ),
}


def _contract_names() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [c["name"] for c in config["tool"]["importlinter"]["contracts"]]


def _copy_tree(tmp_path: Path) -> Path:
    copy = tmp_path / "tree"
    shutil.copytree(
        ROOT / "queue_controller",
        copy / "queue_controller",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy2(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _lint_imports(copy: Path) -> tuple[int, str]:
    assert LINT_IMPORTS.exists(), (
        f"no lint-imports next to {sys.executable} (pip install -e .[dev])"
    )
    env = {**os.environ, "PYTHONPATH": str(copy), "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Long contract names wrap; compare with the whitespace folded.
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def test_every_contract_has_a_breaking_edit() -> None:
    names = _contract_names()
    assert len(names) == len(set(names)), "contract names must be unique"
    covered = {b.contract for b in BREAKS.values()}
    assert set(names) - covered == set(), "a contract in pyproject.toml has no breaking edit here"
    assert covered - set(names) == set(), "a breaking edit names a contract pyproject.toml lacks"


def test_the_tree_keeps_every_contract(tmp_path: Path) -> None:
    rc, out = _lint_imports(_copy_tree(tmp_path))
    assert rc == 0, out
    for name in _contract_names():
        assert f"{name} KEPT" in out, (name, out)


def test_importing_the_gateway_is_not_importing_kubernetes(tmp_path: Path) -> None:
    """The allowed modules' own imports of kubernetes are ignored, so reaching the client
    through the gateway keeps the contract; only a direct import breaks it."""
    copy = _copy_tree(tmp_path)
    status = copy / "queue_controller/controller/status.py"
    status.write_text(status.read_text() + "\nimport queue_controller.kube.gateway\n")
    rc, out = _lint_imports(copy)
    assert rc == 0, out
    assert f"{KUBERNETES_KOPF} KEPT" in out, out


@pytest.mark.parametrize("edit", BREAKS.values(), ids=BREAKS.keys())
def test_one_edit_breaks_its_contract(tmp_path: Path, edit: Break) -> None:
    copy = _copy_tree(tmp_path)
    target = copy / edit.path
    target.write_text(target.read_text() + f"\n{edit.line}\n")
    rc, out = _lint_imports(copy)
    assert rc != 0, out
    assert f"{edit.contract} BROKEN" in out, out
    assert edit.module in out, out
    for name in _contract_names():
        if name != edit.contract:
            assert f"{name} KEPT" in out, (name, out)


@pytest.mark.parametrize(
    ("package", "contract"),
    [
        ("controller", CONTROLLER_LAYERS),
        ("kube", KUBE_LAYERS),
        ("core", CORE_PACKAGES),
        ("core/cycle", CYCLE_MODULES),
        ("core/preemption", PREEMPTION_MODULES),
        ("core/reservation", RESERVATION_MODULES),
        ("core/quota", QUOTA_MODULES),
        ("core/placement", PLACEMENT_MODULES),
        ("core/placement/topology", TOPOLOGY_MODULES),
        ("core/rules", RULES_MODULES),
        ("core/devices", DEVICES_MODULES),
        ("core/model", MODEL_MODULES),
        ("sim", SIM_PACKAGES),
        ("sim/engine", SIM_ENGINE_MODULES),
        ("sim/report", SIM_REPORT_MODULES),
        ("sim/forecast", SIM_FORECAST_MODULES),
        ("sim/measurement", SIM_MEASUREMENT_MODULES),
        ("sim/world", SIM_WORLD_MODULES),
        ("sim/scenario", SIM_SCENARIO_MODULES),
    ],
)
def test_a_new_module_must_be_placed_in_its_layers(
    tmp_path: Path, package: str, contract: str
) -> None:
    """The inner layers contracts are exhaustive: a module they do not name breaks them."""
    copy = _copy_tree(tmp_path)
    (copy / "queue_controller" / package / "unplaced.py").write_text('"""Not in any layer."""\n')
    rc, out = _lint_imports(copy)
    assert rc != 0, out
    assert f"{contract} BROKEN" in out, out
    assert f"queue_controller.{package.replace('/', '.')}.unplaced" in out, out
