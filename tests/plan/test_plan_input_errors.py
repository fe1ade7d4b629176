"""Bad input to ``queue-controller plan``, never a traceback.

A dump that cannot be read as a whole (a missing file, bad YAML, a document
that is not an object) exits 2 with one line on stderr naming the file and
document, and nothing on stdout.  One object that cannot be read is left out:
exit 0, one ``left out:`` line on stderr naming the object and the field, the
same in the JSON's ``left_out``, and every other gang decided.  Most cases run
the real ``main()`` in-process; a few run the installed console script.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

from tests.plan.harness import Run, by_workload, dump, outcome, plan_json, run_main, run_script

Plan = Callable[..., Run]

NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-0
status:
  allocatable:
    cpu: "96"
    memory: 1000Gi
    pods: "110"
    nvidia.com/gpu: "8"
  conditions:
  - type: Ready
    status: "True"
"""


@pytest.fixture
def plan(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Plan:
    """``queue-controller plan ARGS`` through the real ``main()``, in-process."""

    def run(*args: str, stdin: str | None = None) -> Run:
        return run_main(["plan", *args], monkeypatch, capsys, stdin=stdin)

    return run


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(dedent(text))
    return str(path)


def assert_input_error(run: Run, *fragments: str) -> str:
    """Exit 2, nothing on stdout, one ``error: ...`` line holding every fragment."""
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    assert run.stderr.startswith("error: "), run.stderr
    assert run.stderr.endswith("\n"), run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
    for fragment in fragments:
        assert fragment in run.stderr, (fragment, run.stderr)
    return run.stderr


def assert_left_out(run: Run, *expected: tuple[str, str, str]) -> dict[str, Any]:
    """Exit 0; each (object, field, detail fragment) left out, on stderr and in the JSON."""
    assert run.code == 0, (run.code, run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == len(expected), run.stderr
    payload: dict[str, Any] = json.loads(run.stdout)
    left = payload["left_out"]
    assert len(left) == len(expected), left
    for line, item, (obj, field, fragment) in zip(lines, left, expected, strict=True):
        assert item["object"] == obj, item
        assert item["field"] == field, item
        assert fragment in item["detail"], item
        named = ": ".join(p for p in (obj, field) if p)
        assert line.startswith(f"left out: {named}: "), line
        assert fragment in line, line
    return payload


# -- files ---------------------------------------------------------------------------------------


def test_missing_file_from_the_console_script(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dump.yaml"
    run = run_script("plan", "-f", str(missing))
    assert assert_input_error(run) == f"error: {missing}: no such file\n"


def test_directory_instead_of_a_file(plan: Plan, tmp_path: Path) -> None:
    run = plan("-f", str(tmp_path))
    assert assert_input_error(run) == f"error: {tmp_path}: is a directory, not a dump file\n"


def test_non_utf8_file(plan: Plan, tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(NODE.replace("gpu-0", "gpu-\xe9").encode("latin-1"))
    assert_input_error(plan("-f", str(path)), str(path), "is not UTF-8 text")


def test_invalid_yaml_names_line_and_column_from_the_console_script(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "broken.yaml",
        """\
        apiVersion: v1
        kind: Node
        metadata:
          name: gpu-0
           labels: x
        """,
    )
    run = run_script("plan", "-f", path)
    message = assert_input_error(run, f"{path} line 5, column 10: not valid YAML")
    assert "mapping values are not allowed" in message


def test_control_character_names_line_and_column(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "bell.yaml", NODE.replace("name: gpu-0", 'name: "gpu-\x07"'))
    assert_input_error(
        plan("-f", path),
        f"{path} line 4, column 14: not valid YAML: character #x0007",
        "control characters are not allowed",
    )


def test_non_utf8_stdin_from_the_console_script() -> None:
    dump_bytes = NODE.replace("gpu-0", "gpu-\xe9").encode("latin-1")
    run = run_script("plan", "-f", "-", stdin=dump_bytes)
    assert assert_input_error(run) == "error: <stdin>: is not UTF-8 text\n"


def test_error_in_the_second_file_names_that_file(plan: Plan, tmp_path: Path) -> None:
    good = write(tmp_path, "good.yaml", NODE)
    bad = write(tmp_path, "bad.yaml", "apiVersion: v1\nkind: Node\nmetadata: {name: x\n")
    assert_input_error(plan("-f", good, "-f", bad), f"{bad} line ", "not valid YAML")


# -- documents -----------------------------------------------------------------------------------


def test_document_that_is_a_list(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "list.yaml", NODE + "---\n- gpu-1\n- gpu-2\n")
    assert_input_error(
        plan("-f", path), f"{path} document 2: expected a Kubernetes object, got list"
    )


def test_document_that_is_a_scalar(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "scalar.yaml", "just some text\n")
    assert_input_error(
        plan("-f", path), f"{path} document 1: expected a Kubernetes object, got str"
    )


def test_object_without_kind(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "nokind.yaml", NODE.replace("kind: Node\n", ""))
    assert_input_error(plan("-f", path), f"{path} document 1", "kind", "has no kind")


def test_object_without_api_version(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "noapi.yaml", NODE.replace("apiVersion: v1\n", ""))
    assert_input_error(plan("-f", path), f"{path} document 1 (Node)", "has no apiVersion")


def test_unknown_kind_without_ignore_unknown(plan: Plan, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "deploy.yaml",
        NODE
        + dedent(
            """\
            ---
            apiVersion: apps/v1
            kind: Deployment
            metadata:
              name: frontend
              namespace: web
            spec:
              replicas: 3
            """
        ),
    )
    assert_input_error(
        plan("-f", path),
        f"{path} document 2 (Deployment/web/frontend): unsupported kind apps/v1/Deployment",
        "pass --ignore-unknown",
    )


def test_unknown_kind_inside_a_list_names_the_item(plan: Plan) -> None:
    extras = dump("forms/extras.yaml")
    assert_input_error(
        plan("-f", extras),
        f"{extras} document 1 items[0] (Service/lab/tensorboard): unsupported kind v1/Service",
    )


def test_object_without_a_name_is_left_out(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "noname.yaml", NODE.replace("  name: gpu-0\n", "  labels: {}\n"))
    assert_left_out(
        plan("-o", "json", "-f", path),
        (f"{path} document 1 (Node/<unnamed>)", "metadata.name", "every object needs a name"),
    )


def test_two_objects_without_a_name_are_reported_as_unnamed_not_as_duplicates(
    plan: Plan, tmp_path: Path
) -> None:
    unnamed = NODE.replace("  name: gpu-0\n", "  labels: {}\n")
    path = write(tmp_path, "unnamed.yaml", unnamed + "---\n" + unnamed)
    assert_left_out(
        plan("-o", "json", "-f", path),
        (f"{path} document 1 (Node/<unnamed>)", "metadata.name", "every object needs a name"),
        (f"{path} document 2 (Node/<unnamed>)", "metadata.name", "every object needs a name"),
    )


def test_name_that_is_not_a_string_names_the_document(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "intname.yaml", NODE.replace("name: gpu-0", "name: 42"))
    assert_left_out(
        plan("-o", "json", "-f", path),
        (f"{path} document 1 (Node/42)", "metadata.name", "expected a string, got int 42"),
    )


def test_duplicated_object_keeps_the_first_and_names_the_second(plan: Plan, tmp_path: Path) -> None:
    small = Path(dump("forms/small-cluster.yaml")).read_text()
    # A second gpu-1 with 16 GPUs: read, it would fit lab/full-8 beside the 6-GPU pod.
    again = NODE.replace("gpu-0", "gpu-1").replace('gpu: "8"', 'gpu: "16"')
    path = write(tmp_path, "twice.yaml", small + "---\n" + again)
    run = plan("-o", "json", "-f", path)
    payload = assert_left_out(
        run,
        (
            f"{path} document 9 (Node/gpu-1)",
            "",
            f"the same Node also appears at {path} document 2 (Node/gpu-1)",
        ),
    )
    assert payload["decisions"] == plan_json("forms/small-cluster.yaml")


def test_healthy_gangs_are_decided_as_if_the_bad_objects_were_not_there(
    plan: Plan, tmp_path: Path
) -> None:
    small = Path(dump("forms/small-cluster.yaml")).read_text()
    bad_node = NODE.replace("gpu-0", "gpu-3").replace('gpu: "8"', 'gpu: "8x"')
    bad_quota = team_quota("    nvidia.com/gpu:\n      nominal: -1\n")
    path = write(tmp_path, "mixed.yaml", small + "---\n" + bad_node + "---\n" + bad_quota)
    payload = assert_left_out(
        plan("-o", "json", "-f", path),
        (f"{path} document 9 (Node/gpu-3)", "status.allocatable.nvidia.com/gpu", ""),
        (f"{path} document 10 (TeamQuota/research)", "spec.resources.nvidia.com/gpu.nominal", ""),
    )
    assert payload["decisions"] == plan_json("forms/small-cluster.yaml")


def test_same_object_in_two_files(plan: Plan, tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", NODE)
    second = write(tmp_path, "b.yaml", NODE)
    assert_left_out(
        plan("-o", "json", "-f", first, "-f", second),
        (f"{second} document 1 (Node/gpu-0)", "", f"the same Node also appears at {first}"),
    )


# -- fields of core objects: the object is left out, the rest decided ----------------------------


def test_node_with_unparseable_allocatable_quantity(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "node.yaml", NODE.replace('cpu: "96"', "cpu: 96 cores"))
    assert_left_out(
        plan("-o", "json", "-f", path),
        (f"{path} document 1 (Node/gpu-0)", "status.allocatable.cpu", "'96 cores' is not a"),
    )


def test_node_inside_a_node_list_names_the_item_and_the_rest_is_decided(
    plan: Plan, tmp_path: Path
) -> None:
    text = Path(dump("node-filters.yaml")).read_text()
    head, cordoned, tail = text.partition("name: gpu-cordoned")
    bad = head + cordoned + tail.replace('nvidia.com/gpu: "8"', 'nvidia.com/gpu: "8x"', 1)
    path = write(tmp_path, "nodes.yaml", bad)
    run = plan("-o", "json", "-f", path)
    assert_left_out(
        run,
        (
            f"{path} document 1 items[1] (Node/gpu-cordoned)",
            "status.allocatable.nvidia.com/gpu",
            "'8x' is not a quantity",
        ),
    )

    # A cordoned node took nothing anyway: every gang is decided as over the whole dump
    # (only the count of nodes named in why a gang waits differs).
    def verdicts(decisions: list[dict[str, Any]]) -> list[tuple[str, str, str, object]]:
        return [(d["workload"], d["decision"], d["reason"], d.get("placement")) for d in decisions]

    whole = plan_json("node-filters.yaml")
    assert verdicts(json.loads(run.stdout)["decisions"]) == verdicts(whole)


def test_table_output_names_what_was_left_out(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "node.yaml", NODE.replace('cpu: "96"', "cpu: 96 cores"))
    run = plan("-f", path)
    assert run.code == 0, run.stderr
    assert run.stderr == (
        f"left out: {path} document 1 (Node/gpu-0): status.allocatable.cpu: "
        "'96 cores' is not a quantity (examples: 2, 500m, 16Gi, 1e3)\n"
    )
    assert "1 objects left out, named above" in " ".join(run.stdout.split())


POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: trainer-0
  namespace: ml
spec:
  nodeName: gpu-0
  containers:
  - name: main
    image: nvcr.io/nvidia/pytorch:25.01-py3
    resources:
      requests:
        cpu: "8"
        memory: 64GB
status:
  phase: Running
"""


def test_pod_with_a_bad_quantity(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "pod.yaml", NODE + "---\n" + POD)
    assert_left_out(
        plan("-o", "json", "-f", path),
        (
            f"{path} document 2 (Pod/ml/trainer-0)",
            "spec.containers[main].resources.requests[memory]",
            "'64GB' is not a quantity",
        ),
    )


def test_pod_with_a_malformed_field_names_its_full_path(plan: Plan, tmp_path: Path) -> None:
    pod = POD.replace("memory: 64GB", "memory: 64Gi").replace(
        "  nodeName: gpu-0\n", "  nodeName: gpu-0\n  nodeSelector:\n    gpu: 1\n"
    )
    path = write(tmp_path, "pod.yaml", pod)
    assert_left_out(
        plan("-o", "json", "-f", path),
        (f"{path} document 1 (Pod/ml/trainer-0)", "spec.nodeSelector.gpu", "expected a string"),
    )


def test_job_with_a_bad_creation_timestamp_is_invalid(plan: Plan, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "job.yaml",
        """\
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: train
          namespace: ml
          creationTimestamp: yesterday
          labels:
            queue-controller.io/queue: q
        spec:
          suspend: true
          template:
            spec:
              containers:
              - name: main
                image: busybox
        """,
    )
    # A workload is not left out: it is decided, Invalid, naming the field.
    payload = assert_left_out(plan("-o", "json", "-f", path))
    [train] = payload["decisions"]
    assert (train["workload"], *outcome(train)) == ("ml/train", "Invalid", "InvalidSpec")
    assert train["message"] == "metadata.creationTimestamp: 'yesterday' is not an RFC 3339 time"


# -- our CRDs -------------------------------------------------------------------------------------


def team_quota(resources: str, cohort: str = "") -> str:
    spec = f"  cohort: {cohort}\n" if cohort else ""
    return (
        "apiVersion: queue-controller.io/v1alpha1\nkind: TeamQuota\nmetadata:\n  name: research\n"
        f"spec:\n{spec}  resources:\n" + resources
    )


@pytest.mark.parametrize(
    ("resources", "cohort", "field", "fragment"),
    [
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: -1\n",
            "",
            "spec.resources.nvidia.com/gpu.nominal",
            "-1 is negative",
            id="negative-nominal",
        ),
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: 1500m\n",
            "",
            "spec",
            "resources.nvidia.com/gpu.nominal: '1500m' is not a whole number",
            id="fractional-gpu-nominal",
        ),
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: 1.5\n",
            "",
            "spec.resources.nvidia.com/gpu.nominal",
            "write a quantity as an integer or a string",
            id="float-nominal",
        ),
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: 8\n      borowingLimit: 4\n",
            "lab",
            "spec.resources.nvidia.com/gpu.borowingLimit",
            "Extra inputs are not permitted",
            id="unknown-field",
        ),
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: 8\n      borrowingLimit: 4\n",
            "",
            "spec",
            "resources.nvidia.com/gpu.borrowingLimit: borrowing needs a cohort to borrow from",
            id="borrowing-limit-without-cohort",
        ),
    ],
)
def test_bad_team_quota(
    plan: Plan, tmp_path: Path, resources: str, cohort: str, field: str, fragment: str
) -> None:
    path = write(tmp_path, "quota.yaml", team_quota(resources, cohort))
    assert_left_out(
        plan("-o", "json", "-f", path), (f"{path} document 1 (TeamQuota/research)", field, fragment)
    )


def test_queue_with_unknown_ordering(plan: Plan, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "queue.yaml",
        """\
        apiVersion: queue-controller.io/v1alpha1
        kind: Queue
        metadata:
          name: training
          namespace: ml
        spec:
          teamQuota: ml
          ordering: LIFO
        """,
    )
    assert_left_out(
        plan("-o", "json", "-f", path),
        (
            f"{path} document 1 (Queue/ml/training)",
            "spec.ordering",
            "Input should be 'StrictFIFO' or 'BestEffortFIFO'",
        ),
    )


def test_pod_group_with_negative_min_member(plan: Plan, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "podgroup.yaml",
        """\
        apiVersion: queue-controller.io/v1alpha1
        kind: PodGroup
        metadata:
          name: train
          namespace: ml
        spec:
          queue: training
          minMember: -1
        """,
    )
    assert_left_out(
        plan("-o", "json", "-f", path),
        (
            f"{path} document 1 (PodGroup/ml/train)",
            "spec.minMember",
            "Input should be greater than or equal to 0",
        ),
    )


# -- options ---------------------------------------------------------------------------------------


def test_bad_now(plan: Plan) -> None:
    run = plan("-f", dump("forms/small-cluster.yaml"), "--now", "tomorrow")
    assert assert_input_error(run) == "error: --now: 'tomorrow' is not an RFC 3339 time\n"


def test_unknown_output_format_is_a_usage_error(plan: Plan) -> None:
    run = plan("-o", "xml")
    assert run.code == 2
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    assert "Invalid value for '-o' / '--output': 'xml' is not one of 'table', 'json'" in run.stderr


def test_error_from_stdin_is_named_stdin(plan: Plan) -> None:
    run = plan("-o", "json", "-f", "-", stdin="apiVersion: v1\nkind: Node\nmetadata: {}\n")
    assert_left_out(
        run, ("<stdin> document 1 (Node/<unnamed>)", "metadata.name", "every object needs a name")
    )


# -- a broken job is a decision, not an abort -----------------------------------------------------


def test_job_with_malformed_containers_is_invalid_and_nothing_is_lost(
    plan: Plan, tmp_path: Path
) -> None:
    text = Path(dump("forms/small-cluster.yaml")).read_text()
    broken = dedent(
        """\
        ---
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: oops
          namespace: lab
          creationTimestamp: "2026-11-30T08:00:00Z"
          labels:
            queue-controller.io/queue: default
        spec:
          suspend: true
          template:
            spec:
              containers: "oops"
        """
    )
    path = write(tmp_path, "with-broken-job.yaml", text + broken)
    run = plan("-o", "json", "-f", path)
    assert run.code == 0, run.stderr
    assert run.stderr == ""
    decisions = json.loads(run.stdout)["decisions"]
    # Listed where it would have queued (oldest), and every other gang is still decided.
    assert [d["workload"] for d in decisions] == [
        "lab/oops",
        "lab/pair",
        "lab/full-8",
        "lab/pick-2",
    ]
    oops = by_workload(decisions)["lab/oops"]
    assert outcome(oops) == ("Invalid", "InvalidSpec")
    assert oops["message"] == "spec.template.spec.containers: expected a list, got str 'oops'"
    assert [outcome(d) for d in decisions[1:]] == [
        ("Admit", "Admitted"),
        ("Pending", "NoNodeFit"),
        ("Admit", "Admitted"),
    ]
