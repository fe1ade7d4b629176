"""``queue-controller history``: in-process through click, through the real ``main()``,
and as the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from queue_controller.cli import cli
from queue_controller.cli.history import parse_since
from queue_controller.cli.options import DEFAULT_URL as SHOWN_DEFAULT_URL
from queue_controller.journal import DEFAULT_URL, Entry, Journal, JournalEvent
from tests.journal.conftest import dead_port
from tests.plan.harness import console_script, run_main

NOW = datetime.now(tz=UTC).replace(microsecond=0)


def _entries() -> list[Entry]:
    def at(minutes_ago: int) -> datetime:
        return NOW - timedelta(minutes=minutes_ago)

    return [
        Entry(
            at(180),
            "prod",
            "train-bert",
            "batch",
            JournalEvent.PENDING,
            "NoNodeFit",
            "0 of 2 members fit at once; binding constraint: Insufficient nvidia.com/gpu",
            uid="u1",
        ),
        Entry(
            at(120),
            "prod",
            "train-bert",
            "batch",
            JournalEvent.ADMITTED,
            "Admitted",
            "",
            uid="u1",
            placement={"h100-1": 4, "h100-2": 4},
        ),
        Entry(
            at(45),
            "research",
            "sweep-lr",
            "training",
            JournalEvent.EVICTED,
            "PodsReadyTimeout",
            "2 of 3 pods ready after 300s",
        ),
        Entry(
            at(44),
            "research",
            "sweep-lr",
            "training",
            JournalEvent.REQUEUED,
            "Backoff",
            "requeued, due again in 60s",
            requeue_count=1,
        ),
        Entry(
            at(10),
            "prod",
            "eval-bert",
            "batch",
            JournalEvent.FINISHED,
            "Succeeded",
            "",
            source="simulation:run-1",
        ),
    ]


def write_journal(url: str) -> None:
    journal = Journal(url, flush_interval=0.01)
    journal.start()
    for item in _entries():
        journal.record(item)
    journal.close()
    assert (journal.written, journal.dropped) == (5, 0)


@pytest.fixture(scope="module")
def journal_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("history") / "journal.db"
    write_journal(f"sqlite:///{path}")
    return path


@pytest.fixture
def url(journal_file: Path) -> str:
    return f"sqlite:///{journal_file}"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["history", *args], env=env, catch_exceptions=False)


def entries_json(*args: str) -> list[dict[str, Any]]:
    result = invoke(*args, "-o", "json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert list(payload) == ["entries"]
    entries: list[dict[str, Any]] = payload["entries"]
    return entries


def workloads(*args: str) -> list[tuple[str, str]]:
    return [(f"{e['namespace']}/{e['name']}", e["event"]) for e in entries_json(*args)]


def test_table(url: str) -> None:
    result = invoke("--db", url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # One entry comes from a simulation, so each line says where it came from.
    assert lines[0].split() == [
        "TIME",
        "SOURCE",
        "WORKLOAD",
        "QUEUE",
        "EVENT",
        "REASON",
        "DETAIL",
    ]
    assert len(lines) == 6
    assert "controller" in lines[1]
    assert any("simulation:run-1" in line for line in lines[1:])
    assert "prod/train-bert" in lines[1]
    assert "NoNodeFit" in lines[1]
    assert "Insufficient nvidia.com/gpu" in lines[1]  # the message, whole, on its line
    # Admitted shows where the gang went.
    assert "Admitted" in lines[2]
    assert lines[2].rstrip().endswith("h100-1: 4, h100-2: 4")
    assert NOW.strftime("%Y-%m-%d %H:%M:%SZ") not in result.stdout  # all are earlier
    assert (NOW - timedelta(minutes=10)).strftime("%Y-%m-%d %H:%M:%SZ") in lines[5]


def test_one_source_needs_no_source_column(url: str) -> None:
    result = invoke("--db", url, "--source", "controller")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TIME", "WORKLOAD", "QUEUE", "EVENT", "REASON", "DETAIL"]
    assert len(lines) == 5
    assert "simulation" not in result.stdout


def test_json(url: str) -> None:
    entries = entries_json("--db", url)
    assert [e["event"] for e in entries] == [
        "Pending",
        "Admitted",
        "Evicted",
        "Requeued",
        "Finished",
    ]
    admitted = entries[1]
    assert admitted == {
        "at": (NOW - timedelta(minutes=120)).isoformat().replace("+00:00", "Z"),
        "namespace": "prod",
        "name": "train-bert",
        "kind": "Job",
        "uid": "u1",
        "queue": "batch",
        "event": "Admitted",
        "reason": "Admitted",
        "message": "",
        "placement": {"h100-1": 4, "h100-2": 4},
        "requeueCount": 0,
        "source": "controller",
    }
    assert entries[3]["requeueCount"] == 1
    assert entries[4]["source"] == "simulation:run-1"


def test_filters(url: str) -> None:
    assert workloads("--db", url, "--job", "prod/train-bert") == [
        ("prod/train-bert", "Pending"),
        ("prod/train-bert", "Admitted"),
    ]
    assert workloads("--db", url, "--job", "prod/nothing") == []
    assert workloads("--db", url, "-n", "research") == [
        ("research/sweep-lr", "Evicted"),
        ("research/sweep-lr", "Requeued"),
    ]
    assert workloads("--db", url, "--since", "1h") == [
        ("research/sweep-lr", "Evicted"),
        ("research/sweep-lr", "Requeued"),
        ("prod/eval-bert", "Finished"),
    ]
    assert workloads("--db", url, "--since", "30m") == [("prod/eval-bert", "Finished")]
    assert len(workloads("--db", url, "--since", "2h30m")) == 4
    rfc3339 = (NOW - timedelta(minutes=44)).isoformat().replace("+00:00", "Z")
    assert len(workloads("--db", url, "--since", rfc3339)) == 2
    assert workloads("--db", url, "--source", "simulation:run-1") == [
        ("prod/eval-bert", "Finished")
    ]
    assert workloads("--db", url, "--limit", "2") == [
        ("research/sweep-lr", "Requeued"),
        ("prod/eval-bert", "Finished"),
    ]
    assert workloads(
        "--db", url, "--job", "prod/train-bert", "--namespace", "prod", "--limit", "1"
    ) == [("prod/train-bert", "Admitted")]


def test_nothing_matches(url: str) -> None:
    result = invoke("--db", url, "--job", "prod/nothing")
    assert result.exit_code == 0
    assert result.stdout == "no journal entries match\n"


def test_the_url_comes_from_the_environment(url: str) -> None:
    result = invoke("-o", "json", env={"QC_JOURNAL_URL": url})
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["entries"]) == 5


def test_the_default_is_a_file_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("QC_JOURNAL_URL", raising=False)
    run = run_main(["history"], monkeypatch, capsys)
    assert (run.code, run.stdout) == (2, "")
    assert run.stderr == "error: --db: no journal at queue-controller-journal.db\n"
    assert list(tmp_path.iterdir()) == []  # looking did not create one
    write_journal("sqlite:///queue-controller-journal.db")
    run = run_main(["history", "-o", "json"], monkeypatch, capsys)
    assert run.code == 0, run.stderr
    assert len(json.loads(run.stdout)["entries"]) == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--db", "mysql+pymysql://u@h/db"], "error: --db: unsupported database 'mysql+pymysql'"),
        (["--db", "not a url"], "error: --db: 'not a url' is not a database URL"),
        (["--db", "postgresql+psycopg://h:port/db"], "error: --db: "),
        (["--db", "sqlite:///{tmp}/missing.db"], "error: --db: no journal at {tmp}/missing.db"),
        (["--since", "yesterday"], "error: --since: 'yesterday' is neither a duration"),
        (["--since", "1w"], "error: --since: '1w' is neither a duration"),
        (["--job", "train-bert"], "error: --job: 'train-bert': expected NAMESPACE/NAME"),
        (["--job", "prod/"], "error: --job: 'prod/': expected NAMESPACE/NAME"),
        (["--job", "a/b/c"], "error: --job: 'a/b/c': expected NAMESPACE/NAME"),
        (["--job", "prod/x", "-n", "research"], "error: --namespace: 'research' contradicts"),
    ],
)
def test_user_errors_end_in_one_line_and_exit_2(
    args: list[str],
    message: str,
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["history", "--db", url, *[a.replace("{tmp}", str(tmp_path)) for a in args]]
    run = run_main(argv, monkeypatch, capsys)
    assert run.code == 2
    assert run.stdout == ""
    assert run.stderr.startswith(message.replace("{tmp}", str(tmp_path)))
    assert run.stderr.count("\n") == 1
    assert not (tmp_path / "missing.db").exists()


def test_a_server_that_is_down_is_one_line_without_the_password(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"postgresql+psycopg://journal:s3cret@127.0.0.1:{dead_port()}/journal"
    run = run_main(["history", "--db", db], monkeypatch, capsys)
    assert run.code == 1
    assert run.stderr.startswith(
        "error: cannot read the journal at postgresql+psycopg://journal:***@"
    )
    assert "s3cret" not in run.stderr
    assert run.stderr.count("\n") == 1


def test_the_default_url_is_the_journals() -> None:
    assert SHOWN_DEFAULT_URL == DEFAULT_URL


def test_parse_since() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_since("45s", now=now) == now - timedelta(seconds=45)
    assert parse_since("1h30m", now=now) == now - timedelta(hours=1, minutes=30)
    assert parse_since("2d", now=now) == now - timedelta(days=2)
    assert parse_since("2026-12-01T10:00:00Z") == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert parse_since("2026-12-01T10:00:00+02:00") == datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert parse_since("2026-12-01T10:00:00") == datetime(2026, 12, 1, 10, tzinfo=UTC)


@pytest.mark.postgres
def test_history_on_postgresql(postgres_db: str) -> None:
    write_journal(postgres_db)
    assert workloads("--db", postgres_db, "--job", "research/sweep-lr") == [
        ("research/sweep-lr", "Evicted"),
        ("research/sweep-lr", "Requeued"),
    ]
    result = invoke("--db", postgres_db, "--since", "1h")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 4


@dataclass(frozen=True)
class Done:
    code: int
    stdout: str
    stderr: str


def test_the_console_script(url: str, tmp_path: Path) -> None:
    """The installed entry point, as a user runs it; the runs go side by side."""
    runs = {
        "table": ["--db", url, "--job", "prod/train-bert"],
        "json": ["--db", url, "-o", "json", "--since", "1h"],
        "bad db": ["--db", "mongodb://h/db"],
        "missing": ["--db", f"sqlite:///{tmp_path}/missing.db"],
        "bad since": ["--db", url, "--since", "soon"],
        "bad job": ["--db", url, "--job", "train-bert"],
    }
    env = {key: value for key, value in os.environ.items() if key != "QC_JOURNAL_URL"}
    started = {
        label: subprocess.Popen(
            [console_script(), "history", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for label, args in runs.items()
    }
    done = {}
    for label, process in started.items():
        stdout, stderr = process.communicate(timeout=60)
        done[label] = Done(process.returncode, stdout, stderr)

    table = done["table"]
    assert (table.code, table.stderr) == (0, "")
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["TIME", "WORKLOAD", "QUEUE", "EVENT", "REASON", "DETAIL"]
    assert [line.split()[2] for line in lines[1:]] == ["prod/train-bert", "prod/train-bert"]
    assert lines[2].rstrip().endswith("h100-1: 4, h100-2: 4")

    listed = done["json"]
    assert (listed.code, listed.stderr) == (0, "")
    assert [e["reason"] for e in json.loads(listed.stdout)["entries"]] == [
        "PodsReadyTimeout",
        "Backoff",
        "Succeeded",
    ]

    for label, start in [
        ("bad db", "error: --db: unsupported database 'mongodb'"),
        ("missing", f"error: --db: no journal at {tmp_path}/missing.db"),
        ("bad since", "error: --since: 'soon' is neither a duration"),
        ("bad job", "error: --job: 'train-bert': expected NAMESPACE/NAME"),
    ]:
        run = done[label]
        assert (run.code, run.stdout) == (2, ""), (label, run)
        assert run.stderr.startswith(start), (label, run.stderr)
        assert run.stderr.count("\n") == 1, (label, run.stderr)
    assert not (tmp_path / "missing.db").exists()
    assert list(tmp_path.iterdir()) == []
