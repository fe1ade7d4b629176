"""The CRDs in crds/ against the pydantic models in queue_controller.api.v1alpha1.

No cluster: each CRD's openAPIV3Schema is turned into a JSON Schema (the
``x-kubernetes-*`` keys dropped, ``additionalProperties: false`` added where a
schema lists properties, as kubectl's strict field validation rejects unknown
fields) and a shared corpus of objects must get the same verdict from it as
from the models.  Rules only CEL can state (they need a resource's name or
compare two fields) are checked the other way round: the model rejects the
object and the CRD carries a CEL rule about that field; those rules are run
for real on an API server, not here.
"""

from __future__ import annotations

import copy
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from queue_controller.api import v1alpha1
from queue_controller.api.v1alpha1 import (
    API_VERSION,
    GROUP,
    VERSION,
    Cohort,
    CohortSpec,
    PodGroup,
    PodGroupPhase,
    PodGroupSpec,
    PodGroupStatus,
    Queue,
    QueueOrdering,
    QueueSpec,
    TeamQuota,
    TeamQuotaSpec,
    Topology,
    TopologySpec,
)

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "crds"
EXAMPLES_DIR = ROOT / "examples"

MODELS: dict[str, type[BaseModel]] = {
    "TeamQuota": TeamQuota,
    "Cohort": Cohort,
    "Topology": Topology,
    "Queue": Queue,
    "PodGroup": PodGroup,
}
PLURALS = {
    "TeamQuota": "teamquotas",
    "Cohort": "cohorts",
    "Topology": "topologies",
    "Queue": "queues",
    "PodGroup": "podgroups",
}
KINDS = list(MODELS)
# A Topology only configures: the controller writes no status to it.
WITH_STATUS = [kind for kind in KINDS if kind != "Topology"]


# --- loading --------------------------------------------------------------------------------


@cache
def crd(kind: str) -> dict[str, Any]:
    path = CRD_DIR / f"{PLURALS[kind]}.{GROUP}.yaml"
    loaded = yaml.safe_load(path.read_text())
    assert isinstance(loaded, dict), f"{path} is not one YAML mapping"
    return loaded


def served_version(kind: str) -> dict[str, Any]:
    versions = crd(kind)["spec"]["versions"]
    assert [v["name"] for v in versions] == [VERSION]
    version: dict[str, Any] = versions[0]
    return version


def openapi(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = served_version(kind)["schema"]["openAPIV3Schema"]
    return schema


def example_objects() -> list[dict[str, Any]]:
    objects = []
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return objects


def ours(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("apiVersion", "").startswith(f"{GROUP}/")]


# --- the CRD schema as a JSON Schema ---------------------------------------------------------

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$",
)
FORMATS = jsonschema.FormatChecker(formats=())


@FORMATS.checks("date-time")
def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not _RFC3339.match(value):
        return False
    try:
        datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


_JUNCTORS = ("anyOf", "allOf", "oneOf")


def to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3 (structural) schema node as JSON Schema, with strict field checks."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "not") or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = to_json_schema(value)
        elif key in _JUNCTORS:
            out[key] = [to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


@cache
def validator(kind: str) -> jsonschema.Draft202012Validator:
    schema = to_json_schema(openapi(kind))
    # What the endpoint itself enforces: the group/version/kind and a name.
    schema["properties"]["apiVersion"] = {"const": API_VERSION}
    schema["properties"]["kind"] = {"const": kind}
    schema["properties"]["metadata"] = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1}},
    }
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=FORMATS)


def drop_nulls(value: Any) -> Any:
    """The API server prunes nulls of non-nullable fields before it validates."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def crd_errors(obj: dict[str, Any]) -> list[str]:
    kind = obj.get("kind")
    assert kind in MODELS, f"corpus object of unknown kind {kind!r}"
    errors = validator(kind).iter_errors(drop_nulls(obj))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def pydantic_errors(obj: dict[str, Any]) -> list[str]:
    try:
        MODELS[obj["kind"]].model_validate(obj)
    except ValidationError as error:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()]
    return []


# --- walking schemas and models ----------------------------------------------------------------


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (`.a.b`, `[*]` for map values, `[]` for items)."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}[*]")
    if "items" in node:
        yield from walk(node["items"], f"{path}[]")


def schema_at(kind: str, path: str) -> dict[str, Any]:
    for candidate, node in walk(openapi(kind)):
        if candidate == path:
            return node
    raise AssertionError(f"{kind} CRD has no schema at {path}")


def field_paths(node: dict[str, Any]) -> set[str]:
    return {path for path, _ in walk(node) if path and not path.endswith(("[*]", "[]"))}


def _models_in(annotation: Any) -> Iterator[tuple[str, type[BaseModel]]]:
    """The models an annotation holds, with the path step to reach them."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _models_in(typing.get_args(annotation)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _models_in(arg)
    elif origin is dict:
        for step, model in _models_in(typing.get_args(annotation)[1]):
            yield f"[*]{step}", model
    elif origin is list:
        for step, model in _models_in(typing.get_args(annotation)[0]):
            yield f"[]{step}", model
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield "", annotation


def model_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    paths = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}.{name}"
        paths.add(path)
        for step, sub in _models_in(info.annotation):
            paths |= model_paths(sub, f"{path}{step}")
    return paths


def all_rules(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, rule)
        for path, node in walk(openapi(kind))
        for rule in node.get("x-kubernetes-validations", [])
    ]


# --- CRD structure -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    scope: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    columns: dict[str, str]


