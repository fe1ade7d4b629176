"""Workload traces (CSV and YAML), and the scenario that ties them to a cluster and its queues."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_controller.errors import InputError
from queue_controller.sim.scenario.inputs import load_scenario, load_trace
from queue_controller.sim.scenario.spec import SimJob

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NODES = ROOT / "deploy" / "local-cluster" / "nodes.yaml"
QUEUES = [EXAMPLES / "namespaces.yaml", EXAMPLES / "queues.yaml", EXAMPLES / "teamquotas.yaml"]
HEADER = "arrival,queue,name,pods,gpu,cpu,memory,resources,duration,priority,node_selector\n"
H100 = "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refused(path: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_trace(path)
    return caught.value


def test_csv_every_field_arrives(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "trace.csv",
        HEADER
        + f"0,research/training,pretrain,4,8,96,800Gi,,7200,high,{H100};zone=a\n"
        + "30.5,prod/batch,,1,,500m,16Gi,nvidia.com/mig-1g.10gb=1;example.com/nic=2,600.25,,\n",
    )
    pretrain, small = load_trace(path)
    assert pretrain == SimJob(
        namespace="research",
        name="pretrain",
        queue="training",
        arrival=0.0,
        pods=4,
        request={"nvidia.com/gpu": "8", "cpu": "96", "memory": "800Gi"},
        duration=7200.0,
        priority_class="high",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "zone": "a"},
    )
    assert small == SimJob(
        namespace="prod",
        name="job-2",  # no name: its place in the trace
        queue="batch",
        arrival=30.5,
        pods=1,
        request={
            "cpu": "500m",
            "memory": "16Gi",
            "nvidia.com/mig-1g.10gb": "1",
            "example.com/nic": "2",
        },
        duration=600.25,
    )
    template = pretrain.template()
    assert template.containers[0].limits == {"nvidia.com/gpu": "8"}
    assert template.node_selector["zone"] == "a"


def test_csv_needs_only_the_required_columns_in_any_order(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "duration,pods,queue,arrival\n60,2,prod/batch,5\n")
    (job,) = load_trace(path)
    assert (job.key, job.pods, job.arrival, job.duration, dict(job.request)) == (
        "prod/job-1",
        2,
        5.0,
        60.0,
        {},
    )


def test_ordered_by_arrival_then_by_row(tmp_path: Path) -> None:
    rows = ["arrival,queue,name,pods,duration"]
    rows += [f"{t},prod/batch,{n},1,10" for t, n in [(50, "c"), (10, "a"), (50, "d"), (10, "b")]]
    rows.insert(3, "# a comment, and a blank line after it")
    rows.insert(4, "")
    path = write(tmp_path, "t.csv", "\n".join(rows) + "\n")
    assert [j.name for j in load_trace(path)] == ["a", "b", "c", "d"]
    assert load_trace(path) == load_trace(path)


def test_yaml_forms(tmp_path: Path) -> None:
    listed = write(
        tmp_path,
        "list.yaml",
        """
- arrival: 100
  queue: research/training
  name: sweep
  pods: 8
  duration: 900
  requests: {nvidia.com/gpu: 1, cpu: "12", memory: 100Gi}
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  priority: high
- {arrival: 3, queue: prod/batch, pods: 2, duration: 60, gpu: 2, cpu: 4, memory: 8Gi,
   resources: "nvidia.com/mig-1g.10gb=1"}
