"""Journal retention as an operator sets it: a flag, a ``QC_*`` variable, a chart value."""

from __future__ import annotations

from datetime import timedelta

import pytest
from click.testing import CliRunner

from queue_controller.cli import cli
from queue_controller.controller import settings as settings_module
from queue_controller.errors import InputError
from queue_controller.journal.retention import Retention
from tests.deploy.chart import env, render


def test_the_defaults_bound_the_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("QC_JOURNAL_RETENTION_DAYS", "QC_JOURNAL_MAX_ROWS"):
        monkeypatch.delenv(name, raising=False)
    settings = settings_module.load()
    retention = Retention.of(
        max_age_days=settings.journal_retention_days, max_rows=settings.journal_max_rows
    )
    assert retention.max_age == timedelta(days=30)
    assert retention.max_rows == 1_000_000


def test_flags_over_the_environment_and_zero_turns_a_bound_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QC_JOURNAL_MAX_ROWS", "0")
    monkeypatch.setenv("QC_JOURNAL_RETENTION_DAYS", "7")
    settings = settings_module.load(journal_retention_days=0.5)
    retention = Retention.of(
        max_age_days=settings.journal_retention_days, max_rows=settings.journal_max_rows
    )
    assert (retention.max_age, retention.max_rows) == (timedelta(hours=12), None)


@pytest.mark.parametrize("value", ["-1", "inf", "nan", "1e9"])
def test_a_bad_age_names_the_setting(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("QC_JOURNAL_RETENTION_DAYS", value)
    with pytest.raises(InputError, match="QC_JOURNAL_RETENTION_DAYS"):
        settings_module.load()


def test_run_has_the_flags() -> None:
    text = CliRunner().invoke(cli, ["run", "--help"]).output
    assert "--journal-retention-days" in text
    assert "--journal-max-rows" in text
    assert "[QC_JOURNAL_MAX_ROWS]" in " ".join(text.split())


def test_the_chart_passes_retention_to_the_controller() -> None:
    values = {name: v.get("value") for name, v in env(render()).items()}
    assert values["QC_JOURNAL_RETENTION_DAYS"] == "30"
    assert values["QC_JOURNAL_MAX_ROWS"] == "1000000"  # not 1e+06, which Settings refuses
    changed = env(render("journal.retentionDays=7", "journal.maxRows=0"))
    assert changed["QC_JOURNAL_RETENTION_DAYS"]["value"] == "7"
    assert changed["QC_JOURNAL_MAX_ROWS"]["value"] == "0"