EXPECTED = {
    "TeamQuota": Expected(
        scope="Cluster",
        plural="teamquotas",
        singular="teamquota",
        short_names=("tq",),
        columns={
            "Cohort": ".spec.cohort",
            "GPU Nominal": r".spec.resources.nvidia\.com/gpu.nominal",
            "GPU Used": r".status.used.nvidia\.com/gpu",
            "Borrowed": r".status.borrowed.nvidia\.com/gpu",
            "Weighted Share": ".status.fairSharing.weightedShare",
            "Admitted": ".status.admittedGangs",
            "Pending": ".status.pendingGangs",
            "Age": ".metadata.creationTimestamp",
        },
    ),
    "Cohort": Expected(
        scope="Cluster",
        plural="cohorts",
        singular="cohort",
        short_names=("coh",),
        columns={
            "Parent": ".spec.parentName",
            "Weight": ".spec.fairSharing.weight",
            "GPU Quota": r".status.subtreeQuota.nvidia\.com/gpu",
            "GPU Used": r".status.used.nvidia\.com/gpu",
            "Weighted Share": ".status.fairSharing.weightedShare",
            "Fair Sharing": ".spec.fairSharing.enabled",
            "Age": ".metadata.creationTimestamp",
        },
    ),
    "Topology": Expected(
        scope="Cluster",
        plural="topologies",
        singular="topology",
        short_names=("topo",),
        columns={
            "Broadest": ".spec.levels[0].nodeLabel",
            "Narrowest": ".spec.levels[-1:].nodeLabel",
            "Age": ".metadata.creationTimestamp",
        },
    ),
    "Queue": Expected(
        scope="Namespaced",
        plural="queues",
        singular="queue",
        short_names=("qq", "gq"),
        columns={
            "TeamQuota": ".spec.teamQuota",
            "Ordering": ".spec.ordering",
            "Topology": ".spec.topologyName",
            "Pending": ".status.pendingGangs",
            "Admitted": ".status.admittedGangs",
            "Running": ".status.runningGangs",
            "AFS Usage": ".status.fairSharing.admissionFairSharingStatus.usage",
            "Age": ".metadata.creationTimestamp",
        },
    ),
    "PodGroup": Expected(
        scope="Namespaced",
        plural="podgroups",
        singular="podgroup",
        short_names=("pg",),
        columns={
            "Queue": ".spec.queue",
            "Phase": ".status.phase",
            "MinMember": ".spec.minMember",
            "Running": ".status.running",
            "Requeues": ".status.requeueCount",
            "Reason": ".status.reason",
            "Domain": ".status.topologyDomain",
            "Reserved": ".status.reservedStart",
            "ETA": ".status.eta.start",
            "Kind": ".metadata.labels.queue-controller\\.io/workload-kind",
            "Age": ".metadata.creationTimestamp",
        },
    ),
}


@pytest.mark.parametrize("kind", KINDS)
def test_crd_names_group_version_and_scope(kind: str) -> None:
    expected = EXPECTED[kind]
    doc = crd(kind)
    assert doc["apiVersion"] == "apiextensions.k8s.io/v1"
    assert doc["kind"] == "CustomResourceDefinition"
    assert doc["metadata"]["name"] == f"{expected.plural}.{GROUP}"
    spec = doc["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == expected.scope
    names = spec["names"]
    assert names["kind"] == kind
    assert names["listKind"] == f"{kind}List"
    assert names["plural"] == expected.plural
    assert names["singular"] == expected.singular
    assert tuple(names["shortNames"]) == expected.short_names
    assert "q" not in names["shortNames"]
    assert names["categories"] == ["queue-controller"]
    version = served_version(kind)
    assert version["served"] is True
    assert version["storage"] is True
    assert version.get("subresources") == ({"status": {}} if kind in WITH_STATUS else None)


def test_short_names_are_unique_across_crds() -> None:
    short = [s for kind in KINDS for s in crd(kind)["spec"]["names"]["shortNames"]]
    assert len(short) == len(set(short))


@pytest.mark.parametrize("kind", KINDS)
def test_printer_columns(kind: str) -> None:
    columns = served_version(kind)["additionalPrinterColumns"]
    assert {c["name"]: c["jsonPath"] for c in columns} == EXPECTED[kind].columns
    assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    for column in columns:
        assert column["type"] in ("string", "integer", "number", "boolean", "date")


def _column_schema(kind: str, json_path: str) -> dict[str, Any] | None:
    """Follow a printer column's JSONPath (dots escaped with `\\.`) through the schema."""
    steps = [s.replace("\\.", ".") for s in re.split(r"(?<!\\)\.", json_path)[1:]]
    if steps[0] == "metadata":
        return {"type": "string"}
    node: dict[str, Any] | None = openapi(kind)
    for step in steps:
        if node is None:
            return None
        if (item := re.fullmatch(r"(\w+)\[[-0-9:*]+\]", step)) is not None:  # a list's items
            node = node.get("properties", {}).get(item[1], {}).get("items")
        elif step in node.get("properties", {}):
            node = node["properties"][step]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


@pytest.mark.parametrize(
    ("kind", "column"),
    [(kind, name) for kind in KINDS for name in EXPECTED[kind].columns],
)
def test_printer_column_points_at_a_field_of_its_type(kind: str, column: str) -> None:
    definition = next(
        c for c in served_version(kind)["additionalPrinterColumns"] if c["name"] == column
    )
    node = _column_schema(kind, definition["jsonPath"])
    assert node is not None, f"{definition['jsonPath']} names no field of the schema"
    if definition["type"] == "integer":
        assert node.get("type") == "integer"
    if "x-kubernetes-int-or-string" in node:
        assert definition["type"] == "string"


def _structural_problems(node: dict[str, Any], path: str, root: bool = False) -> Iterator[str]:
    if "$ref" in node:
        yield f"{path}: $ref"
    int_or_string = node.get("x-kubernetes-int-or-string") is True
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if int_or_string:
        if "type" in node:
            yield f"{path}: type must be empty with x-kubernetes-int-or-string"
        # The one anyOf a structural schema takes here is exactly this pair.
        if node.get("anyOf") != [{"type": "integer"}, {"type": "string"}]:
            yield f"{path}: int-or-string needs anyOf [{{type: integer}}, {{type: string}}]"
    elif "type" not in node and not preserve:
        yield f"{path}: no type"
    for junctor in (*_JUNCTORS, "not"):
        subs = node.get(junctor, [])
        for i, sub in enumerate(subs if isinstance(subs, list) else [subs]):
            if not int_or_string or junctor != "anyOf":
                forbidden = {"type", "default", "additionalProperties", "nullable", "description"}
                for key in forbidden & sub.keys():
                    yield f"{path}.{junctor}[{i}]: {key} inside a junctor"
    if "properties" in node and "additionalProperties" in node:
        yield f"{path}: properties and additionalProperties together"
    if root and node["properties"]["metadata"] != {"type": "object"}:
        yield ".metadata: the API server owns it; the schema may only say `type: object`"
    for name, sub in node.get("properties", {}).items():
        yield from _structural_problems(sub, f"{path}.{name}")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _structural_problems(node["additionalProperties"], f"{path}[*]")
    if "items" in node:
        yield from _structural_problems(node["items"], f"{path}[]")


@pytest.mark.parametrize("kind", KINDS)
def test_schema_is_structural(kind: str) -> None:
    schema = openapi(kind)
    assert schema["type"] == "object"
    assert "additionalProperties" not in schema
    assert list(_structural_problems(schema, "", root=True)) == []


def test_structural_check_catches_a_typed_int_or_string_anyof() -> None:
    bad = {
        "x-kubernetes-int-or-string": True,
        "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^x$"}],
    }
    assert list(_structural_problems(bad, ".q")) != []


