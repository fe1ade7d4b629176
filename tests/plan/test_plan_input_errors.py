"""Bad input to ``queue-controller plan``: exit code 2 and one line on stderr, never a traceback.

The line names the file and document (and the object and field where there
is one), and nothing is printed on stdout.  Most cases run the real ``main()``
in-process; a few run the installed console script as a subprocess.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from textwrap import dedent

import pytest

from tests.plan.harness import Run, by_workload, dump, outcome, run_main, run_script

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


def test_object_without_a_name(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "noname.yaml", NODE.replace("  name: gpu-0\n", "  labels: {}\n"))
    assert_input_error(
        plan("-f", path),
        f"{path} document 1 (Node/<unnamed>): metadata.name: every object needs a name",
    )


def test_two_objects_without_a_name_are_reported_as_unnamed_not_as_duplicates(
    plan: Plan, tmp_path: Path
) -> None:
    unnamed = NODE.replace("  name: gpu-0\n", "  labels: {}\n")
    path = write(tmp_path, "unnamed.yaml", unnamed + "---\n" + unnamed)
    message = assert_input_error(plan("-f", path), "document 1", "every object needs a name")
    assert "also appears" not in message


def test_name_that_is_not_a_string_names_the_document(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "intname.yaml", NODE.replace("name: gpu-0", "name: 42"))
    assert_input_error(
        plan("-f", path),
        f"{path} document 1 (Node/42): metadata.name: expected a string, got int 42",
    )


def test_duplicated_object(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "twice.yaml", NODE + "---\n" + NODE)
    assert_input_error(
        plan("-f", path),
        f"{path} document 2 (Node/gpu-0): the same Node also appears at "
        f"{path} document 1 (Node/gpu-0)",
    )


def test_same_object_in_two_files(plan: Plan, tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", NODE)
    second = write(tmp_path, "b.yaml", NODE)
    assert_input_error(
        plan("-f", first, "-f", second), f"{second} document 1 (Node/gpu-0): the same Node"
    )


# -- fields of core objects ---------------------------------------------------------------------


def test_node_with_unparseable_allocatable_quantity(plan: Plan, tmp_path: Path) -> None:
    path = write(tmp_path, "node.yaml", NODE.replace('cpu: "96"', "cpu: 96 cores"))
    assert_input_error(
        plan("-f", path),
        f"{path} document 1 (Node/gpu-0): status.allocatable.cpu: '96 cores' is not a quantity",
    )


def test_node_inside_a_node_list_names_the_item(plan: Plan, tmp_path: Path) -> None:
    text = Path(dump("node-filters.yaml")).read_text()
    head, cordoned, tail = text.partition("name: gpu-cordoned")
    bad = head + cordoned + tail.replace('nvidia.com/gpu: "8"', 'nvidia.com/gpu: "8x"', 1)
    path = write(tmp_path, "nodes.yaml", bad)
    assert_input_error(
        plan("-f", path),
        f"{path} document 1 items[1] (Node/gpu-cordoned): status.allocatable.nvidia.com/gpu",
        "'8x' is not a quantity",
    )


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
    assert_input_error(
        plan("-f", path),
        f"{path} document 2 (Pod/ml/trainer-0): "
        "spec.containers[main].resources.requests[memory]: '64GB' is not a quantity",
    )


def test_pod_with_a_malformed_field_names_its_full_path(plan: Plan, tmp_path: Path) -> None:
    pod = POD.replace("memory: 64GB", "memory: 64Gi").replace(
        "  nodeName: gpu-0\n", "  nodeName: gpu-0\n  nodeSelector:\n    gpu: 1\n"
    )
    path = write(tmp_path, "pod.yaml", pod)
    assert_input_error(
        plan("-f", path),
        f"{path} document 1 (Pod/ml/trainer-0): spec.nodeSelector.gpu: expected a string, got 1",
    )


def test_job_with_a_bad_creation_timestamp_names_the_job(plan: Plan, tmp_path: Path) -> None:
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
    assert_input_error(
        plan("-f", path),
        f"{path} document 1 (Job/ml/train): metadata.creationTimestamp: "
        "'yesterday' is not an RFC 3339 time",
    )


# -- our CRDs -------------------------------------------------------------------------------------


def team_quota(resources: str, cohort: str = "") -> str:
    spec = f"  cohort: {cohort}\n" if cohort else ""
    return (
        "apiVersion: queue-controller.io/v1alpha1\nkind: TeamQuota\nmetadata:\n  name: research\n"
        f"spec:\n{spec}  resources:\n" + resources
    )


@pytest.mark.parametrize(
    ("resources", "cohort", "fragments"),
    [
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: -1\n",
            "",
            ["spec.resources.nvidia.com/gpu.nominal: -1 is negative"],
            id="negative-nominal",
        ),
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: 1500m\n",
            "",
            ["spec: resources.nvidia.com/gpu.nominal: '1500m' is not a whole number"],
            id="fractional-gpu-nominal",
        ),
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: 1.5\n",
            "",
            ["spec.resources.nvidia.com/gpu.nominal", "write a quantity as an integer or a string"],
            id="float-nominal",
        ),
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: 8\n      borowingLimit: 4\n",
            "lab",
            ["spec.resources.nvidia.com/gpu.borowingLimit: Extra inputs are not permitted"],
            id="unknown-field",
        ),
        pytest.param(
            "    nvidia.com/gpu:\n      nominal: 8\n      borrowingLimit: 4\n",
            "",
            ["resources.nvidia.com/gpu.borrowingLimit: borrowing needs a cohort to borrow from"],
            id="borrowing-limit-without-cohort",
        ),
    ],
)
def test_bad_team_quota(
    plan: Plan, tmp_path: Path, resources: str, cohort: str, fragments: list[str]
) -> None:
    path = write(tmp_path, "quota.yaml", team_quota(resources, cohort))
    assert_input_error(plan("-f", path), f"{path} document 1 (TeamQuota/research): ", *fragments)


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
    assert_input_error(
        plan("-f", path),
        f"{path} document 1 (Queue/ml/training): spec.ordering: "
        "Input should be 'StrictFIFO' or 'BestEffortFIFO'",
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
    assert_input_error(
        plan("-f", path),
        f"{path} document 1 (PodGroup/ml/train): spec.minMember: "
        "Input should be greater than or equal to 0",
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
    run = plan("-f", "-", stdin="apiVersion: v1\nkind: Node\nmetadata: {}\n")
    assert_input_error(run, "<stdin> document 1 (Node/<unnamed>): metadata.name")


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
