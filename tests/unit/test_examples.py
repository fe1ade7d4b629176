"""The examples tell the truth: the demo's Jobs get the decisions its comments promise.

The real core runs over the examples on the default fake GPU nodes, exactly as
`plan` would over a dump of the demo cluster the moment the Jobs arrive.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from queue_controller import nodepools
from queue_controller.api import v1alpha1
from queue_controller.controller.state import ClusterState
from queue_controller.controller.status import conditions_with
from queue_controller.core import schedule
from queue_controller.core.model.decisions import Decision
from queue_controller.dump import load_snapshot
from queue_controller.kube import kinds
from queue_controller.kube.kinds.kubeflow import PYTORCH_JOB
from queue_controller.kube.resources import JOB, POD
from queue_controller.localcluster import devices
from tests.views import seen

ROOT = Path(__file__).resolve().parents[2]


def _examples() -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((ROOT / "examples").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def _decide(objects: list[dict[str, Any]]) -> dict[str, Decision]:
    """The core's first cycle over the examples on the demo's nodes, as `make run` starts."""
    submitted = [obj for obj in objects if obj["kind"] in RESOURCES]
    for second, obj in enumerate(submitted):
        # What the controller's webhook does on creation: suspend a Job, gate a Pod.
        obj.update(merge(obj, kinds.hold_at_creation(RESOURCES[obj["kind"]], obj)))
        # `make run` submits them a second apart, in file order (Jobs, then the pods).
        obj["metadata"]["creationTimestamp"] = f"2026-01-01T00:00:{second:02d}Z"
    layout = nodepools.load(ROOT / "deploy/local-cluster/nodes.yaml")
    nodes = layout.nodes()
    published = devices.objects(layout.pools)  # the DRA devices `local-cluster up` writes
    for node in nodes:
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]  # as kwok reports
    snapshot, _ = load_snapshot(
        [("examples", yaml.safe_dump_all([*objects, *nodes, *published]))],
        now=0.0,
        ignore_unknown=True,
    )
    return {d.workload: d for d in schedule(snapshot).decisions}


RESOURCES = {
    "Job": JOB,
    "Pod": POD,
    "PyTorchJob": PYTORCH_JOB.webhook.resource,
    "RayJob": kinds.by_name("RayJob").webhook.resource,
}


def merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) applied to a copy of ``obj``."""
    out = dict(obj)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


# The gangs of examples/topology-jobs.yaml: placed by the core's topology rules (issue 14).
TOPOLOGY_GANGS = {
    "fabric/nvl-too-big": ("Pending", "NoNodeFit"),
    "fabric/nvl-fits": ("Admit", "Admitted"),
}
# The gangs of examples/dra-jobs.yaml: GPUs claimed through DRA (issue 15).
DRA_GANGS = {
    "research/dra-pair": ("Admit", "Admitted"),
    "research/dra-too-big": ("Pending", "NoNodeFit"),
}


def test_demo_jobs_are_decided_as_the_examples_say() -> None:
    decisions = _decide(_examples())
    got = {
        key: (d.verdict.value, d.reason.value)
        for key, d in decisions.items()
        if key not in TOPOLOGY_GANGS and key not in DRA_GANGS
    }
    assert got == {
        "research/pretrain-llm": ("Pending", "QuotaExceeded"),
        "research/finetune": ("Admit", "Admitted"),
        "research/sweep": ("Pending", "QuotaExceeded"),
        "research/eval": ("Pending", "QuotaExceeded"),
        "research/embed": ("Admit", "Admitted"),
        # prod's gang fits prod's own nominal, so it goes before research's borrowers
        # (older though they are): research may not borrow prod's nominal from under it.
        "prod/train-bert": ("Admit", "Admitted"),
        "prod/eval-bert": ("Pending", "QuotaExceeded"),
        "research/pods-ray": ("Admit", "Admitted"),
        # examples/training-jobs.yaml: research's nominal is in use when it arrives.
        "research/pytorchjob-ddp-resnet": ("Pending", "QuotaExceeded"),
        # examples/ray-jobs.yaml, the same; tune-too-big waits NoNodeFit once it is not.
        "research/rayjob-tune-sweep": ("Pending", "QuotaExceeded"),
        "research/rayjob-tune-too-big": ("Pending", "QuotaExceeded"),
    }
    order = list(decisions)
    assert order.index("prod/train-bert") < order.index("research/sweep")
    ray = decisions["research/pods-ray"]
    assert ray.kind == "Pod"
    assert sorted(sum(p.values()) for p in ray.pod_set_placement.values()) == [1, 3]


