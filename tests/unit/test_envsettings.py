"""Settings from flags over environment variables: one line naming the setting when wrong."""

from __future__ import annotations

import pytest

from queue_controller.agent import settings as agent_settings
from queue_controller.controller import settings as controller_settings
from queue_controller.errors import InputError


def test_a_flag_wins_over_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QC_TICK_SECONDS", "9")
    assert controller_settings.load().tick_seconds == 9
    assert controller_settings.load(tick_seconds=2.5).tick_seconds == 2.5


def test_an_unknown_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QC_DCGM_URL", "http://dcgm:9400/metrics")  # the setting is QC_DCGM_URLS
    with pytest.raises(InputError, match=r"^settings: QC_DCGM_URL: not a setting"):
        controller_settings.load()


def test_a_bad_value_names_the_setting_and_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QC_DCGM_URLS", "dcgm:9400/metrics")
    with pytest.raises(InputError, match=r"dcgm_urls \(QC_DCGM_URLS\): .*not an http\(s\) URL"):
        controller_settings.load()
    monkeypatch.delenv("QC_DCGM_URLS")
    with pytest.raises(InputError, match=r"idle_threshold \(QC_IDLE_THRESHOLD\)"):
        controller_settings.load(idle_threshold=2)


def test_the_agent_uses_its_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QC_AGENT_CLEAR_SECONDS", "-1")
    with pytest.raises(InputError, match=r"clear_seconds \(QC_AGENT_CLEAR_SECONDS\)"):
        agent_settings.load(node_name="n1")
    monkeypatch.setenv("QC_AGENT_CLEARSECONDS", "5")
    with pytest.raises(InputError, match="QC_AGENT_CLEARSECONDS: not a setting"):
        agent_settings.load(node_name="n1")
