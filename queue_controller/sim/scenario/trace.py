"""The workload trace: which gangs arrive when, what each pod asks for, and for how long.

A trace is CSV with a header row, or YAML (a list of jobs, or ``{jobs: [...]}``):

    arrival,queue,name,pods,gpu,cpu,memory,resources,duration,priority,node_selector
    0,research/training,pretrain,4,8,96,800Gi,,7200,high,nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3
    30,prod/batch,,1,,4,16Gi,nvidia.com/mig-1g.10gb=1,600,,

    - {arrival: 0, queue: research/training, name: pretrain, pods: 4, duration: 7200,
       requests: {nvidia.com/gpu: 8, cpu: "96", memory: 800Gi}}

``arrival`` and ``duration`` are seconds (from the start of the simulation; of
work once every member runs), requests are per pod.  A job lives in its queue's
namespace; one without a name is ``job-<n>``, the n-th job of the file.  CSV
lines that are blank or start with ``#`` are skipped.  Each row is validated by
one pydantic model, quantities by the core's own parser; the first problem
becomes an :class:`InputError` naming ``<file> row <line>`` (CSV, the header
being line 1) or ``<file> jobs[<i>]`` (YAML) and the column or key.

``topology`` (optional) is ``Required:<level>`` or ``Preferred:<level>``, a node
label that the job's Queue's Topology names (``simulate --topology``); a request
its Topology cannot meet is the core's InvalidSpec, naming the row.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from queue_controller.core.model import (
    GPU,
    TopologyMode,
    TopologyRequest,
    is_extended,
    parse_quantity,
)
from queue_controller.dump import StrictLoader, read_file
from queue_controller.errors import InputError, QuantityError
from queue_controller.sim.scenario.spec import SimJob

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# Flat request columns (CSV) or keys (YAML), and the resource each one sets.
_FLAT = {"gpu": GPU, "cpu": "cpu", "memory": "memory"}
_REQUIRED = ("arrival", "queue", "pods", "duration")
CSV_COLUMNS = (*_REQUIRED, "name", "priority", *_FLAT, "resources", "topology", "node_selector")
YAML_KEYS = (*CSV_COLUMNS[:-1], "requests", "nodeSelector")
_TOPOLOGY = re.compile(r"(?P<mode>Required|Preferred):(?P<level>\S+)")
# A dump's loader: libyaml's speed, and a key written twice is an error naming its line.
_Loader: type[yaml.SafeLoader] = StrictLoader


def _quantity(value: Any) -> str:
    try:
        amount = parse_quantity(value)
    except QuantityError as error:
        raise ValueError(error.detail) from None
    if amount < 0:
        raise ValueError(f"{value!r} is negative")
    return str(value)


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    return value


class _Row(BaseModel):
    """One job of a trace, after the CSV/YAML spellings are brought together."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival: Annotated[float, BeforeValidator(_no_bool), Field(ge=0, allow_inf_nan=False)]
    queue: str
    name: str | None = None
    pods: Annotated[int, BeforeValidator(_no_bool), Field(ge=1)]
    duration: Annotated[float, BeforeValidator(_no_bool), Field(gt=0, allow_inf_nan=False)]
    priority: str = ""
    nodeSelector: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, Annotated[str, BeforeValidator(_quantity)]] = Field(default_factory=dict)
    topology: str = ""

    @field_validator("topology")
    @classmethod
    def _topology(cls, value: str) -> str:
        if value and _TOPOLOGY.fullmatch(value) is None:
            raise ValueError(
                f"{value!r} is not Required:<level> or Preferred:<level>, such as "
                "Preferred:topology.queue-controller.io/rack"
            )
        return value

    @field_validator("queue")
    @classmethod
    def _queue_key(cls, value: str) -> str:
        namespace, _, name = value.partition("/")
        if not (_matches(namespace) and _matches(name)):
            raise ValueError(f"{value!r} is not namespace/name, such as research/training")
        return value

    @field_validator("name")
    @classmethod
    def _job_name(cls, value: str | None) -> str | None:
        if value is not None and not _matches(value):
            raise ValueError(f"{value!r} is not a Job name (lower-case letters, digits and -)")
        return value


def _matches(text: str) -> bool:
    return _LABEL.fullmatch(text) is not None and len(text) <= 63


def _pairs(text: Any, field: str) -> dict[str, str]:
    """``name=value;name=value``, as the CSV columns ``resources`` and ``node_selector`` hold."""
    if not isinstance(text, str):
        raise InputError(f"expected name=value;name=value, got {text!r}", field=field)
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        key, equals, value = (s.strip() for s in part.partition("="))
        if not key or not equals:
            raise InputError(f"{part!r} is not name=value", field=field)
        if key in out:
            raise InputError(f"{key} is given twice", field=field)
        out[key] = value
    return out


