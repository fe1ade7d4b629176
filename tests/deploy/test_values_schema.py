"""values.schema.json: the chart's values, typed and closed.

helm lint, template, install and upgrade validate the values against it, so a misspelt key
(which the templates would silently ignore) or a mistyped value stops the release with a line
that names the field. These tests hold the schema to values.yaml, to the templates and to
the settings the controller and the node agent accept.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any, get_args

import annotated_types
import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml
from pydantic_settings import BaseSettings

from queue_controller.agent.settings import AgentSettings
from queue_controller.controller.settings import Settings
from tests.deploy.chart import CHART, env, helm, render

Schema = dict[str, Any]
KeyPath = tuple[str | int, ...]

SCHEMA: Schema = json.loads((CHART / "values.schema.json").read_text())
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)
HELPERS = (CHART / "templates" / "_helpers.tpl").read_text()
_extra = re.search(r'define "queue-controller\.extraSettings" -}}\n(.+)\n', HELPERS)
assert _extra, "no queue-controller.extraSettings in _helpers.tpl"
EXTRA_SETTINGS = _extra.group(1).split()

# Keys the schema accepts that values.yaml leaves out (its default is the API's).
OPTIONAL = {
    "livenessProbe.successThreshold",
    "livenessProbe.terminationGracePeriodSeconds",
    "readinessProbe.successThreshold",
    "readinessProbe.terminationGracePeriodSeconds",
    "webhook.namespaceSelector.matchLabels",
    "nodeAgent.updateStrategy.rollingUpdate.maxSurge",
}


def dotted(path: KeyPath) -> str:
    return ".".join(map(str, path))


def resolve(node: Schema) -> Schema:
    """A property's schema, its $ref followed (draft-07 ignores a $ref's other keywords)."""
    ref: str | None = node.get("$ref")
    if ref is None:
        return node
    found: Schema = SCHEMA["definitions"][ref.removeprefix("#/definitions/")]
    return found


def schema_at(path: str) -> Schema:
    node = SCHEMA
    for key in path.split("."):
        node = resolve(resolve(node)["properties"][key])
    return node


def walk(
    value: Any, node: Schema, path: KeyPath = ()
) -> Iterator[tuple[KeyPath, Any, Schema | None]]:
    """(path, value, schema) for every key and list item of values.yaml, down to the maps
    the schema leaves open (labels, resources, affinity: the user's own keys)."""
    node = resolve(node)
    if isinstance(value, dict) and "properties" in node:
        for key, child in value.items():
            entry = node["properties"].get(key)
            yield (*path, key), child, entry
            if entry is not None:
                yield from walk(child, entry, (*path, key))
    elif isinstance(value, list) and "items" in node:
        for index, item in enumerate(value):
            yield (*path, index), item, node["items"]
            yield from walk(item, node["items"], (*path, index))


def objects() -> Iterator[tuple[KeyPath, dict[str, Any], Schema]]:
    """values.yaml's objects (the root too) whose keys the schema lists."""
    yield (), VALUES, SCHEMA
    for path, value, node in walk(VALUES, SCHEMA):
        if isinstance(value, dict) and node is not None and "properties" in resolve(node):
            yield path, value, resolve(node)


def template_error(*flags: str) -> str:
    result = helm("template", "queue-controller", str(CHART), *flags, check=False)
    assert result.returncode != 0, "the render succeeded"
    return result.stderr


# -- the schema itself ---------------------------------------------------------------------


def test_the_schema_is_draft_07_and_the_defaults_fit() -> None:
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    VALIDATOR.validate(VALUES)


def test_every_value_has_a_described_schema_entry() -> None:
    keys = [(path, node) for path, _, node in walk(VALUES, SCHEMA) if isinstance(path[-1], str)]
    assert [dotted(path) for path, node in keys if node is None] == []
    assert [dotted(path) for path, node in keys if node and "description" not in node] == []


def test_the_schema_has_no_key_that_values_yaml_lacks() -> None:
    """A value dropped from the chart must leave the schema too, or it would be accepted
    and ignored. Empty maps (settings, issuerRef, the selectors) take keys of their own."""
    stale = [
        dotted((*path, key))
        for path, value, node in objects()
        if value
        for key in node["properties"]
        if key not in value and dotted((*path, key)) not in OPTIONAL
    ]
    assert stale == []


def test_every_fixed_object_refuses_an_unknown_key() -> None:
    """Every object of values.yaml is closed but `settings`, whose unknown keys the
    templates refuse themselves (with the list of the keys they take)."""
    closed: list[KeyPath] = []
    open_: list[KeyPath] = []
    for path, _, node in objects():
        (closed if node.get("additionalProperties") is False else open_).append(path)
    assert open_ == [("settings",)]
    for path in closed:
        values = copy.deepcopy(VALUES)
        target: Any = values
        for key in path:
            target = target[key]
        target["typo"] = True
        found = [(tuple(e.absolute_path), e.validator) for e in VALIDATOR.iter_errors(values)]
        assert (path, "additionalProperties") in found, dotted(path)


# -- helm applies it -----------------------------------------------------------------------


REFUSED: list[tuple[str, str]] = [  # --set pairs, and what the error says
    ("replicas=two", "at '/replicas': got string, want integer"),
    ("replica=3", "at '': additional properties 'replica' not allowed"),
    ("leaderElection.enable=true", "at '/leaderElection': additional properties 'enable'"),
    ("journal.persistence.enable=true", "at '/journal/persistence': additional properties"),
    ("image.pullPolicy=Sometimes", "at '/image/pullPolicy': value must be one"),
    ("image.tag=2", "at '/image/tag': got number, want string"),
    ("webhook.failurePolicy=Maybe", "at '/webhook/failurePolicy'"),
    ("logLevel=info", "at '/logLevel': value must be one of 'DEBUG'"),
    ("webhook.port=65536", "at '/webhook/port': maximum"),
    ("metrics.port=0", "at '/metrics/port': minimum"),
    ("webhook.timeoutSeconds=31", "at '/webhook/timeoutSeconds': maximum"),
    ("leaderElection.leaseDurationSeconds=1", "at '/leaderElection/leaseDurationSeconds': minimum"),
    ("settings.gpuTaint=yes", "at '/settings/gpuTaint': got string, want bool"),
    ("settings.idleThreshold=2", "at '/settings/idleThreshold': maximum"),
    ("nodeAgent.powerFraction=lots", "at '/nodeAgent/powerFraction'"),
    ("nodeAgent.ignoredXids=13;31", "at '/nodeAgent/ignoredXids'"),
    ("podLabels.version=2", "at '/podLabels/version': got number, want string"),
    ("webhook.caBundle=-----BEGIN CERTIFICATE-----", "at '/webhook/caBundle'"),
    ("webhook.certManager.duration=1y", "at '/webhook/certManager/duration'"),
    (
        "webhook.certManager.issuerRef.kind=Issuer",
        "certManager/issuerRef': missing property 'name'",
    ),
    ("journal.persistence.size=lots", "at '/journal/persistence/size'"),
    ("metrics.serviceMonitor.interval=30", "at '/metrics/serviceMonitor/interval'"),
    ("nodeAgent.updateStrategy.type=Recreate", "at '/nodeAgent/updateStrategy/type'"),
    ("userRoles.quotaAdmin.subjects[0].name=x", "subjects/0': missing property 'kind'"),
]


@pytest.mark.parametrize(("pair", "error"), REFUSED, ids=[pair for pair, _ in REFUSED])
def test_helm_refuses_a_bad_value_and_names_it(pair: str, error: str) -> None:
    assert error in template_error("--set", pair)


def test_a_number_given_as_a_string_is_refused() -> None:
    error = template_error("--set-string", "replicas=2")
    assert "at '/replicas': got string, want integer" in error


def test_helm_lint_refuses_a_misspelt_key() -> None:
    result = helm(
        "lint", "--strict", str(CHART), "--set", "leaderElection.enable=true", check=False
    )
    assert result.returncode != 0
    assert "additional properties 'enable' not allowed" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "sets",
    [
        ("replicas=0",),  # scaled down: a Deployment of none, no PodDisruptionBudget
        ("nodeAgent.enabled=true", "nodeAgent.ignoredXids=13", "nodeAgent.powerFraction=1.2"),
        (r"managedJobsNamespaceSelector.matchLabels.queue-controller\.io/managed=true",),
        (
            "webhook.certManager.enabled=true",
            "webhook.certManager.issuerRef.name=corp-ca",
            "webhook.certManager.issuerRef.kind=ClusterIssuer",
        ),
        ("readinessProbe.successThreshold=2", "livenessProbe.terminationGracePeriodSeconds=5"),
        ("nodeAgent.enabled=true", "nodeAgent.updateStrategy.rollingUpdate.maxUnavailable=2"),
        ("metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.scrapeTimeout=10s"),
    ],
    ids=lambda sets: sets[-1],
)
def test_legitimate_values_still_render(sets: tuple[str, ...]) -> None:
    assert render(*sets)