@pytest.mark.parametrize("kind", WITH_STATUS)
def test_conditions_are_a_map_list_keyed_by_type(kind: str) -> None:
    conditions = schema_at(kind, ".status.conditions")
    assert conditions["type"] == "array"
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    # A list-map key must be required (or defaulted) for the API server to accept the CRD.
    assert "type" in item["required"]
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert item["properties"]["lastTransitionTime"]["format"] == "date-time"
    assert item["properties"]["observedGeneration"]["type"] == "integer"


QUANTITY_PATTERN = (
    r"^(\+)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$"
)


@pytest.mark.parametrize("limit", ["nominal", "borrowingLimit", "lendingLimit"])
def test_quantities_are_non_negative_int_or_string(limit: str) -> None:
    node = schema_at("TeamQuota", f".spec.resources[*].{limit}")
    assert node["x-kubernetes-int-or-string"] is True
    assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert node["minimum"] == 0  # integers
    assert node["pattern"] == QUANTITY_PATTERN  # strings


def test_resources_are_bounded_for_the_cel_cost_budget() -> None:
    resources = schema_at("TeamQuota", ".spec.resources")
    assert 8 <= resources["maxProperties"] <= 15
    assert schema_at("TeamQuota", ".spec.cohort")["maxLength"] == 63


# --- CEL rules: well formed and about fields that exist -----------------------------------------

