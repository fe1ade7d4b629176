"""Managed namespaces (issue 22): the selector setting, and what the webhook adds to an
unlabelled object there (kube/kinds/managed.py, controller/handlers.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_controller.controller.handlers import ManagedNamespaces
from queue_controller.controller.settings import load
from queue_controller.errors import InputError
from queue_controller.kube import kinds
from queue_controller.kube.kinds.selectors import parse_selector
from queue_controller.kube.resources import ADMISSION_GATE, JOB, POD, QUEUE

Obj = dict[str, Any]
LABEL = "queue-controller.io/queue"
NAME = "kubernetes.io/metadata.name"


def spec(**resources: str) -> Obj:
    return {"containers": [{"name": "c", "resources": {"limits": dict(resources)}}]}


def gpu_job(labels: dict[str, str] | None = None, **resources: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "labels": labels or {}},
        "spec": {"template": {"spec": spec(**(resources or {"nvidia.com/gpu": "1"}))}},
    }


def pod(owner: str | None = None, labels: dict[str, str] | None = None, **resources: str) -> Obj:
    meta: Obj = {"name": "p", "namespace": "team-a", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": owner, "name": "o", "uid": "u", "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec(**resources)}


# -- the selector ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("queue-controller.io/managed=true", {"queue-controller.io/managed": "true"}, True),
        ("queue-controller.io/managed=true", {"queue-controller.io/managed": "false"}, False),
        ("queue-controller.io/managed==true", {}, False),
        ("team!=infra", {}, True),  # as in Kubernetes: != matches an absent label
        ("team!=infra", {"team": "infra"}, False),
        ("kubernetes.io/metadata.name notin (kube-system, qc)", {"x": "y"}, True),
        (
            "kubernetes.io/metadata.name notin (kube-system, qc)",
            {"kubernetes.io/metadata.name": "qc"},
            False,
        ),
        ("env in (prod,staging),gpu", {"env": "prod", "gpu": ""}, True),
        ("env in (prod,staging),gpu", {"env": "prod"}, False),
        ("!legacy", {"legacy": "1"}, False),
        ("!legacy", {}, True),
        ("", {"anything": "x"}, True),
    ],
)
def test_selector_strings_match_as_kubernetes_does(
    text: str, labels: dict[str, str], matches: bool
) -> None:
    assert parse_selector(text).matches(labels) is matches


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("team in (a", "'(' without ')'"),
        ("team=a,,env=b", "an empty requirement"),
        ("team in ()", "the set of values is empty"),
        ("team a", "is not a requirement"),
        ("a/b/c=d", "is not a label key"),
        ("team=" + "x" * 64, "is not a label value"),
        ("x" * 5000, "longer than 4096"),
    ],
)
def test_a_bad_selector_is_one_error_naming_the_setting(
    text: str, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InputError) as flag:
        load(managed_namespace_selector=text, leader_election=False)
    assert "managed_namespace_selector (QC_MANAGED_NAMESPACE_SELECTOR)" in str(flag.value)
    assert why in str(flag.value)
    monkeypatch.setenv("QC_MANAGED_NAMESPACE_SELECTOR", text)
    with pytest.raises(InputError, match="QC_MANAGED_NAMESPACE_SELECTOR"):
        load(leader_election=False)


def test_the_setting_is_off_unless_given() -> None:
    assert load(leader_election=False).managed_namespaces is None
    chosen = load(managed_namespace_selector="team=a", leader_election=False).managed_namespaces
    assert chosen is not None
    assert chosen.matches({"team": "a"})


@given(st.text(max_size=80))
def test_any_text_is_a_selector_or_one_input_error(text: str) -> None:
    said = ""
    try:
        selector = parse_selector(text)
    except InputError as error:
        said = str(error)
    if said:
        assert "is no label selector" in said
    else:
        assert isinstance(selector.matches({}), bool)


KEYS = st.sampled_from(["team", "env", "example.com/tier"])
VALUES = st.sampled_from(["a", "b", "c-1"])


@given(
    requirements=st.lists(
        st.tuples(
            KEYS, st.sampled_from(["=", "!=", "in", "notin", "", "!"]), st.sets(VALUES, min_size=1)
        ),
        max_size=4,
    ),
    labels=st.dictionaries(KEYS, VALUES),
)
def test_a_selector_matches_when_every_requirement_holds(
    requirements: list[tuple[str, str, set[str]]], labels: dict[str, str]
) -> None:
    def holds(key: str, op: str, values: set[str]) -> bool:
        one = sorted(values)[0]
        return {
            "=": labels.get(key) == one,
            "!=": labels.get(key) != one,
            "in": labels.get(key) in values,
            "notin": labels.get(key) not in values,
            "": key in labels,
            "!": key not in labels,
        }[op]

    def text(key: str, op: str, values: set[str]) -> str:
        if op in ("in", "notin"):
            return f"{key} {op} ({', '.join(sorted(values))})"
        if op in ("=", "!="):
            return f"{key}{op}{sorted(values)[0]}"
        return f"{op}{key}"

    selector = parse_selector(",".join(text(*r) for r in requirements))
    assert selector.matches(labels) is all(holds(*r) for r in requirements)


# -- what the webhook adds ---------------------------------------------------------------


def test_an_unlabelled_gpu_job_is_queued_in_default_and_suspended() -> None:
    assert kinds.queue_by_default(JOB, gpu_job()) == {
        "metadata": {"labels": {LABEL: "default"}},
        "spec": {"suspend": True},
    }


@pytest.mark.parametrize(
    "resources",
    [{"nvidia.com/mig-1g.10gb": "1"}, {"amd.com/gpu": "2"}, {"cpu": "1", "nvidia.com/gpu": "1"}],
)
def test_any_extended_resource_counts_as_an_accelerator(resources: dict[str, str]) -> None:
    assert kinds.queue_by_default(JOB, gpu_job(**resources))["spec"] == {"suspend": True}


def test_an_accelerator_in_an_init_container_or_requests_counts() -> None:
    job = gpu_job(cpu="1")
    job["spec"]["template"]["spec"]["initContainers"] = [
        {"name": "i", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    ]
    assert kinds.queue_by_default(JOB, job)["metadata"] == {"labels": {LABEL: "default"}}


def test_a_dra_claim_counts_as_an_accelerator() -> None:
    job = gpu_job(cpu="1")
    job["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    ]
    assert kinds.queue_by_default(JOB, job) != {}


@pytest.mark.parametrize(
    "resources",
    [{"cpu": "4", "memory": "8Gi"}, {"hugepages-2Mi": "1Gi"}, {"nvidia.com/gpu": "0"}],
)
def test_work_without_an_accelerator_is_untouched(resources: dict[str, str]) -> None:
    assert kinds.queue_by_default(JOB, gpu_job(**resources)) == {}
    assert kinds.queue_by_default(POD, pod(**resources)) == {}


@pytest.mark.parametrize("labels", [{LABEL: "research"}, {"kueue.x-k8s.io/queue-name": "research"}])
def test_a_labelled_object_is_left_to_its_kinds_webhook(labels: dict[str, str]) -> None:
    assert kinds.queue_by_default(JOB, gpu_job(labels)) == {}
    assert kinds.queue_by_default(POD, pod(labels=labels, **{"nvidia.com/gpu": "1"})) == {}


def test_a_plain_gpu_pod_is_queued_in_default_and_gated() -> None:
    patch = kinds.queue_by_default(POD, pod("ReplicaSet", **{"nvidia.com/gpu": "1"}))
    assert patch["metadata"]["labels"] == {LABEL: "default"}
    assert patch["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
    assert "queue-controller.io/pod-set" in patch["metadata"]["annotations"]


def test_a_jobs_pod_is_never_queued_on_its_own() -> None:
    # Its Job is the gang: held by suspend and released as one.
    assert kinds.queue_by_default(POD, pod("Job", **{"nvidia.com/gpu": "1"})) == {}
    by_label = pod(labels={"batch.kubernetes.io/job-name": "train"}, **{"nvidia.com/gpu": "1"})
    assert kinds.queue_by_default(POD, by_label) == {}


def test_a_pod_that_names_its_node_is_labelled_but_cannot_be_gated() -> None:
    bound = pod(**{"nvidia.com/gpu": "1"})
    bound["spec"]["nodeName"] = "gpu-1"
    # Labelled, it is a queued pod: the policies refuse it, or the controller charges it.
    assert kinds.queue_by_default(POD, bound) == {"metadata": {"labels": {LABEL: "default"}}}


def test_kinds_that_are_no_workload_are_untouched() -> None:
    assert kinds.queue_by_default(QUEUE, gpu_job()) == {}


def test_the_object_itself_is_not_changed() -> None:
    job = gpu_job()
    before = copy.deepcopy(job)
    kinds.queue_by_default(JOB, job)
    assert job == before


# -- which namespaces are managed --------------------------------------------------------


def namespace(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}}


def test_a_namespace_is_managed_by_its_labels_as_the_watch_last_said() -> None:
    reads: list[str] = []
    managed = ManagedNamespaces(
        parse_selector("queue-controller.io/managed=true"),
        lambda name: reads.append(name) or None,
        unknown=False,
    )
    managed.observe("ADDED", namespace("a", **{"queue-controller.io/managed": "true"}))
    managed.observe("ADDED", namespace("b"))
    assert managed.managed("a")
    assert not managed.managed("b")
    managed.observe("MODIFIED", namespace("b", **{"queue-controller.io/managed": "true"}))
    assert managed.managed("b")
    assert reads == []


def test_a_namespace_not_seen_yet_is_read_once() -> None:
    reads: list[str] = []

    def read(name: str) -> Obj:
        reads.append(name)
        return namespace(name, team="a")

    managed = ManagedNamespaces(parse_selector("team=a"), read, unknown=False)
    assert managed.managed("new")
    assert managed.managed("new")
    assert reads == ["new"]


@pytest.mark.parametrize("unknown", [True, False])
def test_a_namespace_that_cannot_be_read_is_what_the_webhooks_registration_says(
    unknown: bool,
) -> None:
    managed = ManagedNamespaces(parse_selector("team=a"), lambda _: None, unknown=unknown)
    assert managed.managed("unreadable") is unknown


# -- the local webhook, as kopf registers it ---------------------------------------------


def local_webhooks(selector: str) -> list[Obj]:
    from pathlib import Path

    from kopf._cogs.structs import references
    from kopf._core.engines.admission import build_webhooks

    from queue_controller.controller.handlers import build_registry
    from queue_controller.controller.state import ClusterState
    from queue_controller.tls import ServingCertificate

    config = load(leader_election=False, managed_namespace_selector=selector)
    chosen = config.managed_namespaces
    registry = build_registry(
        ClusterState(),
        config,
        certificate=ServingCertificate(Path("crt"), Path("key"), Path("ca")),
        namespaces=None
        if chosen is None
        else ManagedNamespaces(chosen, lambda _: None, unknown=False),
    )
    resources = [
        references.Resource(group=r.group, version=r.version, plural=r.plural, namespaced=True)
        for r in (JOB, POD)
    ]
    return build_webhooks(
        registry._webhooks.get_all_handlers(),
        resources=resources,
        name_suffix="queue-controller.io",
        client_config={"url": "https://127.0.0.1:9443"},
    )


def test_the_local_webhook_takes_unlabelled_jobs_and_pods_when_managed_namespaces_are_on() -> None:
    unlabelled = {
        "matchExpressions": [
            {"key": LABEL, "operator": "DoesNotExist"},
            {"key": "kueue.x-k8s.io/queue-name", "operator": "DoesNotExist"},
        ]
    }
    on = {w["clientConfig"]["url"]: w for w in local_webhooks("team=a")}
    for resource in ("jobs", "pods"):
        hook = on[f"https://127.0.0.1:9443/default-{resource}"]
        assert hook["objectSelector"] == unlabelled
        assert [r["resources"] for r in hook["rules"]] == [[resource]]
        # Outside the cluster a stopped controller must not block every unlabelled pod.
        assert hook["failurePolicy"] == "Ignore"
    off = [w["clientConfig"]["url"] for w in local_webhooks("")]
    assert not [url for url in off if "/default-" in url]


def test_run_refuses_a_bad_selector_with_one_line_naming_the_flag() -> None:
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).parent / "queue-controller"
    for args, env in (
        (["--managed-namespace-selector", "team in (a"], {}),
        ([], {"QC_MANAGED_NAMESPACE_SELECTOR": "team in (a"}),
    ):
        result = subprocess.run(
            [str(exe), "run", *args],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", **env},
            timeout=60,
            check=False,
        )
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            "error: settings: managed_namespace_selector (QC_MANAGED_NAMESPACE_SELECTOR): "
            "'team in (a' is no label selector: '(' without ')'"
        ]
