"""``queue-controller simulate``: its arguments, its wiring, and (once the engine is in) a run.

Most tests stand the engine, the generator and the input loaders in with fakes, so
that what the command does with its options is checked on its own; the last tests run
the real engine and are skipped while ``queue_controller.sim.engine.compare`` does not import.
"""

from __future__ import annotations

import json
import re
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from queue_controller.cli import cli
from queue_controller.cli.simulate import POLICIES, PREEMPTION_MODES, _progress
from queue_controller.journal import Entry, JournalEvent, read_history
from queue_controller.sim.report.render import report_json
from queue_controller.sim.scenario.spec import Faults, Scenario
from tests.plan.harness import run_main
from tests.sim.test_report import FILES, sample_report

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
BUNDLED_FAULTS = Faults(node_failures_per_hour=0.25, bind_failure_probability=0.01)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, ["simulate", *args], catch_exceptions=False)


def error_of(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """The one line ``main()`` prints for a user's mistake (exit code 2)."""
    run = run_main(["simulate", *argv], monkeypatch, capsys)
    assert run.code == 2, run
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 or lines[0].startswith("Usage:"), run.stderr
    return run.stderr


# -- argument errors (no engine needed) ---------------------------------------------


def test_help_explains_the_command() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for words in ("gang-fit", "quota-only", "per-pod", "--cluster", "--generate", "--compare"):
        assert words in result.output
    assert "bundled scenario" in result.output


def test_simulate_is_listed() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert "simulate" in result.output


def test_only_cluster_names_the_missing_queues_and_trace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error_of(["--cluster", "cluster.yaml"], monkeypatch, capsys)
    assert err.startswith("error: --queues: --cluster given without --queues and --trace")
    assert "--generate" in err


def test_only_queues_and_trace_name_the_missing_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error_of(["--queues", "q.yaml", "--trace", "t.csv"], monkeypatch, capsys)
    assert "--queues and --trace given without --cluster" in err


def test_cluster_and_queues_need_a_trace_or_generate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error_of(["--cluster", "c.yaml", "--queues", "q.yaml"], monkeypatch, capsys)
    assert "without --trace (or --generate)" in err


def test_trace_and_generate_exclude_each_other(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error_of(["--trace", "t.csv", "--generate"], monkeypatch, capsys)
    assert "either --trace or --generate" in err


def test_shape_options_need_generate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _touch(tmp_path, "c.yaml", "q.yaml", "t.csv")
    args = ["--cluster", files[0], "--queues", files[1], "--trace", files[2]]
    err = error_of([*args, "--jobs", "10"], monkeypatch, capsys)
    assert "error: --jobs: --jobs shape a generated workload" in err


def test_a_missing_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, queues = _touch(tmp_path, "c.yaml", "q.yaml")
    missing = str(tmp_path / "nope.csv")
    err = error_of(
        ["--cluster", cluster, "--queues", queues, "--trace", missing], monkeypatch, capsys
    )
    assert err.strip() == f"error: {missing}: --trace: no such file"


def test_a_bad_compare_choice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error_of(["--compare", "fifo"], monkeypatch, capsys)
    assert "'fifo' is not one of 'gang-fit', 'quota-only', 'per-pod'" in err


def test_a_bad_policy_name_lists_the_presets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    err = error_of(["--policy", "no-such-preset"], monkeypatch, capsys)
    assert err.startswith("error: no-such-preset: no such policy file")
    assert "presets: " in err
    assert "default" in err.split("presets: ", 1)[1]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--bind-failure-probability", "1"),
        ("--node-failures-per-hour", "-1"),
        ("--node-repair-minutes", "0"),
        ("--jobs", "0"),
    ],
)
def test_out_of_range_numbers(
    option: str,
    value: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert option in error_of([option, value], monkeypatch, capsys)


# -- the wiring, over a fake engine --------------------------------------------------


@dataclass
class Fake:
    """What the fake engine and generator were asked."""

    simulate: list[dict[str, Any]] = field(default_factory=list)
    generate: list[dict[str, Any]] = field(default_factory=list)
    bundled: list[dict[str, Any]] = field(default_factory=list)
    loaded: list[dict[str, Any]] = field(default_factory=list)
    entries_per_policy: int = 3


def _scenario(name: str = "bundled", **sources: str) -> Scenario:
    return Scenario(name=name, nodes=(), queues=(), quotas=(), jobs=(), sources=sources)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Fake:
    calls = Fake()

    def simulate(
        scenario: Scenario,
        *,
        policy: Any,
        faults: Faults,
        seed: int,
        compare: Sequence[str] = POLICIES,
        record: Callable[[Entry], None] | None = None,
        progress: Callable[[str, float], None] | None = None,
        policy_file: str = "",
        preemption: str = "as-configured",
        reservation: str = "off",
        reservation_policy: Any = None,
        estimate_noise: float = 0.0,
        topology_placement: str = "best-fit",
    ) -> Any:
        calls.simulate.append(
            {
                "scenario": scenario,
                "policy": policy,
                "faults": faults,
                "seed": seed,
                "compare": list(compare),
                "record": record,
                "progress": progress,
                "policy_file": policy_file,
                "preemption": preemption,
                "reservation": reservation,
                "reservation_policy": reservation_policy,
                "estimate_noise": estimate_noise,
                "topology_placement": topology_placement,
            }
        )
        for name in compare:
            for i in range(calls.entries_per_policy):
                if record is not None:
                    record(
                        Entry(
                            at=T0 + timedelta(seconds=i),
                            namespace="team-a",
                            name=f"job-{i:05d}",
                            queue="a",
                            event=JournalEvent.ADMITTED,
                            reason="Admitted",
                            source=f"simulation:engine:{name}",
                        )
                    )
                if progress is not None:
                    progress(name, (i + 1) / calls.entries_per_policy)
        return sample_report(tuple(compare))

    @dataclass(frozen=True)
    class WorkloadShape:
        arrival_rate_per_hour: float | None = None
        max_gang_gpus: int = 64

    def bundled_scenario(*, seed: int = 7, jobs: int = 5000) -> Scenario:
        calls.bundled.append({"seed": seed, "jobs": jobs})
        return _scenario(cluster="bundled", workload=f"generated: seed={seed}")

    def generate_workload(**kwargs: Any) -> tuple[()]:
        calls.generate.append(kwargs)
        return ()

    def load_scenario(**kwargs: Any) -> Scenario:
        calls.loaded.append(kwargs)
        return _scenario("from-files")

    engine = types.ModuleType("queue_controller.sim.engine.compare")
    engine.POLICIES = POLICIES  # type: ignore[attr-defined]
    engine.simulate = simulate  # type: ignore[attr-defined]
    generate = types.ModuleType("queue_controller.sim.scenario.generate")
    generate.DEFAULT_FAULTS = BUNDLED_FAULTS  # type: ignore[attr-defined]
    generate.WorkloadShape = WorkloadShape  # type: ignore[attr-defined]
    generate.bundled_scenario = bundled_scenario  # type: ignore[attr-defined]
    generate.generate_workload = generate_workload  # type: ignore[attr-defined]
    inputs = types.ModuleType("queue_controller.sim.scenario.inputs")
    inputs.load_scenario = load_scenario  # type: ignore[attr-defined]
    inputs.load_cluster = lambda path: ()  # type: ignore[attr-defined]
    inputs.load_queues = lambda paths: ((), (), (), ())  # type: ignore[attr-defined]
    for module in (engine, generate, inputs):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return calls


def _touch(folder: Path, *names: str) -> list[str]:
    paths = []
    for name in names:
        path = folder / name
        path.write_text("")
        paths.append(str(path))
    return paths


def test_bundled_run_prints_the_table_and_writes_the_report(fake: Fake, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = invoke("--no-journal", "--out", str(out))
    assert result.exit_code == 0, result.output
    [call] = fake.simulate
    assert fake.bundled == [{"seed": 7, "jobs": 5000}]
    assert fake.generate == []
    assert call["compare"] == list(POLICIES)
    assert call["faults"] == BUNDLED_FAULTS
    assert call["seed"] == 7
    assert call["record"] is None
    assert call["progress"] is None  # not a terminal
    assert call["policy_file"] == "policies/default.yaml"
    assert call["policy"].name == "default"
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["METRIC", "GANG-FIT", "QUOTA-ONLY", "PER-POD", "UPPER", "BOUND"]
    assert lines[-1] == f"report written to {out}/ ({', '.join(FILES)})"
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)


def test_json_output_is_report_json_alone(fake: Fake, tmp_path: Path) -> None:
    out = tmp_path / "r"
    result = invoke("--no-journal", "--out", str(out), "-o", "json", "--compare", "per-pod")
    assert result.exit_code == 0
    payload = json.loads(result.stdout)
    assert payload == report_json(sample_report(("per-pod",)))
    assert payload == json.loads((out / "report.json").read_text())
    assert f"report written to {out}/" in result.stderr


def test_compare_runs_the_chosen_policies_in_their_usual_order(fake: Fake, tmp_path: Path) -> None:
    args = ["--no-journal", "--out", str(tmp_path), "--compare", "per-pod"]
    result = invoke(*args, "--compare", "gang-fit", "--compare", "per-pod")
    assert result.exit_code == 0
    assert fake.simulate[0]["compare"] == ["gang-fit", "per-pod"]


def test_fault_options_go_over_the_scenarios_faults(fake: Fake, tmp_path: Path) -> None:
    result = invoke(
        "--no-journal",
        "--out",
        str(tmp_path),
        "--node-failures-per-hour",
        "0",
        "--node-repair-minutes",
        "45",
        "--foreign-pods-per-hour",
        "2.5",
    )
    assert result.exit_code == 0
    assert fake.simulate[0]["faults"] == Faults(
        node_failures_per_hour=0.0,
        node_repair_seconds=2700.0,
        bind_failure_probability=0.01,  # the bundled scenario's, left as it was
        foreign_pods_per_hour=2.5,
    )


def test_own_files_with_a_trace_have_no_faults_by_default(fake: Fake, tmp_path: Path) -> None:
    cluster, queues, more, trace = _touch(tmp_path, "c.yaml", "q.yaml", "q2.yaml", "t.csv")
    args = ["--cluster", cluster, "--queues", queues, "--queues", more, "--trace", trace]
    result = invoke(*args, "--no-journal", "--out", str(tmp_path / "r"), "--seed", "3")
    assert result.exit_code == 0, result.output
    assert fake.loaded == [
        {"cluster": Path(cluster), "queues": (Path(queues), Path(more)), "trace": Path(trace)}
    ]
    assert fake.bundled == []
    [call] = fake.simulate
    assert call["faults"] == Faults()
    assert call["seed"] == 3
    assert call["scenario"].name == "from-files"


def test_own_files_with_generate(fake: Fake, tmp_path: Path) -> None:
    cluster, queues = _touch(tmp_path, "gpus.yaml", "q.yaml")
    result = invoke(
        *("--cluster", cluster, "--queues", queues, "--generate", "--seed", "11"),
        *("--jobs", "40", "--arrival-rate-per-hour", "12", "--max-gang-gpus", "16"),
        *("--no-journal", "--out", str(tmp_path / "r")),
    )
    assert result.exit_code == 0, result.output
    [generated] = fake.generate
    assert (generated["seed"], generated["jobs"]) == (11, 40)
    assert generated["shape"].arrival_rate_per_hour == 12.0
    assert generated["shape"].max_gang_gpus == 16
    scenario = fake.simulate[0]["scenario"]
    assert scenario.name == "gpus"
    assert scenario.sources == {
        "cluster": cluster,
        "queues": queues,
        "workload": "generated: seed=11, jobs=40, arrival-rate-per-hour=12, max-gang-gpus=16",
    }


def test_shape_options_reshape_the_bundled_workload(fake: Fake, tmp_path: Path) -> None:
    result = invoke("--max-gang-gpus", "8", "--jobs", "100", "--no-journal", "--out", str(tmp_path))
    assert result.exit_code == 0
    assert fake.bundled == [{"seed": 7, "jobs": 100}]
    [generated] = fake.generate
    assert generated["shape"].max_gang_gpus == 8
    sources = fake.simulate[0]["scenario"].sources
    assert sources["workload"] == "generated: seed=7, jobs=100, max-gang-gpus=8"
    assert sources["cluster"] == "bundled"


def test_a_policy_file_by_path(fake: Fake, tmp_path: Path) -> None:
    policy = tmp_path / "mine.yaml"
    policy.write_text("name: mine\ncycleSeconds: 30\n")
    result = invoke("--policy", str(policy), "--no-journal", "--out", str(tmp_path / "r"))
    assert result.exit_code == 0
    [call] = fake.simulate
    assert call["policy"].cycle_seconds == 30
    assert call["policy_file"] == str(policy)


def test_decisions_go_to_the_journal_under_the_run_id(fake: Fake, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    fake.entries_per_policy = 2500  # past a flush
    result = invoke("--db", url, "--out", str(tmp_path / "r"), "--compare", "gang-fit")
    assert result.exit_code == 0, result.output
    hint = result.stdout.splitlines()[-1].strip()
    match = re.fullmatch(
        rf"queue-controller history --db {re.escape(url)} --source (simulation:[-0-9a-f]+)", hint
    )
    assert match, hint
    source = match.group(1)
    assert f"journal: 2,500 entries in {url} under {source}:<policy>" in result.stdout
    entries = read_history(url, source=source, limit=10_000)
    assert len(entries) == 2500
    assert {e.source for e in entries} == {f"{source}:gang-fit"}
    shown = CliRunner().invoke(cli, ["history", "--db", url, "--source", source, "--limit", "3"])
    assert shown.exit_code == 0
    assert shown.stdout.count("team-a/job-") == 3


def test_journal_url_comes_from_the_environment(
    fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("QC_JOURNAL_URL", url)
    result = invoke("--out", str(tmp_path / "r"), "--compare", "quota-only")
    assert result.exit_code == 0, result.output
    assert len(read_history(url)) == fake.entries_per_policy


def test_a_bad_journal_url(
    fake: Fake,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = error_of(["--db", "nonsense", "--out", str(tmp_path)], monkeypatch, capsys)
    assert err.startswith("error: --db: 'nonsense' is not a database URL")
    assert fake.simulate == []


def test_an_unwritable_out_folder(
    fake: Fake,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (blocker,) = _touch(tmp_path, "taken")
    out = f"{blocker}/report"
    err = error_of(["--no-journal", "--out", out], monkeypatch, capsys)
    assert err.startswith(f"error: {out}: --out: cannot write the report")


class _Terminal:
    """A standard error that says it is a terminal and keeps what is written to it."""

    def __init__(self) -> None:
        self.text = ""

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def test_progress_bars_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with _progress(["gang-fit", "per-pod"]) as update:
        assert update is not None
        update("gang-fit", 0.5)
        update("per-pod", 2.0)  # clamped
        update("unknown", 0.5)  # ignored
    monkeypatch.setattr(sys, "stderr", types.SimpleNamespace(isatty=lambda: False))
    with _progress(["gang-fit"]) as update:
        assert update is None


# -- the real engine -----------------------------------------------------------------


def test_policies_match_the_engine() -> None:
    engine = pytest.importorskip("queue_controller.sim.engine.compare")
    assert engine.POLICIES == POLICIES
    assert engine.PREEMPTION_MODES == PREEMPTION_MODES


def test_preemption_is_passed_on_and_described(fake: Fake) -> None:
    result = invoke("--preemption", "compare")
    assert result.exit_code == 0, result.output
    assert fake.simulate[-1]["preemption"] == "compare"
    assert invoke("--jobs", "10").exit_code == 0
    assert fake.simulate[-1]["preemption"] == "as-configured"
    helped = invoke("--help")
    assert "--preemption [as-configured|off|on|compare]" in helped.output
    assert "terminationGracePeriodSeconds" in helped.output
    assert invoke("--preemption", "maybe").exit_code == 2


def test_a_small_bundled_run_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "report"
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    result = invoke("--jobs", "40", "--db", url, "--out", str(out), "-o", "json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert list(payload["policies"]) == list(POLICIES)
    for metrics in payload["policies"].values():
        assert metrics["jobs_submitted"] == 40
        assert 0 <= metrics["gpu_allocation"] <= 1
        assert list(metrics["queue_delay_seconds"]) == ["all", "1", "2-8", "9-32", "33+"]
    assert payload["jobs"] == 40
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    source = re.search(r"--source (simulation:\S+)", result.stderr)
    assert source, result.stderr
    entries = read_history(url, source=source.group(1), limit=100_000)
    assert entries
    assert {e.source.rsplit(":", 1)[1] for e in entries} <= set(POLICIES)
