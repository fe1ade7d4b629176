"""KubeRay's RayJob and RayCluster as workload kinds (kube/kinds/ray/): what their gangs
are, their writes, which pods are theirs, and their way through translation and the
planner.  The real KubeRay runs them in tests/cluster/test_ray_jobs.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from queue_controller.controller import actions as act
from queue_controller.core.rules import pod_request
from queue_controller.kube import kinds
from queue_controller.kube.kinds.ray import RAY_JOB_LABEL, RayClusterKind, RayJobKind
from queue_controller.kube.kinds.ray.job import default_submitter
from queue_controller.kube.resources import ADMISSION_GATE, HOSTNAME_LABEL, JOB, POD
from queue_controller.kube.views import Delete, Patch, member_pod
from tests.unit.test_apply import cluster
from tests.unit.test_lifecycle import iso, plan

RAY_JOB = RayJobKind()
RAY_CLUSTER = RayClusterKind()
HEAD_IMAGE = "rayproject/ray:2.41.0"


def template(gpus: int = 0, **meta: Any) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {"requests": {"cpu": "1"}}
    return {
        "metadata": meta,
        "spec": {
            "containers": [{"name": "ray", "image": HEAD_IMAGE, "resources": resources}],
            "schedulingGates": [{"name": "someone-else/gate"}],
        },
    }


def worker_group(name: str, replicas: int, gpus: int = 1, **bounds: Any) -> dict[str, Any]:
    return {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": bounds.get("low", 0),
        "maxReplicas": bounds.get("high", 2**31 - 1),
        "numOfHosts": bounds.get("hosts", 1),
        "rayStartParams": {},
        "template": template(gpus),
    }


def cluster_spec(**extra: Any) -> dict[str, Any]:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": template()},
        "workerGroupSpecs": [worker_group("Small", 2, 1), worker_group("big", 1, 4)],
        **extra,
    }


def rayjob(
    name: str = "tune",
    *,
    suspend: bool = True,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "3",
            "creationTimestamp": iso(100),
            "labels": {"queue-controller.io/queue": "q"} if labels is None else labels,
        },
        "spec": {
            "entrypoint": "python tune.py",
            "shutdownAfterJobFinishes": True,
            "suspend": suspend,
            "rayClusterSpec": cluster_spec(),
            **spec,
        },
    }


def raycluster(
    name: str = "serve", *, suspend: bool = True, owner: str = "", **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "resourceVersion": "4",
        "creationTimestamp": iso(100),
        "labels": {"kueue.x-k8s.io/queue-name": "q"},
    }
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "ray.io/v1", "kind": owner, "name": "x", "uid": "u", "controller": True}
        ]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta,
        "spec": {"suspend": suspend, **cluster_spec(), **spec},
    }


def read(obj: dict[str, Any]) -> Any:
    kind = RAY_JOB if obj["kind"] == "RayJob" else RAY_CLUSTER
    return kind.read(namespace="ns", name=obj["metadata"]["name"], head=obj, members=())


def shape(gang: Any) -> list[tuple[str, int]]:
    return [(s.name, s.count) for s in gang.facts.pod_sets]


def test_a_rayjob_is_its_head_each_worker_group_and_its_submitter() -> None:
    gang = read(rayjob())
    assert gang.facts.spec_error == ""
    assert shape(gang) == [("head", 1), ("small", 2), ("big", 1), ("submitter", 1)]
    assert gang.facts.held
    assert gang.facts.uncreated_members == 5
    _head, small, big, submitter = gang.facts.pod_sets
    assert small.path == "spec.rayClusterSpec.workerGroupSpecs[0].template.spec"
    assert pod_request(big.template)["nvidia.com/gpu"] == 4000  # in thousandths
    # KubeRay's default submitter, as Kueue counts it: the head's image, 500m CPU.
    assert pod_request(submitter.template)["cpu"] == 500


def test_the_submitter_is_the_users_template_or_none_by_submission_mode() -> None:
    own = {
        "spec": {
            "containers": [{"name": "s", "image": "i", "resources": {"requests": {"cpu": "2"}}}]
        }
    }
    submitter = read(rayjob(submitterPodTemplate=own)).facts.pod_sets[-1]
    assert pod_request(submitter.template)["cpu"] == 2000
    assert [s.name for s in read(rayjob(submissionMode="HTTPMode")).facts.pod_sets] == [
        "head",
        "small",
        "big",
    ]
    # SidecarMode: KubeRay puts the submitter in the head pod, where it is charged.
    head = read(rayjob(submissionMode="SidecarMode")).facts.pod_sets[0]
    assert [c.name for c in head.template.containers] == ["ray", "ray-job-submitter"]


def test_a_worker_group_counts_what_kuberay_makes_of_it() -> None:
    spec = cluster_spec(
        workerGroupSpecs=[
            worker_group("under", 0, low=2),  # replicas below minReplicas: minReplicas
            worker_group("over", 9, high=3),  # above maxReplicas: maxReplicas
            worker_group("hosts", 2, hosts=4),  # each replica is numOfHosts pods
            worker_group("none", 0),  # no pods, no pod set
            {**worker_group("paused", 5), "suspend": True},
        ]
    )
    gang = read(rayjob(rayClusterSpec=spec, submissionMode="HTTPMode"))
    assert shape(gang) == [("head", 1), ("under", 2), ("over", 3), ("hosts", 8)]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"clusterSelector": {"ray.io/cluster": "shared"}}, "spec.clusterSelector"),
        ({"rayClusterSpec": {}}, "spec.rayClusterSpec"),
        ({"shutdownAfterJobFinishes": False}, "spec.shutdownAfterJobFinishes"),
        # KubeRay ignores suspend while an interactive RayJob waits: it could not be evicted.
        ({"submissionMode": "InteractiveMode"}, "spec.submissionMode"),
        (
            {"rayClusterSpec": cluster_spec(enableInTreeAutoscaling=True)},
            "spec.rayClusterSpec.enableInTreeAutoscaling",
        ),
        (
            {"rayClusterSpec": cluster_spec(workerGroupSpecs=[worker_group("Head", 1)])},
            "spec.rayClusterSpec.workerGroupSpecs[0].groupName",
        ),
        (
            {
                "rayClusterSpec": cluster_spec(
                    workerGroupSpecs=[worker_group("a", 1), worker_group("A", 1)]
                )
            },
            "spec.rayClusterSpec.workerGroupSpecs[1].groupName",
        ),
        (
            {"rayClusterSpec": cluster_spec(workerGroupSpecs=[worker_group("a", "two")])},  # type: ignore[arg-type]
            "spec.rayClusterSpec.workerGroupSpecs[0].replicas",
        ),
        (
            {"rayClusterSpec": cluster_spec(workerGroupSpecs=[worker_group("a", -1, low=-1)])},
            "spec.rayClusterSpec.workerGroupSpecs[0].replicas",
        ),
        (
            {"rayClusterSpec": {"headGroupSpec": {}, "workerGroupSpecs": []}},
            "spec.rayClusterSpec.headGroupSpec",
        ),
    ],
)
def test_what_cannot_be_admitted_whole_is_the_gangs_own_error(
    spec: dict[str, Any], field: str
) -> None:
    facts = read(rayjob(**spec)).facts
    assert field in facts.spec_error
    assert facts.pod_sets == ()


def test_a_broken_status_is_an_error_of_its_own_gang_not_a_crash() -> None:
    job = rayjob()
    job["status"] = {"jobDeploymentStatus": ["Complete"], "jobStatus": 7}
    facts = read(job).facts
    assert "status.jobDeploymentStatus" in facts.spec_error


def test_finished_when_kuberay_says_complete_or_failed() -> None:
    job = rayjob(suspend=False)
    assert not read(job).facts.finished
    job["status"] = {"jobDeploymentStatus": "Running"}
    assert not read(job).facts.finished
    job["status"] = {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}
    facts = read(job).facts
    assert (facts.finished, facts.succeeded, facts.uncreated_members) == (True, True, 0)
    job["status"] = {"jobDeploymentStatus": "Failed", "jobStatus": "FAILED"}
    facts = read(job).facts
    assert (facts.finished, facts.succeeded) == (True, False)


def ray_pod(owner: str, labels: dict[str, str], owner_api: str = "ray.io/v1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "uid-p",
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": owner_api,
                    "kind": owner,
                    "name": "tune-x7k2p",
                    "uid": "uid-o",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


HEAD_LABELS = {"ray.io/node-type": "head", "ray.io/group": "headgroup"}
WORKER_LABELS = {"ray.io/node-type": "worker", "ray.io/group": "Small"}


def test_a_rayjobs_pods_are_its_own_by_the_label_its_release_wrote() -> None:
    cases = [
        (ray_pod("RayCluster", {**HEAD_LABELS, RAY_JOB_LABEL: "tune"}), "head"),
        (ray_pod("RayCluster", {**WORKER_LABELS, RAY_JOB_LABEL: "tune"}), "small"),
        (ray_pod("Job", {RAY_JOB_LABEL: "tune"}, "batch/v1"), "submitter"),
    ]
    for pod, pod_set in cases:
        claimed = kinds.claim(member_pod(pod))
        assert claimed is not None
        kind, membership = claimed
        assert kind.name == "RayJob"
        assert (membership.workload, membership.pod_set) == ("tune", pod_set)
    # Without the label: a RayCluster's pod is its cluster's, a Job's pod its Job's.
    claimed = kinds.claim(member_pod(ray_pod("RayCluster", WORKER_LABELS)))
    assert claimed is not None
    assert (claimed[0].name, claimed[1].workload, claimed[1].pod_set) == (
        "RayCluster",
        "tune-x7k2p",
        "small",
    )
    claimed = kinds.claim(member_pod(ray_pod("Job", {}, "batch/v1")))
    assert claimed is not None
    assert claimed[0].name == "Job"
    # A pod that only says so, owned by nothing of Ray's or a Job's, is nobody's member.
    assert (
        RAY_JOB.membership(member_pod(ray_pod("ReplicaSet", {RAY_JOB_LABEL: "tune"}, "apps/v1")))
        is None
    )


def test_held_at_creation_by_suspend() -> None:
    for obj, kind in ((rayjob(suspend=False), RAY_JOB), (raycluster(suspend=False), RAY_CLUSTER)):
        assert kinds.hold_at_creation(kind.webhook.resource, obj) == {"spec": {"suspend": True}}
        held = copy.deepcopy(obj)
        held["spec"]["suspend"] = True
        assert kinds.hold_at_creation(kind.webhook.resource, held) == {}
    unqueued = rayjob(suspend=False, labels={})
    assert kinds.hold_at_creation(RAY_JOB.webhook.resource, unqueued) == {}


def test_a_cluster_kuberay_made_for_a_rayjob_is_not_a_gang_of_its_own() -> None:
    made = raycluster(suspend=False, owner="RayJob")
    assert not RAY_CLUSTER.is_queued(made)
    assert kinds.hold_at_creation(RAY_CLUSTER.webhook.resource, made) == {}
    assert not RAY_CLUSTER.is_queued(raycluster(owner="RayService"))
    assert RAY_CLUSTER.is_queued(raycluster())


def gates(tmpl: dict[str, Any]) -> list[dict[str, str]]:
    return list(tmpl["spec"]["schedulingGates"])


def test_a_rayjob_is_released_with_our_gate_and_its_label_on_every_template() -> None:
    (patch,) = RAY_JOB.release(read(rayjob()))
    assert isinstance(patch, Patch)
    assert patch.ref.resource_version == "3"  # the worker groups' list is written whole
    spec = patch.body["spec"]
    assert spec["suspend"] is False
    templates = [
        spec["rayClusterSpec"]["headGroupSpec"]["template"],
        *(g["template"] for g in spec["rayClusterSpec"]["workerGroupSpecs"]),
        spec["submitterPodTemplate"],
    ]
    for tmpl in templates:
        assert gates(tmpl)[-1] == {"name": ADMISSION_GATE}
        assert gates(tmpl).count({"name": ADMISSION_GATE}) == 1
        assert tmpl["metadata"]["labels"][RAY_JOB_LABEL] == "tune"
    # The worker groups are written as read, but for their templates.
    groups = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"]) for g in groups] == [("Small", 2), ("big", 1)]
    # No submitter template of its own: KubeRay's default is written out, gated.
    submitter = spec["submitterPodTemplate"]
    assert submitter["spec"]["containers"] == [default_submitter(HEAD_IMAGE)]
    assert gates(submitter) == [{"name": ADMISSION_GATE}]
    # Released twice, the gate is there once.
    again = read(rayjob(**{**rayjob()["spec"], **spec, "suspend": True}))
    (patch,) = RAY_JOB.release(again)
    assert gates(patch.body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]) == [
        {"name": "someone-else/gate"},
        {"name": ADMISSION_GATE},
    ]
    # HTTPMode: no submitter to gate.
    (patch,) = RAY_JOB.release(read(rayjob(submissionMode="HTTPMode")))
    assert "submitterPodTemplate" not in patch.body["spec"]


def test_a_raycluster_is_released_gated_without_a_rayjob_label() -> None:
    (patch,) = RAY_CLUSTER.release(read(raycluster()))
    assert isinstance(patch, Patch)
    spec = patch.body["spec"]
    assert spec["suspend"] is False
    head = spec["headGroupSpec"]["template"]
    assert gates(head)[-1] == {"name": ADMISSION_GATE}
    assert RAY_JOB_LABEL not in head["metadata"].get("labels", {})
    assert all(
        gates(g["template"])[-1] == {"name": ADMISSION_GATE} for g in spec["workerGroupSpecs"]
    )


def test_evicted_and_held_by_suspending_again() -> None:
    for obj, kind in ((rayjob(suspend=False), RAY_JOB), (raycluster(suspend=False), RAY_CLUSTER)):
        gang = read(obj)
        (patch,) = kind.evict(gang)
        assert isinstance(patch, Patch)
        assert patch.body == {"spec": {"suspend": True}}
        held = copy.deepcopy(obj)
        held["spec"]["suspend"] = True
        assert kind.evict(read(held)) == []
        writes = kind.hold(gang)
        assert isinstance(writes[0], Patch)
        assert not any(isinstance(w, Delete) for w in writes)


def test_a_raycluster_never_finishes_and_reads_its_own_spec() -> None:
    gang = read(raycluster(suspend=False))
    assert shape(gang) == [("head", 1), ("small", 2), ("big", 1)]
    assert not gang.facts.finished
    assert not gang.facts.held
    bad = read(raycluster(enableInTreeAutoscaling=True))
    assert "spec.enableInTreeAutoscaling" in bad.facts.spec_error


def test_in_a_managed_namespace_gpu_ray_work_without_a_queue_is_queued_by_default() -> None:
    unlabelled = rayjob(suspend=False, labels={})
    patch = kinds.queue_by_default(RAY_JOB.webhook.resource, unlabelled)
    assert patch == {
        "metadata": {"labels": {"queue-controller.io/queue": "default"}},
        "spec": {"suspend": True},
    }
    cluster = raycluster(suspend=False)
    cluster["metadata"]["labels"] = {}
    assert kinds.queue_by_default(RAY_CLUSTER.webhook.resource, cluster)["spec"] == {
        "suspend": True
    }
    # What KubeRay makes for a RayJob is the RayJob's: its cluster and its submitter Job.
    made = raycluster(suspend=False, owner="RayJob")
    made["metadata"]["labels"] = {}
    assert kinds.queue_by_default(RAY_CLUSTER.webhook.resource, made) == {}
    submitter = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "tune",
            "namespace": "ns",
            "ownerReferences": made["metadata"]["ownerReferences"],
        },
        "spec": {"template": template(gpus=1)},
    }
    assert kinds.queue_by_default(JOB, submitter) == {}
    # CPU only: untouched.
    cpu = rayjob(
        suspend=False, labels={}, rayClusterSpec={"headGroupSpec": {"template": template()}}
    )
    assert kinds.queue_by_default(RAY_JOB.webhook.resource, cpu) == {}
    assert kinds.queue_by_default(POD, ray_pod("RayCluster", WORKER_LABELS)) == {}


def test_both_kinds_are_registered_watched_optional_and_granted() -> None:
    plurals = {r for rule in kinds.rbac_rules() for r in rule.resources}
    for kind in (kinds.by_name("RayJob"), kinds.by_name("RayCluster")):
        assert kind.head in kinds.WATCHED
        assert kind.head in kinds.OPTIONAL
        assert kind.head is not None
        assert {kind.head.plural, f"{kind.head.plural}/finalizers"} <= plurals


def test_through_translation_and_the_planner_a_rayjob_gets_its_pod_group() -> None:
    actions = plan(rayjob())
    (create,) = [a for a in actions if isinstance(a, act.CreatePodGroup)]
    assert create.body["metadata"]["name"] == "rayjob-tune"
    assert create.body["spec"] == {"queue": "q", "minMember": 5}
    owner = create.body["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("RayJob", "uid-tune", True)
    actions = plan(raycluster())
    (create,) = [a for a in actions if isinstance(a, act.CreatePodGroup)]
    assert create.body["metadata"]["name"] == "raycluster-serve"
    # The cluster KubeRay made for a RayJob gets none.
    assert not [a for a in plan(raycluster(owner="RayJob")) if isinstance(a, act.CreatePodGroup)]


def _gated_pod(name: str, owner: str, labels: dict[str, str]) -> dict[str, Any]:
    member = ray_pod(
        owner, {**labels, RAY_JOB_LABEL: "tune"}, "batch/v1" if owner == "Job" else "ray.io/v1"
    )
    member["metadata"].update(name=name, uid=f"uid-{name}", resourceVersion="12")
    member["spec"]["schedulingGates"] = [{"name": ADMISSION_GATE}]
    member["status"] = {"phase": "Pending"}
    return member


def test_an_admitted_rayjobs_cluster_is_bound_before_its_submitter_exists() -> None:
    # KubeRay makes the submitter only once the cluster is ready: were the gang whole only
    # with it, no member would ever be bound (found on the real KubeRay).
    plan_by_set = {"head": {"n1": 1}, "small": {"n2": 2}, "big": {"n3": 1}, "submitter": {"n1": 1}}
    admitted = {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "rayjob-tune",
            "namespace": "ns",
            "resourceVersion": "11",
            "labels": {"queue-controller.io/workload-kind": "RayJob"},
            "ownerReferences": [{"kind": "RayJob", "name": "tune", "uid": "uid-tune"}],
        },
        "spec": {"queue": "q", "minMember": 5},
        "status": {
            "phase": "Admitted",
            "placement": {"n1": 2, "n2": 2, "n3": 1},
            "podSetPlacement": plan_by_set,
            "admittedAt": iso(5),
        },
    }
    c = cluster(
        rayjob(suspend=False),
        admitted,
        _gated_pod("head", "RayCluster", HEAD_LABELS),
        _gated_pod("small-a", "RayCluster", WORKER_LABELS),
        _gated_pod("small-b", "RayCluster", WORKER_LABELS),
        _gated_pod("big", "RayCluster", {"ray.io/node-type": "worker", "ray.io/group": "big"}),
    )
    c.cycle()

    def node_of(name: str) -> str | None:
        held = c.held("Pod", name)["spec"]
        assert not held.get("schedulingGates")
        return str(held["nodeSelector"][HOSTNAME_LABEL])

    assert {n: node_of(n) for n in ("head", "small-a", "small-b", "big")} == {
        "head": "n1",
        "small-a": "n2",
        "small-b": "n2",
        "big": "n3",
    }
    # The submitter comes once the cluster runs, and goes where it was planned.
    submitter = _gated_pod("submit", "Job", {})
    c.fake.seed(submitter)
    c.state.upsert(submitter)
    for name in ("head", "small-a", "small-b", "big"):
        c.watch("Pod", name)
    c.cycle()
    assert node_of("submit") == "n1"


def test_topology_and_dra_claims_are_read_from_each_groups_template() -> None:
    spec = cluster_spec()
    rack = "cloud.provider.com/rack"
    spec["workerGroupSpecs"][1]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-required-topology": rack}
    }
    claim = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    spec["workerGroupSpecs"][0]["template"]["spec"]["resourceClaims"] = [claim]
    _head, small, big, _submitter = read(rayjob(rayClusterSpec=spec)).facts.pod_sets
    assert big.topology is not None
    assert (big.topology.mode.name, big.topology.level) == ("REQUIRED", rack)
    assert small.topology is None
    assert [c.name for c in small.template.resource_claims] == ["gpu"]
    # Written wrong, the annotation is named in the gang's own error.
    spec["workerGroupSpecs"][1]["template"]["metadata"]["annotations"][
        "kueue.x-k8s.io/podset-slice-size"
    ] = "many"
    facts = read(rayjob(rayClusterSpec=spec)).facts
    assert "spec.rayClusterSpec.workerGroupSpecs[1].template.metadata.annotations" in (
        facts.spec_error
    )