_REASONS = {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"}
_SELF_PATH = re.compile(r"\bself((?:\.\w+(?!\w|\()|\[\w+\])*)")


def _resolve(node: dict[str, Any], steps: str) -> dict[str, Any] | None:
    """Follow `.field` and `[key]` steps, as CEL rules and fieldPaths write them."""
    here: Any = node
    for step in re.findall(r"\.\w+|\[\w+\]", steps):
        if step.startswith("["):
            here = here.get("additionalProperties")
        else:
            here = here.get("properties", {}).get(step[1:])
        if not isinstance(here, dict):
            return None
    return here


@pytest.mark.parametrize(
    ("kind", "path", "index"),
    [
        pytest.param(kind, path, i, id=f"{kind}{path or '.'}[{i}]")
        for kind in KINDS
        for path, node in walk(openapi(kind))
        for i, _ in enumerate(node.get("x-kubernetes-validations", []))
    ],
)
def test_cel_rule_is_well_formed(kind: str, path: str, index: int) -> None:
    node = schema_at(kind, path)
    rule = node["x-kubernetes-validations"][index]
    assert set(rule) <= {"rule", "message", "messageExpression", "reason", "fieldPath"}
    assert rule["message"].strip()
    assert "\n" not in rule["message"]
    assert rule.get("reason", "FieldValueInvalid") in _REASONS
    if "fieldPath" in rule:
        assert _resolve(node, rule["fieldPath"]) is not None, rule["fieldPath"]
    references = _SELF_PATH.findall(rule["rule"])
    assert references, "a rule that never reads self"
    for steps in references:
        if path == "" and steps == ".metadata.name":
            continue  # the API server lets a root rule read the name, which no schema may type
        assert _resolve(node, steps) is not None, f"self{steps} is no field at {path}"


def test_cel_field_check_catches_a_typo() -> None:
    node = schema_at("TeamQuota", ".spec")
    assert _resolve(node, ".cohort") is not None
    assert _resolve(node, ".cohrot") is None
    assert _resolve(node, ".resources[name].nominal") is not None
    assert _resolve(node, ".resources[name].nominl") is None


# --- the models and the CRDs name the same fields -----------------------------------------------

SPEC_MODELS = [
    pytest.param("TeamQuota", TeamQuotaSpec, id="TeamQuotaSpec"),
    pytest.param("Cohort", CohortSpec, id="CohortSpec"),
    pytest.param("Topology", TopologySpec, id="TopologySpec"),
    pytest.param("Queue", QueueSpec, id="QueueSpec"),
    pytest.param("PodGroup", PodGroupSpec, id="PodGroupSpec"),
]


@pytest.mark.parametrize(("kind", "model"), SPEC_MODELS)
def test_spec_fields_match_the_model(kind: str, model: type[BaseModel]) -> None:
    assert field_paths(schema_at(kind, ".spec")) == model_paths(model)


def test_model_walk_reaches_nested_models() -> None:
    assert ".resources[*].lendingLimit" in model_paths(TeamQuotaSpec)
    assert ".requeue.backoffLimit" in model_paths(QueueSpec)
    assert ".conditions[].lastTransitionTime" in model_paths(PodGroupStatus)


def test_podgroup_status_has_every_model_field() -> None:
    crd_status = field_paths(schema_at("PodGroup", ".status"))
    assert model_paths(PodGroupStatus) <= crd_status
    # ... and what the controller reports beyond the model's fields.
    assert {".admittedAt", ".runningAt", ".running", ".reason", ".message"} <= crd_status


@pytest.mark.parametrize(("kind", "model"), SPEC_MODELS)
def test_required_fields_match_the_model(kind: str, model: type[BaseModel]) -> None:
    def required(node: dict[str, Any], model: type[BaseModel]) -> Iterator[tuple[str, bool]]:
        for name, info in model.model_fields.items():
            yield name, name in node.get("required", [])
            for step, sub in _models_in(info.annotation):
                sub_node = _resolve(node, f".{name}" + ("[x]" if step == "[*]" else ""))
                assert sub_node is not None
                if step == "[]":  # a list of objects: the items say what they require
                    sub_node = sub_node["items"]
                yield from ((f"{name}{step}.{n}", r) for n, r in required(sub_node, sub))

    def model_required(model: type[BaseModel]) -> Iterator[tuple[str, bool]]:
        for name, info in model.model_fields.items():
            yield name, info.is_required()
            for step, sub in _models_in(info.annotation):
                yield from ((f"{name}{step}.{n}", r) for n, r in model_required(sub))

    assert dict(required(schema_at(kind, ".spec"), model)) == dict(model_required(model))


def _crd_default(node: dict[str, Any]) -> Any:
    """The value the API server's defaulting gives an absent field."""
    if "default" not in node:
        return None
    value = copy.deepcopy(node["default"])
    if isinstance(value, dict):
        for name, sub in node.get("properties", {}).items():
            if name not in value and (sub_default := _crd_default(sub)) is not None:
                value[name] = sub_default
    return value


@pytest.mark.parametrize(("kind", "model"), SPEC_MODELS)
def test_defaults_match_the_model(kind: str, model: type[BaseModel]) -> None:
    spec = schema_at(kind, ".spec")
    for name, info in model.model_fields.items():
        if info.is_required():
            continue
        default = info.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump(exclude_none=True)
        crd_default = _crd_default(spec["properties"][name])
        if default in (None, "", {}, []):
            # Absent means the same as the model's empty default; nothing to fill in.
            assert crd_default is None, name
        else:
            assert crd_default == default, name


def test_enums_match_the_model() -> None:
    ordering = schema_at("Queue", ".spec.ordering")
    assert ordering["enum"] == [o.value for o in QueueOrdering]
    preemption = ".spec.preemption"
    assert schema_at("TeamQuota", f"{preemption}.reclaimWithinCohort")["enum"] == [
        p.value for p in v1alpha1.ReclaimWithinCohort
    ]
    assert schema_at("TeamQuota", f"{preemption}.withinTeamQuota")["enum"] == [
        p.value for p in v1alpha1.WithinTeamQuota
    ]
    assert schema_at("TeamQuota", f"{preemption}.borrowWithinCohort.policy")["enum"] == [
        p.value for p in v1alpha1.BorrowWithinCohortPolicy
    ]
    phase = schema_at("PodGroup", ".status.phase")
    assert phase["enum"] == [p.value for p in PodGroupPhase]
    status = v1alpha1.Condition.model_fields["status"].annotation
    assert schema_at("PodGroup", ".status.conditions[].status")["enum"] == list(
        typing.get_args(status)
    )


# --- examples ----------------------------------------------------------------------------------


def test_examples_hold_every_kind() -> None:
    kinds = sorted(o["kind"] for o in ours(example_objects()))
    assert kinds == [
        "Cohort",
        "Cohort",
        "Cohort",
        "Cohort",
        "PodGroup",
        "Queue",
        "Queue",
        "Queue",
        "TeamQuota",
        "TeamQuota",
        "TeamQuota",
        "Topology",
        "Topology",
    ]


@pytest.mark.parametrize(
    "obj",
    [pytest.param(o, id=f"{o['kind']}/{o['metadata']['name']}") for o in ours(example_objects())],
)
def test_example_is_valid_for_the_crd_and_the_model(obj: dict[str, Any]) -> None:
    assert crd_errors(obj) == []
    assert pydantic_errors(obj) == []
    namespaced = EXPECTED[obj["kind"]].scope == "Namespaced"
    assert ("namespace" in obj["metadata"]) == namespaced


def test_examples_fit_together() -> None:
    objects = example_objects()
    quotas = {o["metadata"]["name"]: o for o in objects if o["kind"] == "TeamQuota"}
    queues = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o
        for o in objects
        if o["kind"] == "Queue"
    }
    # fabric (examples/topology.yaml) shows topology-aware gangs, on a quota of its own.
    fabric = quotas.pop("fabric")
    assert "cohort" not in fabric["spec"]
    topologies = {o["metadata"]["name"] for o in objects if o["kind"] == "Topology"}
    assert queues.pop(("fabric", "nvlink"))["spec"]["topologyName"] in topologies
    assert set(quotas) == {"research", "prod"}
    for quota in quotas.values():
        assert quota["spec"]["cohort"] == "gpu-pool"
        assert {"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "cpu", "memory"} <= set(
            quota["spec"]["resources"]
        )
    assert {ns for ns, _ in queues} == {"research", "prod"}
    assert "StrictFIFO" in [q["spec"].get("ordering") for q in queues.values()]
    for q in queues.values():
        assert q["spec"]["teamQuota"] in quotas

    namespaces = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    assert {ns for ns, _ in queues} <= namespaces
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert len(jobs) >= 5
    queues[("fabric", "nvlink")] = {}
    for job in jobs:
        assert job["apiVersion"] == "batch/v1"
        queue_name = job["metadata"]["labels"]["queue-controller.io/queue"]
        assert (job["metadata"]["namespace"], queue_name) in queues
        # Created unsuspended: the webhook holds them, as it would a user's Job.
        assert "suspend" not in job["spec"]

    for group in (o for o in objects if o["kind"] == "PodGroup"):
        assert (group["metadata"]["namespace"], group["spec"]["queue"]) in queues