def test_a_decimal_from_set_is_taken_as_the_string_helm_makes_it() -> None:
    """`--set x=2.5` passes the string "2.5" (helm parses integers and booleans only):
    the schema takes a decimal string wherever the setting is a float."""
    variables = env(render("settings.tickSeconds=2.5", "journal.retentionDays=0.5"))
    assert variables["QC_TICK_SECONDS"]["value"] == "2.5"
    assert variables["QC_JOURNAL_RETENTION_DAYS"]["value"] == "0.5"


# -- the settings each value feeds ---------------------------------------------------------


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


JSON_TYPES: dict[object, str | list[str]] = {
    int: "integer",
    float: ["number", "string"],  # a number, or the decimal string `--set` makes
    bool: "boolean",
    str: "string",
}
# Values passed on to a setting as they are. The ports are not: the controller takes 0 (any
# free port), a containerPort cannot be 0, so the schema asks for 1-65535.
AGENT_VALUES = "pollSeconds clearSeconds maxTemperatureC powerFraction taint nvmlRetrySeconds"
PASSED_ON: list[tuple[str, type[BaseSettings], str]] = [
    ("leaderElection.leaseDurationSeconds", Settings, "lease_duration_seconds"),
    ("leaderElection.renewDeadlineSeconds", Settings, "renew_deadline_seconds"),
    ("leaderElection.retryPeriodSeconds", Settings, "retry_period_seconds"),
    ("journal.retentionDays", Settings, "journal_retention_days"),
    ("journal.maxRows", Settings, "journal_max_rows"),
    ("logLevel", Settings, "log_level"),
    *((f"settings.{key}", Settings, snake(key)) for key in EXTRA_SETTINGS),
    *((f"nodeAgent.{key}", AgentSettings, snake(key)) for key in AGENT_VALUES.split()),
]


