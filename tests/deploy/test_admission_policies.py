"""The chart's ValidatingAdmissionPolicies (templates/admission-policies.yaml, and the node
agent's in node-agent.yaml), as rendered. tests/cluster/test_tenant_bypass.py and
test_node_agent_token.py put them before a real API server and try each rule."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from queue_controller.kube.kinds import QUEUE_LABELS
from queue_controller.kube.kinds.plainpods import POD_SET_ANNOTATION
from queue_controller.kube.resources import ADMISSION_GATE
from tests.deploy.chart import CHART, MANIFESTS, Doc, helm, one, render

POLICY = "ValidatingAdmissionPolicy"
BINDING = "ValidatingAdmissionPolicyBinding"
RULES = (
    "queue-label",
    "job-suspend",
    "training-job-suspend",
    "ray-suspend",
    "admission-gate",
    "node-name",
    "placement-annotations",
)
CONTROLLER = "system:serviceaccount:queue-controller-system:queue-controller"
MANAGED = "managedJobsNamespaceSelector.matchLabels.queue-controller\\.io/managed=yes"


def policies(docs: list[Doc]) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == POLICY}


def bindings(docs: list[Doc]) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == BINDING}


def expressions(policy: Doc) -> str:
    spec = policy["spec"]
    parts = [c["expression"] for c in spec.get("matchConditions", [])]
    parts += [v["expression"] for v in spec.get("variables", [])]
    parts += [v["expression"] for v in spec["validations"]]
    return "\n".join(parts)


def test_policies_are_on_by_default_one_per_rule() -> None:
    docs = render()
    assert sorted(policies(docs)) == sorted(f"queue-controller-{r}" for r in RULES)
    assert bindings(docs).keys() == policies(docs).keys()
    for name, binding in bindings(docs).items():
        assert binding["spec"]["policyName"] == name
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in binding["spec"]  # every namespace


def test_every_policy_fails_closed_and_lets_only_the_controller_through() -> None:
    for name, policy in policies(render()).items():
        spec = policy["spec"]
        assert spec["failurePolicy"] == "Fail", name
        (exempt,) = [c for c in spec["matchConditions"] if c["name"] == "not-the-controller"]
        assert exempt["expression"] == f"request.userInfo.username != '{CONTROLLER}'", name
        # The message names the rule, and says why: the API server adds the policy's name.
        for validation in spec["validations"]:
            assert validation["reason"] == "Forbidden"
            assert len(validation["message"]) > 60, name


def test_the_controllers_account_is_rendered_from_the_release() -> None:
    docs = render("serviceAccount.name=qc-sa", namespace="ops", release="qc")
    for policy in policies(docs).values():
        text = expressions(policy)
        assert "'system:serviceaccount:ops:qc-sa'" in text
        assert "queue-controller-system" not in text
    assert sorted(policies(docs)) == sorted(f"qc-queue-controller-{r}" for r in RULES)


def test_policies_use_the_controllers_own_names() -> None:
    """The labels, gate and annotation in the CEL are the ones the code uses."""
    found = {name.rpartition("queue-controller-")[2]: p for name, p in policies(render()).items()}
    for rule in ("queue-label", "job-suspend", "training-job-suspend", "ray-suspend", "node-name"):
        text = expressions(found[rule])
        assert all(f"'{label}'" in text for label in QUEUE_LABELS), rule
    assert f"'{ADMISSION_GATE}'" in expressions(found["admission-gate"])
    assert f"'{POD_SET_ANNOTATION}'" in expressions(found["placement-annotations"])


def test_policies_can_be_turned_off_or_narrowed() -> None:
    docs = render("admissionPolicies.enabled=false", MANAGED)
    assert not policies(docs)
    assert not bindings(docs)
    docs = render("admissionPolicies.namespaceSelector.matchLabels.tenant=yes")
    for binding in bindings(docs).values():
        selector = binding["spec"]["matchResources"]["namespaceSelector"]
        assert selector == {"matchLabels": {"tenant": "yes"}}


def test_managed_namespaces_policy_only_with_a_selector() -> None:
    assert "queue-controller-managed-namespaces" not in policies(render())
    docs = render(MANAGED)
    policy = one(docs, POLICY, "queue-controller-managed-namespaces")
    binding = one(docs, BINDING, "queue-controller-managed-namespaces")
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"queue-controller.io/managed": "yes"}
    }
    text = expressions(policy)
    # The Job controller's users, as a CEL list; the accelerator test is the code's is_extended.
    assert (
        "['system:serviceaccount:kube-system:job-controller','system:kube-controller-manager']"
        in text
    )
    assert "!n.contains('kubernetes.io/') && !n.startsWith('requests.')" in text
    assert "resourceClaims" in text


@pytest.mark.parametrize(
    "sets",
    [
        pytest.param((MANAGED,), id="managed"),
        pytest.param(("admissionPolicies.namespaceSelector.matchLabels.a=b",), id="narrowed"),
    ],
)
def test_helm_lint_passes_with_policy_settings(sets: tuple[str, ...]) -> None:
    flags = [item for pair in sets for item in ("--set", pair)]
    result = helm("lint", "--strict", str(CHART), *flags, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_manifests_carry_the_policies() -> None:
    docs = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    assert sorted(policies(docs)) == sorted(f"queue-controller-{r}" for r in RULES)


# -- the node agent's policy -------------------------------------------------------------


def agent_policy(*sets: str) -> tuple[Doc, Doc]:
    docs = render("nodeAgent.enabled=true", *sets)
    name = "queue-controller-node-agent-own-node"
    return one(docs, POLICY, name), one(docs, BINDING, name)


def test_node_agent_policy_holds_the_agents_account_to_its_own_node() -> None:
    policy, binding = agent_policy()
    spec: dict[str, Any] = policy["spec"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert "matchResources" not in binding["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["nodes", "nodes/status"]
    assert rule["operations"] == ["UPDATE"]
    (who,) = spec["matchConditions"]
    user = "system:serviceaccount:queue-controller-system:queue-controller-node-agent"
    assert who["expression"] == f"request.userInfo.username == '{user}'"
    text = expressions(policy)
    assert "request.userInfo.extra['authentication.kubernetes.io/node-name']" in text
    assert "object.metadata.name" in text
    policy, _ = agent_policy("nodeAgent.serviceAccount.name=gpu-agent")
    assert "'system:serviceaccount:queue-controller-system:gpu-agent'" in expressions(policy)


def test_no_node_agent_policy_without_the_agent() -> None:
    assert not [n for n in policies(render()) if "node-agent" in n]