def _normalized(cells: Mapping[str, Any], *, is_csv: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """The row as :class:`_Row` reads it, and for each resource the column that set it."""
    data = {str(k): v for k, v in cells.items() if v is not None}
    requests = data.pop("requests", {})
    if not isinstance(requests, Mapping):
        raise InputError(
            f"expected a mapping of resource to quantity, got {requests!r}", field="requests"
        )
    origin = {str(name): f"requests.{name}" for name in requests}
    merged: dict[str, Any] = {str(k): v for k, v in requests.items()}
    extra = _pairs(data.pop("resources"), "resources") if "resources" in data else {}
    flat = [(col, _FLAT[col], data.pop(col)) for col in _FLAT if col in data]
    for column, resource, value in [*flat, *((("resources", n, v) for n, v in extra.items()))]:
        if resource in merged:
            raise InputError(f"{resource} is set both here and in {origin[resource]}", field=column)
        merged[resource], origin[resource] = value, column
    if merged:
        data["requests"] = merged
    if is_csv and "node_selector" in data:
        data["nodeSelector"] = _pairs(data.pop("node_selector"), "node_selector")
    return data, origin


def _row(cells: Mapping[str, Any], *, where: str, number: int, is_csv: bool) -> SimJob:
    try:
        data, origin = _normalized(cells, is_csv=is_csv)
    except InputError as error:
        raise error.located(where=where) from None
    try:
        row = _Row.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        loc = [str(part) for part in first["loc"]]
        detail = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            known = CSV_COLUMNS if is_csv else YAML_KEYS
            detail = f"unknown {'column' if is_csv else 'key'} (known: {', '.join(known)})"
        if loc[0] == "requests" and len(loc) > 1:
            field = origin.get(loc[1], ".".join(loc))
            detail = f"{loc[1]}: {detail}" if field == "resources" else detail
        elif loc[0] == "nodeSelector" and is_csv:
            field = "node_selector"
        else:
            field = ".".join(loc)
        raise InputError(detail, where=where, field=field) from None
    for resource, value in row.requests.items():
        if is_extended(resource) and parse_quantity(value).denominator != 1:
            raise InputError(
                f"{value!r} is not a whole number; {resource} is counted in whole devices",
                where=where,
                field=origin[resource],
            )
    namespace, _, queue = row.queue.partition("/")
    asked = _TOPOLOGY.fullmatch(row.topology)
    return SimJob(
        namespace=namespace,
        name=row.name or f"job-{number}",
        queue=queue,
        arrival=row.arrival,
        pods=row.pods,
        request=row.requests,
        duration=row.duration,
        priority_class=row.priority,
        node_selector=row.nodeSelector,
        # The core names ``field`` when the Queue's Topology cannot meet the request.
        topology=None
        if asked is None
        else TopologyRequest(
            TopologyMode(asked["mode"]), asked["level"], field=f"{where} topology"
        ),
    )


def _csv_rows(source: str, text: str) -> Iterator[tuple[str, dict[str, str]]]:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    for cells in reader:
        cells = [c.strip() for c in cells]
        if not any(cells) or cells[0].startswith("#"):
            continue  # blank lines and comments
        where = f"{source} row {reader.line_num}"
        if header is None:
            header = cells
            for column in header:
                if column not in CSV_COLUMNS or header.count(column) > 1:
                    why = "appears twice" if column in CSV_COLUMNS else "unknown column"
                    known = ", ".join(CSV_COLUMNS)
                    raise InputError(f"{why} (columns: {known})", where=where, field=column)
            for column in _REQUIRED:
                if column not in header:
                    raise InputError(
                        "missing column (the header row lacks it)", where=where, field=column
                    )
            continue
        if len(cells) != len(header):
            raise InputError(f"has {len(cells)} cells, the header {len(header)}", where=where)
        yield where, {c: v for c, v in zip(header, cells, strict=True) if v}


def _yaml_rows(source: str, text: str) -> Iterator[tuple[str, Any]]:
    try:
        document = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source} line {mark.line + 1}, column {mark.column + 1}" if mark else source
        problem = " ".join(str(getattr(error, "problem", None) or error).split())
        raise InputError(f"not valid YAML: {problem}", where=where) from None
    if isinstance(document, Mapping):
        unknown = sorted(str(k) for k in document if k != "jobs")
        if unknown:
            raise InputError(
                "unknown key; a trace is a list of jobs, or {jobs: [...]}",
                where=source,
                field=unknown[0],
            )
        document = document.get("jobs")
    if document is not None and not isinstance(document, list):
        raise InputError(
            f"expected a list of jobs, got {type(document).__name__}", where=source, field="jobs"
        )
    for i, item in enumerate(document or []):
        if not isinstance(item, Mapping):
            raise InputError(
                f"expected a mapping, got {type(item).__name__}", where=f"{source} jobs[{i}]"
            )
        yield f"{source} jobs[{i}]", item


def read_trace(path: Path) -> list[tuple[SimJob, str]]:
    """The jobs, each with where it was written, ordered by arrival and then by file order."""
    source = str(path)
    text = read_file(source)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        rows: Iterator[tuple[str, Any]] = _csv_rows(source, text)
    elif suffix in (".yaml", ".yml", ".json"):
        rows = _yaml_rows(source, text)
    else:
        raise InputError(
            "unknown trace format: name the file .csv, .yaml, .yml or .json", where=source
        )
    jobs: list[tuple[SimJob, str]] = []
    seen: dict[str, str] = {}
    for number, (where, cells) in enumerate(rows, start=1):
        job = _row(cells, where=where, number=number, is_csv=suffix == ".csv")
        if job.key in seen:
            raise InputError(
                f"job {job.key} also appears at {seen[job.key]}", where=where, field="name"
            )
        seen[job.key] = where
        jobs.append((job, where))
    if not jobs:
        raise InputError("the trace holds no jobs", where=source)
    return sorted(jobs, key=lambda pair: pair[0].arrival)  # stable: ties keep file order


def load_trace(path: Path) -> tuple[SimJob, ...]:
    """A workload trace: CSV with a header row, or YAML (a list of jobs, or ``{jobs: [...]}``)."""
    return tuple(job for job, _ in read_trace(path))
