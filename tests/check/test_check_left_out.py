"""``check`` over objects it cannot read: named, left out, and never "all invariants hold".

What is left out was not checked, so ``check`` exits with a code of its own (3),
apart from "an invariant is broken" (1) and from a bad option or an unreadable
dump (2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from queue_controller.cli import cli
from queue_controller.cli.check import EXIT_LEFT_OUT, EXIT_VIOLATED
from tests.check.test_invariants import find, healthy, node, team
from tests.plan.harness import run_main
from tests.unit.test_lifecycle import iso

Obj = dict[str, Any]


def _check(tmp_path: Path, objects: list[Obj], *args: str) -> Result:
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return CliRunner().invoke(
        cli, ["check", "-f", str(path), "--now", iso(0), *args], catch_exceptions=False
    )


def _bad_quota() -> Obj:
    quota = team(4)
    quota["spec"]["resources"]["nvidia.com/gpu"]["nominal"] = -1
    return quota


def _with(objects: list[Obj], replaced: Obj) -> list[Obj]:
    kind, name = replaced["kind"], replaced["metadata"]["name"]
    return [replaced if o is find(objects, kind, name) else o for o in objects]


def test_an_unreadable_team_quota_is_named_and_exits_3(tmp_path: Path) -> None:
    result = _check(tmp_path, _with(healthy(), _bad_quota()))
    assert result.exit_code == EXIT_LEFT_OUT == 3, result.output
    assert "all invariants hold" not in result.output
    text = " ".join(result.output.split())
    assert "left out: " in text
    assert "(TeamQuota/team): spec.resources.nvidia.com/gpu.nominal: -1 is negative" in text
    assert "no violation among the objects read, but 1 left out and not checked" in text


def test_an_unreadable_node_in_json(tmp_path: Path) -> None:
    bad = node("n2")
    bad["status"]["allocatable"]["nvidia.com/gpu"] = "4x"
    result = _check(tmp_path, _with(healthy(), bad), "-o", "json")
    assert result.exit_code == EXIT_LEFT_OUT, result.output
    payload = json.loads(result.output)
    assert payload["violations"] == []
    [left] = payload["left_out"]
    assert left["object"].endswith("(Node/n2)")
    assert left["field"] == "status.allocatable.nvidia.com/gpu"
    assert "'4x' is not a quantity" in left["detail"]


def test_the_same_object_twice_is_left_out(tmp_path: Path) -> None:
    objects = healthy()
    result = _check(tmp_path, [*objects, node("n1", gpus=64)], "-o", "json")
    assert result.exit_code == EXIT_LEFT_OUT, result.output
    [left] = json.loads(result.output)["left_out"]
    assert left["object"].endswith("(Node/n1)")
    assert "the same Node also appears at" in left["detail"]


def test_a_violation_wins_over_what_was_left_out(tmp_path: Path) -> None:
    objects = _with(healthy(), _bad_quota())
    find(objects, "Pod", "train-1")["spec"]["nodeName"] = "n2"
    result = _check(tmp_path, objects)
    assert result.exit_code == EXIT_VIOLATED, result.output
    text = " ".join(result.output.split())
    assert "MemberOffPlan" in text
    assert "1 violations, but 1 left out and not checked" in text


def test_a_watch_that_left_something_out_exits_3_and_says_it_once(tmp_path: Path) -> None:
    args = ("--watch", "--for", "0.5s", "--interval", "0.1s", "-o", "json")
    result = _check(tmp_path, _with(healthy(), _bad_quota()), *args)
    assert result.exit_code == EXIT_LEFT_OUT, result.output
    events = [json.loads(line) for line in result.output.splitlines()]
    assert [e["event"] for e in events] == ["left out", "summary"]
    assert events[0]["field"] == "spec.resources.nvidia.com/gpu.nominal"
    assert events[-1]["looks"] >= 2
    assert len(events[-1]["left_out"]) == 1


def test_a_key_written_twice_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dump.yaml"
    path.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: a\n  name: b\n")
    run = run_main(["check", "-f", str(path)], monkeypatch, capsys)
    assert run.code == 2
    assert run.stderr == (
        f"error: {path} line 5, column 3: not valid YAML: duplicate key 'name' (first at line 4)\n"
    )


def test_help_lists_every_exit_code() -> None:
    text = CliRunner().invoke(cli, ["check", "--help"]).output
    for line in ("0  every invariant holds", "1  an invariant is broken", "2  a bad option", "3  "):
        assert line in text, line