# --- one corpus, two verdicts -------------------------------------------------------------------


def cohort(spec: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    body = {"apiVersion": API_VERSION, "kind": "Cohort", "metadata": {"name": "gpu-pool"}}
    return body | ({} if spec is None else {"spec": spec}) | extra


BLOCK = "topology.queue-controller.io/block"
RACK = "topology.queue-controller.io/rack"
HOST = "kubernetes.io/hostname"


def topology(*labels: Any, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Topology",
        "metadata": {"name": "racks"},
        "spec": {"levels": [{"nodeLabel": label} for label in labels]},
        **extra,
    }


def teamquota(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TeamQuota",
        "metadata": {"name": "research"},
        "spec": spec,
        **extra,
    }


def queue(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Queue",
        "metadata": {"name": "training", "namespace": "research"},
        "spec": spec,
        **extra,
    }


def podgroup(spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "pretrain", "namespace": "research"},
        "spec": spec,
        **extra,
    }


GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
PG_SPEC = {"queue": "training", "minMember": 4}

# Objects both the CRD schema and the model must accept.
VALID = {
    "tq-int-and-string-quantities": teamquota(
        {
            "cohort": "gpu-pool",
            "resources": {
                GPU: {"nominal": 16, "borrowingLimit": 8, "lendingLimit": "4"},
                "cpu": {"nominal": "500m"},
                "memory": {"nominal": "64Gi", "lendingLimit": 2**30},
            },
        }
    ),
    "tq-exponent-decimal-and-plus": teamquota(
        {
            "resources": {
                "cpu": {"nominal": "1.5"},
                "memory": {"nominal": "1e9"},
                MIG: {"nominal": "+7"},
            }
        }
    ),
    "tq-whole-extended-with-suffix": teamquota({"resources": {GPU: {"nominal": "2k"}}}),
    "tq-kubernetes-io-may-be-fractional": teamquota(
        {"resources": {"example.kubernetes.io/bandwidth": {"nominal": "1500m"}}}
    ),
    "tq-lending-without-cohort": teamquota({"resources": {GPU: {"nominal": 8, "lendingLimit": 8}}}),
    "tq-null-limit": teamquota({"resources": {GPU: {"nominal": 8, "lendingLimit": None}}}),
    "tq-empty-spec": teamquota({}),
    "tq-preemption-empty": teamquota({"preemption": {}}),
    "tq-preemption-full": teamquota(
        {
            "cohort": "gpu-pool",
            "preemption": {
                "reclaimWithinCohort": "Any",
                "withinTeamQuota": "LowerOrNewerEqualPriority",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": -100},
            },
        }
    ),
    "tq-preemption-lower-priority": teamquota(
        {
            "preemption": {
                "reclaimWithinCohort": "LowerPriority",
                "withinTeamQuota": "LowerPriority",
                "borrowWithinCohort": {"policy": "LowerPriority"},
            }
        }
    ),
    "tq-preemption-borrow-never": teamquota(
        {"preemption": {"withinTeamQuota": "Never", "borrowWithinCohort": {"policy": "Never"}}}
    ),
    "tq-fair-weight": teamquota({"cohort": "gpu-pool", "fairSharing": {"weight": 2}}),
    "tq-fair-weight-quantity": teamquota({"fairSharing": {"weight": "1500m"}}),
    "tq-fair-weight-zero": teamquota({"fairSharing": {"weight": 0}}),
    "tq-fair-empty": teamquota({"fairSharing": {}}),
    "coh-minimal": cohort(),
    "coh-fair": cohort({"fairSharing": {"enabled": True}}),
    "coh-fair-off": cohort({"fairSharing": {"enabled": False}}),
    "coh-empty-fair": cohort({"fairSharing": {}}),
    "coh-in-a-tree": cohort(
        {
            "parentName": "org",
            "resources": {GPU: {"nominal": 8, "borrowingLimit": 4, "lendingLimit": 2}},
            "fairSharing": {"weight": "1.5"},
        }
    ),
    "topo-block-rack-host": topology(BLOCK, RACK, HOST),
    "topo-one-level": topology(RACK),
    "topo-clique": topology(BLOCK, "nvidia.com/gpu.clique", HOST),
    "topo-unprefixed-label": topology("rack"),
    "topo-sixteen-levels": topology(*(f"example.com/l{i}" for i in range(16))),
    "topo-balanced": topology(RACK)
    | {"spec": {"levels": [{"nodeLabel": RACK}], "placement": "Balanced"}},
    "topo-best-fit": topology(RACK)
    | {"spec": {"levels": [{"nodeLabel": RACK}], "placement": "BestFit"}},
    "q-minimal": queue({"teamQuota": "research"}),
    "q-topology": queue({"teamQuota": "research", "topologyName": "racks"}),
    "q-full": queue(
        {
            "teamQuota": "prod",
            "ordering": "StrictFIFO",
            "podsReadyTimeoutSeconds": 0,
            "requeue": {"backoffBaseSeconds": 30, "backoffMaxSeconds": 30, "backoffLimit": 0},
        }
    ),
    "pg-minimal": podgroup({"queue": "training", "minMember": 1}),
    "pg-topology-assignment": podgroup(
        PG_SPEC,
        status={
            "phase": "Admitted",
            "placement": {"h100-0": 2, "h100-1": 2},
            "topologyDomain": "block-a/rack-2",
            "topologyAssignment": {
                "main": {
                    "domain": "block-a/rack-2",
                    "slices": [{"h100-0": 2}, {"h100-1": 2}],
                }
            },
        },
    ),
    "pg-with-status": podgroup(
        {**PG_SPEC, "timeoutSeconds": 3600},
        status={
            "phase": "Evicted",
            "placement": {"h100-0": 2, "h100-1": 2},
            "requeueCount": 1,
            "requeueAt": "2026-11-29T09:10:00Z",
            "conditions": [
                {"type": "PodsReady", "status": "False", "reason": "Timeout", "message": "x"}
            ],
        },
    ),
}

