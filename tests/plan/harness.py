"""Ways to run ``queue-controller plan`` end to end, shared by the plan tests.

* :func:`invoke` runs the click command in-process (fast; most tests).
* :func:`run_main` runs the real entry point ``main()`` in-process, so the
  error path that maps :class:`InputError` to exit code 2 is the real one.
* :func:`run_script` runs the installed console script as a subprocess.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from queue_controller.cli import cli, main

DUMPS = Path(__file__).parent / "dumps"
# Every dump is planned at this moment unless a test says otherwise, so that
# requeue backoff (the only use of the clock) is deterministic.
NOW = "2026-12-01T00:00:00Z"


def dump(name: str) -> str:
    path = DUMPS / name
    assert path.is_file(), path
    return str(path)


def invoke(*args: str, stdin: str | None = None) -> Result:
    """``queue-controller ARGS`` in-process; exceptions propagate (a crash fails the test)."""
    return CliRunner().invoke(cli, list(args), input=stdin, catch_exceptions=False)


def plan_json(
    *files: str, now: str | None = NOW, extra: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Decisions of ``plan -o json`` over dumps (names under dumps/ or paths)."""
    args = ["plan", "-o", "json"]
    for name in files:
        args += ["-f", name if name == "-" or Path(name).is_absolute() else dump(name)]
    if now is not None:
        args += ["--now", now]
    result = invoke(*args, *extra)
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    payload = json.loads(result.stdout)
    assert list(payload) == ["decisions", "left_out"]
    assert payload["left_out"] == []  # the dumps here are whole: nothing may go unread
    decisions: list[dict[str, Any]] = payload["decisions"]
    return decisions


def by_workload(decisions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {d["workload"]: d for d in decisions}
    assert len(out) == len(decisions), "a workload was decided twice"
    return out


def outcome(decision: dict[str, Any]) -> tuple[str, str]:
    return decision["decision"], decision["reason"]


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


def run_main(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *,
    stdin: str | None = None,
) -> Run:
    """The real ``main()`` with ``sys.argv = ["queue-controller", *argv]``."""
    monkeypatch.setattr(sys, "argv", ["queue-controller", *argv])
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()  # drop anything printed before
    code = 0
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    captured = capsys.readouterr()
    return Run(code, captured.out, captured.err)


def console_script() -> str:
    """The installed ``queue-controller`` next to this interpreter (the venv's bin/)."""
    beside = Path(sys.executable).with_name("queue-controller")
    if beside.is_file():
        return str(beside)
    found = shutil.which("queue-controller")
    assert found, "the queue-controller console script is not installed"
    return found


def run_script(
    *args: str, stdin: str | bytes | None = None, env: dict[str, str] | None = None
) -> Run:
    """The installed console script as a subprocess (stdin as text or as raw bytes)."""
    done = subprocess.run(
        [console_script(), *args],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return Run(done.returncode, done.stdout.decode(), done.stderr.decode())
