"""``simulate`` over bad inputs: refused with one line naming the record, never a traceback.

A simulation's files define an experiment: leaving a node or a queue out would
quietly simulate another cluster than the one given, so ``simulate`` refuses the
first bad record where ``plan`` leaves it out.  A key written twice is refused
as in a dump.
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from queue_controller.errors import InputError
from queue_controller.sim.scenario import policy, topologyspec
from queue_controller.sim.scenario.inputs import load_cluster, load_queues
from queue_controller.sim.scenario.trace import read_trace
from tests.plan.harness import Run, run_main

DATA = Path(__file__).resolve().parents[2] / "queue_controller" / "data"
NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-0
status:
  allocatable:
    cpu: "96"
    memory: 1000Gi
    nvidia.com/gpu: "8"
  conditions:
  - {type: Ready, status: "True"}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(dedent(text))
    return path


def _simulate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> Run:
    return run_main(["simulate", *args], monkeypatch, capsys)


def _one_line(run: Run) -> str:
    assert run.code == 2, (run.code, run.stdout[-500:], run.stderr)
    assert "Traceback" not in run.stderr
    assert run.stderr.startswith("error: "), run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
    return run.stderr


def test_a_key_twice_in_a_cluster_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", NODE.replace('    nvidia.com/gpu: "8"\n', '    cpu: "8"\n'))
    with pytest.raises(InputError) as raised:
        load_cluster(path)
    assert str(raised.value) == (
        f"{path} line 9, column 5: not valid YAML: duplicate key 'cpu' (first at line 7)"
    )


def test_a_key_twice_in_a_queue_file(tmp_path: Path) -> None:
    text = (DATA / "sim-queues.yaml").read_text()
    doubled = text.replace(
        "  teamQuota: research\n", "  teamQuota: research\n  teamQuota: prod\n", 1
    )
    path = _write(tmp_path, "q.yaml", doubled)
    with pytest.raises(InputError, match=r"line \d+, column 3: .*duplicate key 'teamQuota'"):
        load_queues([path])


def test_a_key_twice_in_a_yaml_trace(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "t.yaml",
        """\
        - arrival: 0
          queue: research/training
          pods: 1
          pods: 64
          duration: 60
        """,
    )
    with pytest.raises(InputError) as raised:
        read_trace(path)
    assert str(raised.value) == (
        f"{path} line 4, column 3: not valid YAML: duplicate key 'pods' (first at line 3)"
    )


def test_a_bad_node_is_refused_naming_it_and_its_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = _write(tmp_path, "c.yaml", NODE.replace('gpu: "8"', 'gpu: "8x"'))
    trace = _write(tmp_path, "t.csv", "arrival,queue,pods,gpu,duration\n0,prod/batch,1,1,60\n")
    queues = str(DATA / "sim-queues.yaml")
    args = ["--cluster", str(cluster), "--queues", queues, "--trace", str(trace)]
    line = _one_line(_simulate(monkeypatch, capsys, *args))
    assert line.startswith(
        f"error: {cluster} document 1 (Node/gpu-0): status.allocatable.nvidia.com/gpu: "
        "'8x' is not a quantity"
    )


def test_the_same_node_twice_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "c.yaml", NODE + "---\n" + NODE)
    with pytest.raises(InputError, match=r"document 2 \(Node/gpu-0\): the same Node also appears"):
        load_cluster(path)


@pytest.mark.parametrize("pods", ["\u00b2", "1" * 5000, "-1", "1e999999999"])
def test_a_bad_count_in_a_trace_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pods: str
) -> None:
    trace = _write(
        tmp_path, "t.csv", f"arrival,queue,pods,gpu,duration\n0,prod/batch,{pods},1,60\n"
    )
    args = ["--cluster", str(DATA / "sim-cluster.yaml"), "--queues", str(DATA / "sim-queues.yaml")]
    line = _one_line(_simulate(monkeypatch, capsys, *args, "--trace", str(trace)))
    assert f"{trace} row 2" in line
    assert "pods" in line


def test_a_pool_count_too_long_for_python_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pools = (DATA / "sim-cluster.yaml").read_text().replace("count: 24", f"count: {'9' * 5000}", 1)
    cluster = _write(tmp_path, "pools.yaml", pools)
    trace = _write(tmp_path, "t.csv", "arrival,queue,pods,gpu,duration\n0,prod/batch,1,1,60\n")
    queues = str(DATA / "sim-queues.yaml")
    args = ["--cluster", str(cluster), "--queues", queues, "--trace", str(trace)]
    line = _one_line(_simulate(monkeypatch, capsys, *args))
    assert line.startswith(f"error: {cluster}: not valid YAML: ")


def test_a_key_twice_in_a_policy_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.yaml", "name: twice\ncycleSeconds: 5\ncycleSeconds: 50\n")
    with pytest.raises(InputError) as raised:
        policy.load(path)
    assert str(raised.value) == (
        f"{path} line 3, column 1: not valid YAML: duplicate key 'cycleSeconds' (first at line 2)"
    )


def test_a_key_twice_in_a_topology_file(tmp_path: Path) -> None:
    text = (DATA / "sim-topology.yaml").read_text()
    doubled = text.replace('queues:\n  "*": racks\n', 'queues:\n  "*": racks\n  "*": none\n')
    assert doubled != text
    path = _write(tmp_path, "t.yaml", doubled)
    with pytest.raises(InputError, match=r"line \d+, column 3: not valid YAML: duplicate key '\*'"):
        topologyspec.load(path)
