"""``plan --eta``, and ``eta``'s input errors: estimates over a dump, one line for bad input."""

from __future__ import annotations

import json

import pytest

from queue_controller.cli import cli
from tests.plan.harness import NOW, invoke, run_main


def test_plan_eta_json_gives_every_pending_gang_an_estimate_or_a_reason() -> None:
    result = invoke("plan", "-o", "json", "--eta", "--now", NOW)
    assert result.exit_code == 0, result.stderr
    payload = json.loads(result.stdout)
    assert list(payload) == ["decisions", "left_out", "etas"]
    etas = {e["workload"]: e for e in payload["etas"]}
    assert set(etas) == {d["workload"] for d in payload["decisions"]}
    # Admitted by this very cycle: it starts now.
    admitted = [d["workload"] for d in payload["decisions"] if d["decision"] == "Admit"]
    for name in admitted:
        assert etas[name]["reason"] == "Estimated"
        assert etas[name]["inSeconds"] == 0
    # More GPUs than its quota could ever lend it.
    assert etas["research/pretrain-70b"]["reason"] == "BlockedByQuota"
    assert etas["research/no-limits"]["reason"] == "Invalid"
    assert etas["research/typo"]["reason"] == "Blocked"
    assert etas["research/typo"]["waitsFor"]["reason"] == "QueueNotFound"
    # The bundled example's running prod/train-resnet declares an hour (and has no
    # admittedAt: it is taken as started now), and train-bert needs its GPUs.
    bert = etas["prod/train-bert"]
    assert bert["reason"] == "Estimated"
    assert bert["inSeconds"] == 3600
    assert bert["after"] == ["prod/train-resnet"]


def test_plan_eta_table_follows_the_decisions() -> None:
    result = invoke("plan", "--eta", "--now", NOW)
    assert result.exit_code == 0, result.stderr
    decisions, _, etas = result.stdout.partition("\nNAME ")
    assert "WORKLOAD" in decisions
    assert "ETA" in etas
    assert "WAITS FOR" in etas
    assert "unknown (BlockedByQuota)" in etas
    assert "pending gangs:" in etas.splitlines()[-1]


def test_plan_without_eta_is_unchanged() -> None:
    result = invoke("plan", "-o", "json", "--now", NOW)
    assert list(json.loads(result.stdout)) == ["decisions", "left_out"]


def test_a_bad_horizon_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_main(["plan", "--eta", "--horizon", "soon"], monkeypatch, capsys)
    assert run.code == 2
    assert run.stderr.strip().count("\n") == 0
    assert "--horizon" in run.stderr


def test_eta_needs_exactly_one_selection() -> None:
    assert invoke("eta", "--help").exit_code == 0
    for args in ([], ["ns/a", "-A"], ["-n", "x", "-A"]):
        result = CliRunnerLike.invoke(args)
        assert result.exit_code == 2, args
        assert "exactly one of" in result.stderr


def test_eta_refuses_a_name_without_its_namespace_before_reading_the_cluster(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = run_main(["eta", "just-a-name", "-o", "json"], monkeypatch, capsys)
    assert run.code == 2
    assert "NS/NAME" in run.stderr
    assert "NAMESPACE/NAME" in run.stderr


class CliRunnerLike:
    @staticmethod
    def invoke(args: list[str]):  # type: ignore[no-untyped-def]
        from click.testing import CliRunner

        return CliRunner().invoke(cli, ["eta", *args])
