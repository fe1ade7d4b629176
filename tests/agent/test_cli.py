"""``queue-controller node-agent``: --once, --help and its settings."""

from __future__ import annotations

import json
from typing import Any

import pynvml
import pytest
from click.testing import CliRunner

from queue_controller.agent import settings as agent_settings
from queue_controller.cli import cli
from queue_controller.errors import InputError
from queue_controller.gpuhealth.tracker import APPLICATION_XIDS
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml, mig


def once(fake: FakeNvml, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["node-agent", "--once", *args], obj={"nvml": fake})
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@pytest.fixture(autouse=True)
def _no_agent_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith(agent_settings.PREFIX) or name == "NODE_NAME":
            monkeypatch.delenv(name)


def test_once_prints_the_inventory_and_the_faults() -> None:
    gpus = [FakeGpu() for _ in range(8)]
    gpus[5] = FakeGpu(mig=[mig("3g.40gb"), mig("3g.40gb")])
    gpus[6].temperature_c = 97
    fake = FakeNvml(gpus)
    fake.lose(2)
    document = once(fake)
    assert document["nvml"] == "available"
    assert document["driverVersion"] == "550.54.15"
    assert len(document["gpus"]) == 8
    assert document["gpus"][5]["mig"]["enabled"] is True
    assert [m["profile"] for m in document["gpus"][5]["mig"]["instances"]] == ["3g.40gb"] * 2
    assert document["gpus"][0]["healthy"] is True
    assert document["gpus"][0]["temperatureC"] == 40
    assert document["gpus"][0]["powerWatts"] == 300
    assert [(u["index"], u["reason"]) for u in document["unhealthy"]] == [
        (2, "GPULost"),
        (6, "TemperatureExceeded"),
    ]
    assert document["gpus"][2]["healthy"] is False
    assert document["limits"]["ignoredXids"] == sorted(APPLICATION_XIDS)
    assert not fake.initialised  # shut down again


def test_once_takes_the_limits_from_the_options() -> None:
    gpus = [FakeGpu(temperature_c=80)]
    document = once(FakeNvml(gpus), "--max-temperature", "75", "--ignored-xids", "none")
    assert [u["reason"] for u in document["unhealthy"]] == ["TemperatureExceeded"]
    assert document["limits"]["ignoredXids"] == []


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED]
)
def test_once_without_a_driver_says_so_and_exits_0(code: int) -> None:
    document = once(FakeNvml(init_error=code))
    assert document["nvml"] == "unavailable"
    assert document["reason"]


def test_help_names_every_setting() -> None:
    result = CliRunner().invoke(cli, ["node-agent", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for name in agent_settings.AgentSettings.model_fields:
        assert f"QC_AGENT_{name.upper()}" in text, name
    assert "--once" in text
    assert "NODE_NAME" in text


def test_the_service_needs_a_node_name() -> None:
    result = CliRunner().invoke(cli, ["node-agent"], obj={"nvml": FakeNvml(1)})
    assert isinstance(result.exception, InputError)
    assert "node_name (NODE_NAME)" in str(result.exception)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-7")
    monkeypatch.setenv("QC_AGENT_IGNORED_XIDS", "13, 31")
    monkeypatch.setenv("QC_AGENT_TAINT", "true")
    monkeypatch.setenv("QC_AGENT_MAX_TEMPERATURE_C", "0")
    loaded = agent_settings.load(poll_seconds=5.0)
    assert loaded.node_name == "gpu-7"
    assert loaded.ignored_xids == frozenset({13, 31})
    assert loaded.taint is True
    assert loaded.poll_seconds == 5.0
    assert loaded.limits.max_temperature_c == 0
    assert loaded.metrics_port == 9401
    assert agent_settings.load().clear_seconds == 600


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QC_AGENT_NODE_NAME", "from-env")
    assert agent_settings.load(node_name="from-flag").node_name == "from-flag"


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"QC_AGENT_POLL": "5"}, "QC_AGENT_POLL"),
        ({"QC_AGENT_POLL_SECONDS": "0"}, "poll_seconds (QC_AGENT_POLL_SECONDS)"),
        ({"QC_AGENT_IGNORED_XIDS": "13,x"}, "ignored_xids (QC_AGENT_IGNORED_XIDS)"),
        ({"QC_AGENT_KUBECONFIG": "/no/such/file"}, "settings"),
    ],
)
def test_bad_settings_name_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], field: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(InputError) as caught:
        agent_settings.load()
    assert field in str(caught.value)
    assert "\n" not in str(caught.value)