""",
    )
    first, second = load_trace(listed)
    assert (first.key, first.pods, first.duration) == ("prod/job-2", 2, 60.0)
    assert first.request == {
        "nvidia.com/gpu": "2",
        "cpu": "4",
        "memory": "8Gi",
        "nvidia.com/mig-1g.10gb": "1",
    }
    assert second == SimJob(
        namespace="research",
        name="sweep",
        queue="training",
        arrival=100.0,
        pods=8,
        request={"nvidia.com/gpu": "1", "cpu": "12", "memory": "100Gi"},
        duration=900.0,
        priority_class="high",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    )
    wrapped = write(tmp_path, "wrapped.yml", "jobs:\n" + listed.read_text().replace("\n", "\n  "))
    assert load_trace(wrapped) == (first, second)
    as_json = write(
        tmp_path,
        "t.json",
        '{"jobs": [{"arrival": 0, "queue": "prod/batch", "pods": 1, "duration": 1}]}',
    )
    assert load_trace(as_json)[0].key == "prod/job-1"


# --- errors: where is the file and row (CSV line, the header being line 1, or jobs[i]) --


def test_missing_column(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival,queue,pods,gpu\n0,prod/batch,1,1\n")
    error = refused(path)
    assert (error.where, error.field) == (f"{path} row 1", "duration")
    assert "missing column" in error.detail


def test_unknown_and_repeated_columns(tmp_path: Path) -> None:
    error = refused(write(tmp_path, "t.csv", "arrival,queue,pods,duration,gpus\n"))
    assert (error.where.endswith("t.csv row 1"), error.field) == (True, "gpus")
    assert "unknown column" in error.detail
    error = refused(write(tmp_path, "u.csv", "arrival,queue,pods,duration,cpu,cpu\n"))
    assert (error.field, error.detail.split(" (")[0]) == ("cpu", "appears twice")


def test_empty_required_cell(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival,queue,pods,duration\n0,prod/batch,1,10\n5,,1,10\n")
    error = refused(path)
    assert (error.where, error.field) == (f"{path} row 3", "queue")
    assert "required" in error.detail


@pytest.mark.parametrize(
    ("row", "field", "detail"),
    [
        ("0,prod/batch,a,1,,,,,-5,,", "duration", "greater than 0"),
        ("0,prod/batch,a,1,,,,,0,,", "duration", "greater than 0"),
        ("-1,prod/batch,a,1,,,,,5,,", "arrival", "greater than or equal to 0"),
        ("soon,prod/batch,a,1,,,,,5,,", "arrival", "valid number"),
        ("inf,prod/batch,a,1,,,,,5,,", "arrival", "finite"),
        ("0,prod/batch,a,0,,,,,5,,", "pods", "greater than or equal to 1"),
        ("0,prod/batch,a,1.5,,,,,5,,", "pods", "valid integer"),
        ("0,batch,a,1,,,,,5,,", "queue", "namespace/name"),
        ("0,prod/batch,A_b,1,,,,,5,,", "name", "not a Job name"),
        ("0,prod/batch,a,1,,ten,,,5,,", "cpu", "'ten' is not a quantity"),
        ("0,prod/batch,a,1,,,-1Gi,,5,,", "memory", "negative"),
        ("0,prod/batch,a,1,1.5,,,,5,,", "gpu", "not a whole number"),
        ("0,prod/batch,a,1,,,,nvidia.com/mig-1g.10gb=x,5,,", "resources", "mig-1g.10gb: "),
        ("0,prod/batch,a,1,,,,nvidia.com/gpu,5,,", "resources", "is not name=value"),
        ("0,prod/batch,a,1,2,,,nvidia.com/gpu=1,5,,", "resources", "set both"),
        ("0,prod/batch,a,1,,,,,5,,zone", "node_selector", "is not name=value"),
    ],
)
def test_bad_csv_values(tmp_path: Path, row: str, field: str, detail: str) -> None:
    path = write(tmp_path, "t.csv", HEADER + "0,prod/batch,ok,1,,,,,5,,\n" + row + "\n")
    error = refused(path)
    assert (error.where, error.field) == (f"{path} row 3", field)
    assert detail in error.detail
    assert "Value error" not in error.detail


def test_a_row_with_too_many_cells(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival,queue,pods,duration\n0,prod/batch,1,10,extra\n")
    error = refused(path)
    assert error.where == f"{path} row 2"
    assert "5 cells" in error.detail


@pytest.mark.parametrize(
    ("item", "field", "detail"),
    [
        ("{arrival: 0, queue: p/b, pods: 1}", "duration", "required"),
        ("{arrival: 0, queue: p/b, pods: 1, duration: 1, gpus: 2}", "gpus", "unknown key"),
        ("{arrival: 0, queue: p/b, pods: true, duration: 1}", "pods", "expected a number"),
        (
            "{arrival: 0, queue: p/b, pods: 1, duration: 1, requests: {cpu: 1x}}",
            "requests.cpu",
            "not a quantity",
        ),
        ("{arrival: 0, queue: p/b, pods: 1, duration: 1, requests: [cpu]}", "requests", "mapping"),
        ("{arrival: 0, queue: p/b, pods: 1, duration: 1, memory: -2}", "memory", "negative"),
        (
            "{arrival: 0, queue: p/b, pods: 1, duration: 1, nodeSelector: {gpu: true}}",
            "nodeSelector.gpu",
            "valid string",
        ),
        (
            "{arrival: 0, queue: p/b, pods: 1, duration: 1, cpu: 1, requests: {cpu: 2}}",
            "cpu",
            "set both here and in requests.cpu",
        ),
    ],
)
def test_bad_yaml_jobs(tmp_path: Path, item: str, field: str, detail: str) -> None:
    path = write(
        tmp_path, "t.yaml", f"- {{arrival: 0, queue: p/b, pods: 1, duration: 1}}\n- {item}\n"
    )
    error = refused(path)
    assert (error.where, error.field) == (f"{path} jobs[1]", field)
    assert detail in error.detail


@pytest.mark.parametrize(
    ("text", "where", "field", "detail"),
    [
        ("[]", "", "", "no jobs"),
        ("", "", "", "no jobs"),
        ("arrival,queue,pods,duration\n", "", "", "no jobs"),
        ("- 5\n", " jobs[0]", "", "expected a mapping"),
        ("jobs: 5\n", "", "jobs", "expected a list"),
        ("jobs: []\nworkers: 3\n", "", "workers", "unknown key"),
        ("- {arrival: 0\n", " line 2, column 1", "", "not valid YAML"),
    ],
)
def test_trace_shapes_refused(
    tmp_path: Path, text: str, where: str, field: str, detail: str
) -> None:
    path = write(tmp_path, "t.csv" if text.startswith("arrival") else "t.yaml", text)
    error = refused(path)
    assert (error.where, error.field) == (f"{path}{where}", field)
    assert detail in error.detail


def test_duplicate_jobs_name_both_rows(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "t.csv",
        "arrival,queue,name,pods,duration\n0,prod/batch,x,1,1\n0,research/training,x,1,1\n"
        "9,prod/batch,x,1,1\n",
    )
    error = refused(path)  # the same name in another namespace is another job
    assert (error.where, error.field) == (f"{path} row 4", "name")
    assert f"prod/x also appears at {path} row 2" in error.detail


def test_a_default_name_can_collide_too(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "t.yaml",
        "- {arrival: 0, queue: p/b, pods: 1, duration: 1, name: job-2}\n"
        "- {arrival: 0, queue: p/b, pods: 1, duration: 1}\n",
    )
    error = refused(path)
    assert (error.where, error.field) == (f"{path} jobs[1]", "name")


def test_an_unknown_format(tmp_path: Path) -> None:
    error = refused(write(tmp_path, "t.txt", "arrival,queue,pods,duration\n"))
    assert error.where == str(tmp_path / "t.txt")
    assert ".csv" in error.detail


# --- scenarios ------------------------------------------------------------------------


def test_a_scenario_from_files(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "week.csv",
        "arrival,queue,name,pods,gpu,duration,priority\n"
        "0,research/training,a,2,4,60,\n"
        "1,prod/batch,b,1,1,60,system-cluster-critical\n",
    )
    scenario = load_scenario(cluster=NODES, queues=QUEUES, trace=trace)
    assert scenario.name == "week"
    assert len(scenario.nodes) == 23
    assert [q.name for q in scenario.queues] == ["training", "batch"]
    assert {q.name for q in scenario.quotas} == {"research", "prod"}
    assert [j.key for j in scenario.jobs] == ["research/a", "prod/b"]
    assert scenario.sources == {
        "cluster": str(NODES),
        "queues": ", ".join(str(p) for p in QUEUES),
        "trace": str(trace),
    }
    named = load_scenario(cluster=NODES, queues=QUEUES, trace=trace, name="what-if")
    assert named.name == "what-if"


def test_a_job_for_a_queue_that_does_not_exist(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.csv",
        "arrival,queue,pods,duration\n0,research/training,1,5\n1,research/batch,1,5\n",
    )
    with pytest.raises(InputError) as caught:
        load_scenario(cluster=NODES, queues=QUEUES, trace=trace)
    assert (caught.value.where, caught.value.field) == (f"{trace} row 3", "queue")
    assert "no Queue research/batch" in caught.value.detail
    assert "prod/batch, research/training" in caught.value.detail


def test_a_job_with_an_unknown_priority_class(tmp_path: Path) -> None:
    trace = write(
        tmp_path,
        "t.yaml",
        "- {arrival: 0, queue: prod/batch, pods: 1, duration: 5, priority: vip}\n",
    )
    with pytest.raises(InputError) as caught:
        load_scenario(cluster=NODES, queues=QUEUES, trace=trace)
    assert (caught.value.where, caught.value.field) == (f"{trace} jobs[0]", "priority")


def test_the_format_in_the_module_docstring_reads(tmp_path: Path) -> None:
    from queue_controller.sim.scenario import trace

    examples = [line[4:] for line in (trace.__doc__ or "").splitlines() if line.startswith("    ")]
    csv_text, yaml_text = "\n".join(examples[:3]), "\n".join(examples[3:])
    assert csv_text.startswith("arrival,")
    assert yaml_text.startswith("- {arrival")
    pretrain, small = load_trace(write(tmp_path, "doc.csv", csv_text + "\n"))
    (from_yaml,) = load_trace(write(tmp_path, "doc.yaml", yaml_text + "\n"))
    assert [pretrain.key, small.key] == ["research/pretrain", "prod/job-2"]
    assert small.request["nvidia.com/mig-1g.10gb"] == "1"
    assert (from_yaml.key, from_yaml.pods, from_yaml.duration, from_yaml.request) == (
        pretrain.key,
        pretrain.pods,
        pretrain.duration,
        pretrain.request,
    )


def test_a_job_may_ask_for_a_topology(tmp_path: Path) -> None:
    rack = "topology.queue-controller.io/rack"
    path = write(
        tmp_path,
        "t.csv",
        f"arrival,queue,pods,gpu,duration,topology\n0,prod/batch,2,8,60,Required:{rack}\n"
        "1,prod/batch,2,8,60,\n",
    )
    first, second = load_trace(path)
    assert first.topology is not None
    assert (first.topology.mode.value, first.topology.level) == ("Required", rack)
    assert first.topology.field == f"{path} row 2 topology"  # the core's refusals name it
    assert second.topology is None
    listed = write(
        tmp_path,
        "t.yaml",
        f"- {{arrival: 0, queue: a/b, pods: 1, duration: 5, topology: 'Preferred:{rack}'}}\n",
    )
    (job,) = load_trace(listed)
    assert job.topology is not None
    assert job.topology.mode.value == "Preferred"


def test_a_bad_topology_names_the_column(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival,queue,pods,duration,topology\n0,a/b,1,5,rack\n")
    error = refused(path)
    assert error.field == "topology"
    assert "Required:<level> or Preferred:<level>" in error.detail