def test_the_settings_map_takes_the_keys_the_templates_take() -> None:
    assert sorted(schema_at("settings")["properties"]) == sorted(EXTRA_SETTINGS)


@pytest.mark.parametrize(("path", "model", "field"), PASSED_ON, ids=[p[0] for p in PASSED_ON])
def test_the_schema_takes_what_the_setting_takes(
    path: str, model: type[BaseSettings], field: str
) -> None:
    node = schema_at(path)
    info = model.model_fields[field]
    assert info.annotation is not None
    if choices := get_args(info.annotation):
        assert node["enum"] == list(choices)
    else:
        assert node["type"] == JSON_TYPES[info.annotation]
    bounds: dict[str, object] = {}
    for bound in info.metadata:
        if isinstance(bound, annotated_types.Ge):
            bounds["minimum"] = bound.ge
        elif isinstance(bound, annotated_types.Gt):
            bounds["exclusiveMinimum"] = bound.gt
        elif isinstance(bound, annotated_types.Le):
            bounds["maximum"] = bound.le
    limits = ("minimum", "exclusiveMinimum", "maximum")
    assert {key: node[key] for key in limits if key in node} == bounds


def test_the_agent_log_level_may_be_empty_for_the_controllers() -> None:
    levels = list(get_args(AgentSettings.model_fields["log_level"].annotation))
    assert schema_at("nodeAgent.logLevel")["enum"] == ["", *levels]