def test_topology_gangs_are_decided_as_the_examples_say() -> None:
    decisions = _decide(_examples())
    got = {
        key: (decisions[key].verdict.value, decisions[key].reason.value) for key in TOPOLOGY_GANGS
    }
    assert got == TOPOLOGY_GANGS
    fits = decisions["fabric/nvl-fits"]
    (domain,) = fits.domains.values()
    assert domain in ("gb200-block-0/gb200-nvl-0.1", "gb200-block-0/gb200-nvl-1.1")
    clique = domain.rsplit("/", 1)[1]
    nodes = {f"gb200-{i:04d}" for i in range(8) if f"gb200-nvl-{i // 4}.1" == clique}
    assert set(fits.placement) <= nodes
    assert sum(fits.placement.values()) == 3
    too_big = decisions["fabric/nvl-too-big"]
    assert "at most 16 in any one gpu.clique" in too_big.message
    assert "the gang needs 20 in one gpu.clique" in too_big.message


def test_the_podgroup_example_is_what_the_controller_writes_for_its_job() -> None:
    objects = _examples()
    (group,) = [obj for obj in objects if obj["kind"] == "PodGroup"]
    v1alpha1.PodGroup.model_validate(group)
    name = f"{group['metadata']['namespace']}/{group['metadata']['name']}"
    (job,) = [
        obj
        for obj in objects
        if obj["kind"] == "Job"
        and f"{obj['metadata']['namespace']}/{obj['metadata']['name']}" == name
    ]
    job = {**job, "metadata": {**job["metadata"], "uid": "the-uid"}}
    state = ClusterState()
    state.upsert(job)
    (gang,) = seen(state, 0.0).gangs
    created = gang.new_group()
    assert group["spec"] == created["spec"]
    assert group["metadata"]["labels"] == created["metadata"]["labels"]
    owners = [{**ref, "uid": "the-uid"} for ref in group["metadata"]["ownerReferences"]]
    assert owners == created["metadata"]["ownerReferences"]

    # Its status is the first cycle's Pending write (MarkPending): phase, reason,
    # message, and the Admitted condition, in the core's words.
    decision = _decide([obj for obj in objects if obj["kind"] != "PodGroup"])[name]
    status = group["status"]
    assert set(status) == {"phase", "reason", "message", "conditions"}
    assert (status["phase"], status["reason"], status["message"]) == (
        "Pending",
        decision.reason.value,
        decision.message,
    )
    (admitted,) = status["conditions"]
    written = conditions_with(
        None, 0.0, ("Admitted", False, decision.reason.value, decision.message)
    )
    assert admitted == {**written[0], "lastTransitionTime": admitted["lastTransitionTime"]}


def test_dra_gangs_are_decided_as_the_examples_say() -> None:
    decisions = _decide(_examples())
    got = {key: (decisions[key].verdict.value, decisions[key].reason.value) for key in DRA_GANGS}
    assert got == DRA_GANGS
    pair = decisions["research/dra-pair"]
    assert all(node.startswith("h100-") for node in pair.placement)
    assert sum(pair.placement.values()) == 2
    too_big = decisions["research/dra-too-big"]
    assert "request gpus of ResourceClaimTemplate h100-x9" in too_big.message
    assert "at most 8 on any one node, and each member needs 9" in too_big.message