# Objects both must reject.
INVALID = {
    "tq-negative-nominal-string": teamquota({"resources": {GPU: {"nominal": "-1"}}}),
    "tq-negative-nominal-int": teamquota({"resources": {"cpu": {"nominal": -1}}}),
    "tq-negative-borrowing": teamquota(
        {"cohort": "gpu-pool", "resources": {"cpu": {"nominal": 1, "borrowingLimit": "-500m"}}}
    ),
    "tq-not-a-quantity": teamquota({"resources": {"memory": {"nominal": "64GB"}}}),
    "tq-boolean-quantity": teamquota({"resources": {GPU: {"nominal": True}}}),
    "tq-missing-nominal": teamquota({"resources": {GPU: {"lendingLimit": 8}}}),
    "tq-unknown-spec-field": teamquota({"quota": {GPU: 8}}),
    "tq-unknown-limit-field": teamquota({"resources": {GPU: {"nominal": 8, "max": 16}}}),
    "tq-cohort-not-a-string": teamquota({"cohort": 7}),
    "tq-missing-spec": {k: v for k, v in teamquota({}).items() if k != "spec"},
    "tq-wrong-api-version": {**teamquota({}), "apiVersion": f"{GROUP}/v1beta1"},
    "tq-unknown-top-level-field": teamquota({}, data={}),
    "q-ordering-lifo": queue({"teamQuota": "research", "ordering": "LIFO"}),
    "q-teamquota-wrong-type": queue({"teamQuota": 42}),
    "q-teamquota-empty": queue({"teamQuota": ""}),
    "q-missing-teamquota": queue({"ordering": "StrictFIFO"}),
    "q-negative-timeout": queue({"teamQuota": "research", "podsReadyTimeoutSeconds": -1}),
    "q-negative-backoff": queue({"teamQuota": "research", "requeue": {"backoffBaseSeconds": -5}}),
    "q-unknown-requeue-field": queue({"teamQuota": "research", "requeue": {"attempts": 3}}),
    "pg-minmember-negative": podgroup({"queue": "training", "minMember": -1}),
    "pg-missing-minmember": podgroup({"queue": "training"}),
    "pg-queue-empty": podgroup({"queue": "", "minMember": 1}),
    "pg-unknown-phase": podgroup(PG_SPEC, status={"phase": "Queued"}),
    "pg-negative-placement": podgroup(PG_SPEC, status={"placement": {"h100-0": -1}}),
    "pg-negative-requeue-count": podgroup(PG_SPEC, status={"requeueCount": -1}),
    "pg-requeue-at-not-a-time": podgroup(PG_SPEC, status={"requeueAt": "tomorrow"}),
    "pg-condition-status-maybe": podgroup(
        PG_SPEC, status={"conditions": [{"type": "Admitted", "status": "Maybe"}]}
    ),
    "pg-condition-without-type": podgroup(PG_SPEC, status={"conditions": [{"status": "True"}]}),
    "tq-cohort-not-dns-label": teamquota({"cohort": "GPU_Pool"}),
    "tq-float-quantity": teamquota({"resources": {"cpu": {"nominal": 1.5}}}),
    "tq-quantity-with-spaces": teamquota({"resources": {"cpu": {"nominal": " 8 "}}}),
    "tq-too-many-resources": teamquota(
        {"resources": {f"example.com/r{i}": {"nominal": 1} for i in range(16)}}
    ),
    "q-integer-as-string": queue({"teamQuota": "research", "podsReadyTimeoutSeconds": "600"}),
    "tq-reclaim-unknown": teamquota({"preemption": {"reclaimWithinCohort": "Always"}}),
    "tq-within-any": teamquota({"preemption": {"withinTeamQuota": "Any"}}),
    "tq-within-cluster-queue-name": teamquota({"preemption": {"withinClusterQueue": "Never"}}),
    "tq-borrow-any": teamquota(
        {"preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "Any"}}}
    ),
    "tq-borrow-as-string": teamquota({"preemption": {"borrowWithinCohort": "Never"}}),
    "tq-threshold-as-string": teamquota(
        {
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": "100"},
            }
        }
    ),
    "tq-threshold-above-int32": teamquota(
        {
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 2**31},
            }
        }
    ),
    "tq-unknown-preemption-field": teamquota({"preemption": {"reclaim": "Any"}}),
    "tq-fair-weight-negative": teamquota({"fairSharing": {"weight": -1}}),
    "tq-fair-weight-negative-string": teamquota({"fairSharing": {"weight": "-1"}}),
    "tq-fair-weight-float": teamquota({"fairSharing": {"weight": 1.5}}),
    "tq-fair-unknown-field": teamquota({"fairSharing": {"enabled": True}}),
    "topo-no-levels": topology(),
    "topo-missing-spec": {k: v for k, v in topology(RACK).items() if k != "spec"},
    "topo-seventeen-levels": topology(*(f"example.com/l{i}" for i in range(17))),
    "topo-label-not-a-key": topology("rack name"),
    "topo-label-two-slashes": topology("a/b/c"),
    "topo-level-unknown-field": topology(RACK) | {"spec": {"levels": [{"label": RACK}]}},
    "topo-level-as-string": topology() | {"spec": {"levels": [RACK]}},
    "topo-placement-unknown": topology(RACK)
    | {"spec": {"levels": [{"nodeLabel": RACK}], "placement": "Spread"}},
    "q-topology-name-not-dns": queue({"teamQuota": "research", "topologyName": "Racks_1"}),
    "pg-slice-negative": podgroup(
        PG_SPEC, status={"topologyAssignment": {"main": {"slices": [{"h100-0": -1}]}}}
    ),
    "coh-enabled-as-string": cohort({"fairSharing": {"enabled": "true"}}),
    "coh-parent-not-a-name": cohort({"parentName": "Org_1"}),
    "coh-unknown-fair-field": cohort({"fairSharing": {"share": 1}}),
    "coh-negative-weight": cohort({"fairSharing": {"weight": -1}}),
}


