"""Policy presets: every file in policies/ is valid, and a bad file says where it is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_controller.core import Ordering
from queue_controller.errors import InputError
from queue_controller.sim.scenario import policy

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "policies").glob("*.yaml"))


def test_the_documented_presets_are_there() -> None:
    assert {p.stem for p in PRESETS} == {
        "default",
        "short-timeout",
        "patient",
        "strict-fifo",
        "bin-packing",
    }


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_every_preset_loads_and_is_named_after_its_file(path: Path) -> None:
    loaded = policy.load(path)
    assert loaded.name == path.stem  # `--policy NAME` finds a preset by its file name
    assert loaded.description
    assert policy.resolve(path.stem) == path
    # Each file says, in a comment, what question it answers.
    assert "Question it answers" in path.read_text()


def test_every_preset_is_described_in_the_readme() -> None:
    readme = (ROOT / "policies" / "README.md").read_text()
    for path in PRESETS:
        assert f"[`{path.stem}`]({path.name})" in readme


def test_default_leaves_everything_to_the_queues() -> None:
    loaded = policy.load(ROOT / "policies" / "default.yaml")
    assert loaded.cycle_seconds == 10
    assert loaded.pods_ready_timeout_seconds is None
    assert loaded.ordering is None
    assert loaded.requeue == policy.Requeue()
    assert loaded.scheduler_scoring == "LeastAllocated"
    assert policy.DEFAULT_TIMEOUT_SECONDS == 300  # the controller's --pods-ready-timeout default


def test_presets_set_what_their_names_promise() -> None:
    by_name = {p.stem: policy.load(p) for p in PRESETS}
    short, patient = by_name["short-timeout"], by_name["patient"]
    assert short.pods_ready_timeout_seconds == 120
    assert short.requeue.backoff_base_seconds is not None
    assert short.requeue.backoff_base_seconds < 60  # faster than a Queue's default
    assert patient.pods_ready_timeout_seconds == 1800
    assert patient.requeue.backoff_limit == 5
    assert by_name["strict-fifo"].ordering is Ordering.STRICT_FIFO
    assert by_name["bin-packing"].scheduler_scoring == "MostAllocated"
    # Only the preset about ordering touches ordering, only bin-packing the scoring.
    assert [n for n, p in by_name.items() if p.ordering is not None] == ["strict-fifo"]
    assert [n for n, p in by_name.items() if p.scheduler_scoring != "LeastAllocated"] == [
        "bin-packing"
    ]


def test_unknown_preset_name_lists_the_presets() -> None:
    with pytest.raises(InputError) as caught:
        policy.resolve("no-such-preset")
    assert caught.value.where == "no-such-preset"
    assert "short-timeout" in caught.value.detail


@pytest.mark.parametrize(
    ("text", "field", "detail"),
    [
        ("name: x\ncycelSeconds: 5\n", "cycelSeconds", "unknown key"),
        ("name: x\nrequeue: {backoffLimt: 3}\n", "requeue.backoffLimt", "backoffLimit"),
        (
            "name: x\npodsReadyTimeoutSeconds: -5\n",
            "podsReadyTimeoutSeconds",
            "greater than or equal to 1",
        ),
        (
            "name: x\npodsReadyTimeoutSeconds: 0\n",
            "podsReadyTimeoutSeconds",
            "greater than or equal to 1",
        ),
        (
            "name: x\nrequeue: {backoffBaseSeconds: -1}\n",
            "requeue.backoffBaseSeconds",
            "greater than or equal to 0",
        ),
        ("name: x\nbindDelaySeconds: {min: 10, max: 2}\n", "bindDelaySeconds", "below min"),
        (
            "name: x\nstartDelaySeconds: {min: -1, max: 2}\n",
            "startDelaySeconds.min",
            "greater than or equal to 0",
        ),
        (
            "name: x\nrequeue: {backoffBaseSeconds: 600, backoffMaxSeconds: 60}\n",
            "requeue",
            "exceeds backoffMaxSeconds",
        ),
        ("name: x\nordering: Random\n", "ordering", "StrictFIFO"),
        ("name: x\nschedulerScoring: Balanced\n", "schedulerScoring", "MostAllocated"),
        ("name: Has_Caps\n", "name", "pattern"),
        ("cycleSeconds: 5\n", "name", "required"),
        ("name: x\ncycleSeconds: 0\n", "cycleSeconds", "greater than 0"),
    ],
)
def test_bad_policy_names_file_and_field(
    tmp_path: Path, text: str, field: str, detail: str
) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        policy.load(path)
    assert caught.value.where == str(path)
    assert caught.value.field == field
    assert detail in caught.value.detail
    assert "Value error" not in caught.value.detail


@pytest.mark.parametrize("text", ["- name: x\n", "just a string\n", "", "42\n"])
def test_a_policy_that_is_not_a_mapping_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match="a policy is a YAML mapping") as caught:
        policy.load(path)
    assert caught.value.where == str(path)


def test_bad_yaml_is_one_line_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("name: x\nrequeue: {backoffLimit: 3\n")
    with pytest.raises(InputError) as caught:
        policy.load(path)
    assert caught.value.where.startswith(f"{path} line ")
    assert caught.value.detail.startswith("not valid YAML: ")
    assert "\n" not in str(caught.value)


def test_unreadable_policy_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read") as missing:
        policy.load(tmp_path / "absent.yaml")
    assert missing.value.where == str(tmp_path / "absent.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(InputError, match="not UTF-8") as caught:
        policy.load(binary)
    assert caught.value.where == str(binary)


def test_the_default_timeout_is_the_controllers() -> None:
    from queue_controller.controller.settings import Settings

    field = Settings.model_fields["pods_ready_timeout_seconds"]
    assert field.default == policy.DEFAULT_TIMEOUT_SECONDS
