"""The chart's GPU node agent (templates/node-agent.yaml) and its rendered manifests."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from queue_controller.agent.settings import PREFIX, AgentSettings
from queue_controller.kube import gateway as gw
from tests.deploy.chart import (
    CHART,
    ROOT,
    Doc,
    gateway_methods,
    gateway_uses,
    granted,
    helm,
    one,
    render,
    resource,
)

ON = "nodeAgent.enabled=true"
NAME = "queue-controller-node-agent"
RENDER = ROOT / "deploy" / "manifests" / "render.sh"
MANIFEST = ROOT / "deploy" / "manifests" / "node-agent.yaml"
# Set by the chart beside the agent's own settings, each for a reason given in the template.
NOT_SETTINGS = {"NODE_NAME", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}


def agent_docs(*sets: str) -> list[Doc]:
    return [d for d in render(ON, *sets) if d["metadata"]["name"] == NAME]


def pod(docs: list[Doc]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def container(docs: list[Doc]) -> dict[str, Any]:
    (only,) = pod(docs)["containers"]
    result: dict[str, Any] = only
    return result


def env(docs: list[Doc]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(docs)["env"]}


def test_off_by_default() -> None:
    docs = render()
    assert "DaemonSet" not in [d["kind"] for d in docs]
    assert all("node-agent" not in d["metadata"]["name"] for d in docs)


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((ON,), id="on"),
        pytest.param((ON, "nodeAgent.runtimeClassName=", "nodeAgent.taint=true"), id="variants"),
    ],
)
def test_helm_lint_passes_with_the_agent(sets: tuple[str, ...]) -> None:
    flags = [item for pair in sets for item in ("--set", pair)]
    result = helm("lint", "--strict", str(CHART), *flags, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_objects() -> None:
    docs = agent_docs()
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "ServiceAccount",
    ]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == one(docs, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": "queue-controller-system"}
    ]
    assert pod(docs)["serviceAccountName"] == NAME


def test_runs_on_gpu_nodes_through_the_nvidia_runtime() -> None:
    docs = agent_docs()
    spec = pod(docs)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["runtimeClassName"] == "nvidia"
    tolerations = spec["tolerations"]
    for key in ("nvidia.com/gpu", "queue-controller.io/gpu-unhealthy"):
        assert {"key": key, "operator": "Exists", "effect": "NoSchedule"} in tolerations
    c = container(docs)
    assert c["command"] == ["queue-controller"]
    assert c["args"] == ["node-agent"]
    assert c["image"] == "queue-controller:0.1.0"  # the controller's image
    variables = env(docs)
    assert variables["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert variables["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    # Every GPU without taking one from the device plugin.
    assert "nvidia.com/gpu" not in str(c["resources"])
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 9401}


def test_no_privilege() -> None:
    docs = agent_docs()
    spec = pod(docs)
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        assert host not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    sc = container(docs)["securityContext"]
    assert "privileged" not in sc
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    assert all("hostPath" not in v for v in spec["volumes"])


def test_runtime_class_can_be_left_to_the_node() -> None:
    assert "runtimeClassName" not in pod(agent_docs("nodeAgent.runtimeClassName="))


def test_options_pass_through() -> None:
    docs = agent_docs(
        "nodeAgent.image.repository=registry.example/qc",
        "nodeAgent.image.tag=9.9.9",
        "nodeAgent.extraArgs[0]=--log-level=DEBUG",
        "nodeAgent.tolerations[0].key=dedicated",
        "nodeAgent.tolerations[0].operator=Exists",
        "nodeAgent.priorityClassName=system-node-critical",
        "nodeAgent.metricsPort=9500",
        "nodeAgent.ignoredXids=none",
        "nodeAgent.taint=true",
    )
    c = container(docs)
    assert c["image"] == "registry.example/qc:9.9.9"
    assert c["args"] == ["node-agent", "--log-level=DEBUG"]
    assert {"key": "dedicated", "operator": "Exists"} in pod(docs)["tolerations"]
    assert pod(docs)["priorityClassName"] == "system-node-critical"
    values = {name: v.get("value") for name, v in env(docs).items()}
    assert values["QC_AGENT_METRICS_PORT"] == "9500"
    assert c["ports"][0]["containerPort"] == 9500
    assert values["QC_AGENT_IGNORED_XIDS"] == "none"
    assert values["QC_AGENT_TAINT"] == "true"


def test_every_variable_is_a_setting_and_the_values_are_accepted() -> None:
    variables = env(agent_docs("nodeAgent.ignoredXids=13"))
    settings = {
        name.removeprefix(PREFIX).lower(): v["value"]
        for name, v in variables.items()
        if name not in NOT_SETTINGS
    }
    unknown = [name for name in settings if name not in AgentSettings.model_fields]
    assert not unknown, f"not fields of AgentSettings: {unknown}"
    assert all(name.startswith(PREFIX) for name in variables if name not in NOT_SETTINGS)
    parsed = AgentSettings(node_name="gpu-1", **settings)
    assert parsed.metrics_host == "0.0.0.0"
    assert parsed.ignored_xids == frozenset({13})


def test_agent_pods_are_outside_the_controllers_selectors() -> None:
    docs = render(ON)
    labels = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    selectors = [
        one(docs, "Deployment")["spec"]["selector"]["matchLabels"],
        one(docs, "Service", "queue-controller-metrics")["spec"]["selector"],
        one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert not selector.items() <= labels.items(), selector


# -- RBAC --------------------------------------------------------------------------------


def agent_rules() -> set[tuple[str, str, str]]:
    """What the agent asks of the API: the gateway calls of the publisher it drives."""
    assert not [u for u in gateway_uses() if u.where.startswith("queue_controller/agent/")], (
        "the agent calls the gateway itself now: derive its rules from those calls too"
    )
    methods = gateway_methods()
    needed: set[tuple[str, str, str]] = set()
    for use in gateway_uses():
        if not use.where.startswith("queue_controller/kube/healthwriter.py"):
            continue
        http, _ = methods[use.method]
        for kind in use.kinds:
            group, res = resource(kind, use.subresource)
            for method in http:
                verb = {"GET": "get", "PATCH": "patch", "POST": "create", "DELETE": "delete"}
                needed.add((group, res, verb[method]))
    return needed


def test_agent_role_grants_exactly_what_the_code_needs() -> None:
    needed = agent_rules()
    assert needed == {("", "nodes", "get"), ("", "nodes", "patch"), ("", "nodes/status", "patch")}
    assert all(
        kind is gw.NODE for u in gateway_uses() for kind in u.kinds if "healthwriter" in u.where
    )
    assert granted(one(agent_docs(), "ClusterRole")) == needed


def test_every_agent_rbac_rule_says_why() -> None:
    lines = (CHART / "templates" / "node-agent.yaml").read_text().splitlines()
    # The ClusterRole's rules: those above the admission policy (whose resourceRules are no
    # grant).
    end = lines.index("kind: ValidatingAdmissionPolicy")
    rules = [i for i, line in enumerate(lines[:end]) if line.strip().startswith("- apiGroups:")]
    assert len(rules) == 2
    for i in rules:
        assert lines[i - 1].strip().startswith("#"), f"node-agent.yaml:{i + 1} has no comment"


# -- the rendered manifests --------------------------------------------------------------


def test_committed_node_agent_manifest_is_a_fresh_render() -> None:
    helm("version")  # fails the test, naming make cluster-build, when helm is not built
    fresh = subprocess.run(
        [str(RENDER), "node-agent"], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert MANIFEST.read_text() == fresh, (
        "deploy/manifests/node-agent.yaml is stale: "
        "deploy/manifests/render.sh node-agent > deploy/manifests/node-agent.yaml"
    )
    docs = [d for d in yaml.safe_load_all(fresh) if d]
    # The agent's objects, and its own-Node admission policy and binding.
    ours = [d for d in render(ON) if d["metadata"]["name"].startswith(NAME)]
    assert sorted(d["kind"] for d in docs) == sorted(d["kind"] for d in ours)
    assert "PRIVATE KEY" not in fresh