@pytest.mark.parametrize("obj", [pytest.param(o, id=i) for i, o in VALID.items()])
def test_both_accept(obj: dict[str, Any]) -> None:
    assert crd_errors(obj) == []
    assert pydantic_errors(obj) == []


@pytest.mark.parametrize("obj", [pytest.param(o, id=i) for i, o in INVALID.items()])
def test_both_reject(obj: dict[str, Any]) -> None:
    assert crd_errors(obj) != []
    assert pydantic_errors(obj) != []


def test_a_podgroup_of_no_members_is_refused_by_the_crd_but_read_by_the_model() -> None:
    # On purpose: the API server refuses a new one, and one written before the CRD
    # said so is still read, so that its gang is InvalidSpec by name (kube/gangs.py)
    # rather than its PodGroup left out as unreadable.
    zero = podgroup({"queue": "training", "minMember": 0})
    assert any("minMember" in error for error in crd_errors(zero))
    assert pydantic_errors(zero) == []


@dataclass(frozen=True)
class CelCase:
    obj: dict[str, Any]
    kind: str
    needles: tuple[str, ...]  # what one CEL rule's text must all mention
    message: str  # what that rule's message must mention


# Objects only a CEL rule can reject: the schema passes them, the model must not.
CEL_ONLY = {
    "tq-fractional-gpu-nominal": CelCase(
        teamquota({"resources": {GPU: {"nominal": "1.5"}}}),
        "TeamQuota",
        ("self[name].nominal", "isInteger()"),
        "nominal",
    ),
    "tq-fractional-mig-borrowing": CelCase(
        teamquota(
            {"cohort": "gpu-pool", "resources": {MIG: {"nominal": 4, "borrowingLimit": "500m"}}}
        ),
        "TeamQuota",
        ("self[name].borrowingLimit", "isInteger()"),
        "borrowingLimit",
    ),
    "tq-fractional-gpu-lending": CelCase(
        teamquota({"resources": {GPU: {"nominal": 8, "lendingLimit": "2.5"}}}),
        "TeamQuota",
        ("self[name].lendingLimit", "isInteger()"),
        "lendingLimit",
    ),
    "tq-lending-above-nominal": CelCase(
        teamquota({"resources": {"cpu": {"nominal": "2", "lendingLimit": "2500m"}}}),
        "TeamQuota",
        ("self.lendingLimit", "self.nominal", "compareTo"),
        "lendingLimit cannot exceed nominal",
    ),
    "tq-lending-int-above-string-nominal": CelCase(
        teamquota({"resources": {"memory": {"nominal": "1Gi", "lendingLimit": 2**30 + 1}}}),
        "TeamQuota",
        ("self.lendingLimit", "quantity(self.nominal)"),
        "lendingLimit cannot exceed nominal",
    ),
    "tq-lending-int-above-int-nominal": CelCase(
        teamquota({"resources": {GPU: {"nominal": 8, "lendingLimit": 9}}}),
        "TeamQuota",
        ("int(self.lendingLimit) <= int(self.nominal)",),
        "lendingLimit cannot exceed nominal",
    ),
    "tq-borrowing-without-cohort": CelCase(
        teamquota({"resources": {GPU: {"nominal": 8, "borrowingLimit": 8}}}),
        "TeamQuota",
        ("self.cohort", "borrowingLimit"),
        "cohort",
    ),
    "tq-borrowing-with-empty-cohort": CelCase(
        teamquota({"cohort": "", "resources": {GPU: {"nominal": 8, "borrowingLimit": 8}}}),
        "TeamQuota",
        ("self.cohort != ''", "borrowingLimit"),
        "cohort",
    ),
    "tq-threshold-without-policy": CelCase(
        teamquota({"preemption": {"borrowWithinCohort": {"maxPriorityThreshold": 100}}}),
        "TeamQuota",
        ("self.maxPriorityThreshold", "self.policy == 'LowerPriority'"),
        "maxPriorityThreshold needs policy LowerPriority",
    ),
    "tq-threshold-with-policy-never": CelCase(
        teamquota(
            {"preemption": {"borrowWithinCohort": {"policy": "Never", "maxPriorityThreshold": 0}}}
        ),
        "TeamQuota",
        ("self.maxPriorityThreshold", "self.policy == 'LowerPriority'"),
        "maxPriorityThreshold needs policy LowerPriority",
    ),
    "tq-borrow-without-reclaim": CelCase(
        teamquota({"preemption": {"borrowWithinCohort": {"policy": "LowerPriority"}}}),
        "TeamQuota",
        ("self.borrowWithinCohort.policy", "self.reclaimWithinCohort != 'Never'"),
        "reclaimWithinCohort",
    ),
    "tq-borrow-with-reclaim-never": CelCase(
        teamquota(
            {
                "preemption": {
                    "reclaimWithinCohort": "Never",
                    "borrowWithinCohort": {"policy": "LowerPriority"},
                }
            }
        ),
        "TeamQuota",
        ("self.borrowWithinCohort.policy", "self.reclaimWithinCohort != 'Never'"),
        "reclaimWithinCohort",
    ),
    "topo-duplicate-level": CelCase(
        topology(BLOCK, RACK, BLOCK),
        "Topology",
        ("j.nodeLabel == i.nodeLabel",),
        "unique",
    ),
    "topo-hostname-not-last": CelCase(
        topology(BLOCK, HOST, RACK),
        "Topology",
        ("'kubernetes.io/hostname'", "size(self) - 1"),
        "only be the last",
    ),
    "coh-own-parent": CelCase(
        cohort({"parentName": "gpu-pool"}),
        "Cohort",
        ("self.spec.parentName != self.metadata.name",),
        "its own parent",
    ),
    "coh-borrowing-without-parent": CelCase(
        cohort({"resources": {GPU: {"nominal": 1, "borrowingLimit": 1}}}),
        "Cohort",
        ("self.parentName", "borrowingLimit"),
        "parentName",
    ),
    "coh-fractional-gpu": CelCase(
        cohort({"resources": {GPU: {"nominal": "1.5"}}}),
        "Cohort",
        ("self[name].nominal", "isInteger()"),
        "nominal",
    ),
    "tq-empty-resource-name": CelCase(
        teamquota({"resources": {"": {"nominal": 1}}}),
        "TeamQuota",
        ("name.size() > 0",),
        "resource name",
    ),
}


