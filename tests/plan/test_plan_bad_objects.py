"""A dump with a key written twice in one mapping is refused, naming the line and the key.

YAML loaders keep the last of two equal keys without a word: a dump edited by hand
would be planned as something its author did not see.  JSON dumps go through the
same loader (JSON is YAML), so they are refused alike.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from textwrap import dedent

import pytest

from queue_controller.dump import read_objects
from queue_controller.errors import DumpError
from tests.plan.harness import NOW, Run, dump, plan_json, run_main, run_script

NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-0
status:
  allocatable:
    cpu: "96"
    nvidia.com/gpu: "8"
    nvidia.com/gpu: "4"
"""


def _plan(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> Run:
    return run_main(["plan", *args], monkeypatch, capsys)


def _one_error_line(run: Run) -> str:
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    assert run.stderr.startswith("error: "), run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
    return run.stderr


def test_duplicate_key_names_the_line_and_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(NODE)
    line = _one_error_line(_plan(monkeypatch, capsys, "-f", str(path)))
    assert line == (
        f"error: {path} line 9, column 5: not valid YAML: "
        "duplicate key 'nvidia.com/gpu' (first at line 8)\n"
    )


def test_duplicate_key_deep_in_a_list_item(tmp_path: Path) -> None:
    text = dedent(
        """\
        apiVersion: v1
        kind: List
        items:
        - apiVersion: v1
          kind: Pod
          metadata: {name: p, namespace: ml}
          spec:
            containers:
            - name: main
              image: busybox
              name: sidecar
        """
    )
    with pytest.raises(DumpError) as raised:
        read_objects("deep.yaml", text)
    assert str(raised.value) == (
        "deep.yaml line 11, column 7: not valid YAML: duplicate key 'name' (first at line 9)"
    )


def test_duplicate_key_in_a_json_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "twice.json"
    path.write_text(
        '{"apiVersion": "v1", "kind": "Node",\n "metadata": {"name": "gpu-0", "name": "gpu-1"}}\n'
    )
    line = _one_error_line(_plan(monkeypatch, capsys, "-f", str(path)))
    assert f"{path} line 2, column 32: not valid YAML: duplicate key 'name'" in line


def test_keys_equal_only_as_values_are_duplicates_too(tmp_path: Path) -> None:
    # `1` and `0x1` are one integer key: the second would silently replace the first.
    with pytest.raises(DumpError, match=r"line 2, column 14: .*duplicate key 1 "):
        read_objects("ints.yaml", "kind: Node\ndata: {1: a, 0x1: b}\n")


def test_a_merge_key_may_be_overridden(tmp_path: Path) -> None:
    # `<<: *base` brings keys in to be overridden: that is what a merge is for.
    text = dedent(
        """\
        apiVersion: v1
        kind: Node
        metadata:
          name: gpu-0
          labels: &base {zone: a, rack: r1}
          annotations:
            <<: *base
            zone: b
        """
    )
    [item] = read_objects("merge.yaml", text)
    assert item.obj["metadata"]["annotations"] == {"zone": "b", "rack": "r1"}


def test_the_same_key_in_two_mappings_is_no_duplicate() -> None:
    located = read_objects("ok.yaml", Path(dump("forms/small-cluster.yaml")).read_text())
    assert len(located) == 8


def test_whole_dumps_still_plan_as_before() -> None:
    # The JSON form holds the same objects: the strict loader reads both alike.
    yaml_form = plan_json("forms/small-cluster.yaml")
    json_form = plan_json("forms/small-cluster-nodes.yaml", "forms/small-cluster-rest.json")
    assert json.dumps(yaml_form, sort_keys=True) == json.dumps(json_form, sort_keys=True)


def test_an_integer_too_long_for_python_is_kept_as_its_digits() -> None:
    # int() refuses past 4,300 digits; the parser must not fail the dump for it.
    digits = "9" * 5000
    [item] = read_objects("long.json", f'{{"kind": "Node", "apiVersion": "v1", "n": {digits}}}')
    assert item.obj["n"] == digits


# -- the bad objects, among healthy gangs ---------------------------------------------

EVIL_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: evil
  namespace: lab
  creationTimestamp: "2026-11-30T08:00:00Z"
  labels:
    queue-controller.io/queue: default
  annotations:
    queue-controller.io/min-member: "\u00b2"
spec:
  parallelism: 2
  suspend: true
  template:
    spec:
      containers:
      - name: main
        image: busybox
        resources:
          limits:
            nvidia.com/gpu: 1
"""


def test_bad_objects_among_healthy_gangs_from_the_console_script(tmp_path: Path) -> None:
    """Exit 0 within seconds, each bad object named with its field, the rest decided."""
    small = Path(dump("forms/small-cluster.yaml")).read_text()
    # One GPU count, with an exponent that once took Fraction(10) ** 999999999.
    huge_node = NODE.replace("gpu-0", "gpu-9").replace('    nvidia.com/gpu: "8"\n', "")
    huge_node = huge_node.replace('"4"', '"1e999999999"')
    quota = (
        "apiVersion: queue-controller.io/v1alpha1\nkind: TeamQuota\nmetadata:\n  name: other\n"
        f"spec:\n  resources:\n    nvidia.com/gpu:\n      nominal: {'9' * 5000}\n"
    )
    path = tmp_path / "evil.yaml"
    path.write_text("---\n".join([small, huge_node, quota, EVIL_JOB]))
    started = time.monotonic()
    run = run_script("plan", "-o", "json", "-f", str(path), "--now", NOW)
    elapsed = time.monotonic() - started
    assert run.code == 0, run.stderr
    assert "Traceback" not in run.stderr
    assert elapsed < 20, elapsed  # the console script's start-up included; ~2.5 s here
    lines = run.stderr.splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        f"{path} document 9 (Node/gpu-9)",
        f"{path} document 10 (TeamQuota/other)",
    ]
    assert all(line.startswith("left out: ") for line in lines)
    payload = json.loads(run.stdout)
    assert payload["left_out"][0]["field"] == "status.allocatable.nvidia.com/gpu"
    assert payload["left_out"][1]["field"] == "spec.resources.nvidia.com/gpu.nominal"
    decisions = {d["workload"]: d for d in payload["decisions"]}
    evil = decisions.pop("lab/evil")
    assert (evil["decision"], evil["reason"]) == ("Invalid", "InvalidSpec")
    assert "metadata.annotations[queue-controller.io/min-member]" in evil["message"]
    assert list(decisions.values()) == plan_json("forms/small-cluster.yaml")
