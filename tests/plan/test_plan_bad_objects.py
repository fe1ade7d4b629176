"""A dump with a key written twice in one mapping is refused, naming the line and the key.

YAML loaders keep the last of two equal keys without a word: a dump edited by hand
would be planned as something its author did not see.  JSON dumps go through the
same loader (JSON is YAML), so they are refused alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from textwrap import dedent

import pytest

from queue_controller.dump import read_objects
from queue_controller.errors import DumpError
from tests.plan.harness import Run, dump, plan_json, run_main

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