@pytest.mark.parametrize("case", [pytest.param(c, id=i) for i, c in CEL_ONLY.items()])
def test_cel_only_rules(case: CelCase) -> None:
    assert crd_errors(case.obj) == [], "the schema alone should pass this; only CEL rejects it"
    assert pydantic_errors(case.obj) != []
    matching = [
        rule
        for path, rule in all_rules(case.kind)
        if (path == "" or path.startswith(".spec")) and all(n in rule["rule"] for n in case.needles)
    ]
    assert matching, f"no CEL rule mentions {case.needles}"
    assert any(case.message in rule["message"] for rule in matching)


def test_queue_backoff_base_above_max_is_cel_only() -> None:
    obj = queue(
        {"teamQuota": "research", "requeue": {"backoffBaseSeconds": 600, "backoffMaxSeconds": 60}}
    )
    assert crd_errors(obj) == [], "the schema alone should pass this; only CEL rejects it"
    assert pydantic_errors(obj) != []


def test_queue_backoff_rule_is_in_the_crd() -> None:
    (rule,) = schema_at("Queue", ".spec.requeue")["x-kubernetes-validations"]
    assert "self.backoffBaseSeconds" in rule["rule"]
    assert "self.backoffMaxSeconds" in rule["rule"]
    assert "<=" in rule["rule"]
    assert rule["fieldPath"] == ".backoffBaseSeconds"


def test_corpus_is_large_and_covers_every_kind() -> None:
    corpus = [*VALID.values(), *INVALID.values(), *(c.obj for c in CEL_ONLY.values())]
    assert len(corpus) >= 12
    assert {o["kind"] for o in VALID.values()} == set(KINDS)
    assert {o["kind"] for o in INVALID.values()} == set(KINDS)
