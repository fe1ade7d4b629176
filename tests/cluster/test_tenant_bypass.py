"""The chart's ValidatingAdmissionPolicies, tried on the real API server as a tenant would.

alice holds the built-in ``edit`` role in one namespace, and nothing else. Before the
policies, she could get GPUs around the queue: name a node in a queued pod, remove the
admission gate from a gated pod, strip a held Job's queue label or unsuspend it, rewrite a
member's pod-set annotation, or create an accelerator Job without a queue label in a managed
namespace. Each is refused here, with a message naming the rule; the controller's own service
account (impersonated, with the chart's ClusterRole) still does what the controller does.

The policies are rendered from the chart (tests/deploy/chart.py) and created for real. Their
bindings select only namespaces labelled for this module, so the test controller of other
modules (which runs as the cluster admin, not as the chart's service account) is never held
by them.

Also the PriorityClass cap of examples/priority-classes/: the ResourceQuota that keeps a
tenant namespace off a class, and the example policy that keeps its Jobs off it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import ROOT, Cluster
from tests.cluster.people import allowed, as_json, as_user, bind, kubectl, refused
from tests.cluster.people import service_account_groups as sa_groups
from tests.cluster.workloads import GPU, eventually, h100, job
from tests.deploy.chart import Doc, render

pytestmark = pytest.mark.cluster

RELEASE = "qc-tenancy"
SYSTEM = "qc-tenancy-system"
FULLNAME = f"{RELEASE}-queue-controller"
CONTROLLER = f"system:serviceaccount:{SYSTEM}:{FULLNAME}"
ENFORCED = "qc-test-policies"  # the label this module's namespaces carry
MANAGED = "qc-test-managed"
QUEUE = "queue-controller.io/queue"
KUEUE = "kueue.x-k8s.io/queue-name"
GATE = "queue-controller.io/admission"
POD_SET = "queue-controller.io/pod-set"
# kube-controller-manager's user on the local control plane (its admin kubeconfig): the Job
# controller creates Jobs' pods as it.
JOB_CONTROLLER = "kubernetes-admin"
# The training-operator and KubeRay run out of cluster with the same admin kubeconfig.
TRAINING_OPERATOR = "kubernetes-admin"
KUBERAY = "kubernetes-admin"
EXAMPLES = ROOT / "examples" / "priority-classes"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def apply(cluster: Cluster, docs: list[Doc]) -> None:
    applied = kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert applied.returncode == 0, applied.stderr


def delete(cluster: Cluster, docs: list[Doc]) -> None:
    for doc in docs:
        kind = doc["kind"].lower()
        kubectl(cluster, "delete", kind, doc["metadata"]["name"], "--ignore-not-found")


@pytest.fixture(scope="module")
def policies(cluster: Cluster) -> Iterator[list[Doc]]:
    """The chart's policies and the controller's ClusterRole, bound to this module's namespaces."""
    docs = render(
        f"admissionPolicies.namespaceSelector.matchLabels.{ENFORCED}=enforced",
        f"managedJobsNamespaceSelector.matchLabels.{MANAGED}=managed",
        f"admissionPolicies.jobControllerUsers={{{JOB_CONTROLLER}}}",
        f"admissionPolicies.trainingOperatorUsers={{{TRAINING_OPERATOR}}}",
        f"admissionPolicies.kuberayUsers={{{KUBERAY}}}",
        "userRoles.enabled=false",
        namespace=SYSTEM,
        release=RELEASE,
    )
    ours = [d for d in docs if d["kind"] in POLICY_KINDS]
    names = {d["metadata"]["name"] for d in ours if d["kind"] == POLICY_KINDS[0]}
    assert names == {
        f"{FULLNAME}-{rule}"
        for rule in (
            "queue-label",
            "job-suspend",
            "training-job-suspend",
            "ray-suspend",
            "admission-gate",
            "node-name",
            "placement-annotations",
            "managed-namespaces",
        )
    }
    rbac = [
        d
        for d in docs
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding") and d["metadata"]["name"] == FULLNAME
    ]
    assert len(rbac) == 2
    apply(cluster, [*ours, *rbac])
    try:
        yield ours
    finally:
        delete(cluster, [*ours, *rbac])


def _labelled_namespace(cluster: Cluster, namespace: str, **labels: str) -> str:
    cluster.core.patch_namespace(namespace, {"metadata": {"labels": labels}})
    bind(cluster, namespace, "alice", "edit")
    return namespace


@pytest.fixture
def tenant(cluster: Cluster, namespace: str, policies: list[Doc]) -> str:
    """A namespace the policies hold in, where alice is an editor; once the policies act."""
    ns = _labelled_namespace(cluster, namespace, **{ENFORCED: "enforced"})
    # A binding takes effect once the API server's informer has it: wait for the first refusal.
    probe = pod("probe", labels={QUEUE: "q"}, nodeName=h100(7)[0])
    eventually(
        lambda: refused(alice(cluster, "create", "-n", ns, "-f", "-", stdin=as_json(probe))),
        timeout=30,
        what="the policies to take effect",
    )
    return ns


@pytest.fixture
def managed(cluster: Cluster, namespace: str, policies: list[Doc]) -> str:
    """A managed namespace (managedJobsNamespaceSelector), alice an editor there."""
    ns = _labelled_namespace(cluster, namespace, **{MANAGED: "managed"})
    probe = job("probe", queue="", gpus=1, pods=1, nodes=h100(7), suspend=True)
    del probe["metadata"]["labels"]
    eventually(
        lambda: refused(alice(cluster, "create", "-n", ns, "-f", "-", stdin=as_json(probe))),
        timeout=30,
        what="the managed-namespace policy to take effect",
    )
    return ns


def alice(cluster: Cluster, *args: str, stdin: str | None = None) -> Any:
    return as_user(cluster, "alice", *args, stdin=stdin)


def the_controller(cluster: Cluster, *args: str, stdin: str | None = None) -> Any:
    """kubectl as the chart's controller service account, with only its own RBAC."""
    return as_user(cluster, CONTROLLER, *args, groups=sa_groups(SYSTEM), stdin=stdin)


def a_cluster_admin_as_the_controller(
    cluster: Cluster, *args: str, stdin: str | None = None
) -> Any:
    """The controller's user name with a cluster admin's rights: the policies' exception
    alone, for writes the controller's RBAC does not grant (it never creates pods)."""
    groups = (*sa_groups(SYSTEM), "system:masters")
    return as_user(cluster, CONTROLLER, *args, groups=groups, stdin=stdin)


def pod(
    name: str, *, labels: dict[str, str], gpus: int = 1, gates: tuple[str, ...] = (), **spec: Any
) -> dict[str, Any]:
    """A pod that never runs here: gated (ours or a hold of the test's own), or bound to a
    node with no room, it takes no GPU from other tests."""
    held = [{"name": g} for g in gates] if gates else []
    if not held and "nodeName" not in spec:
        held = [{"name": "example.com/test-hold"}]
    container: dict[str, Any] = {"name": "c", "image": "trainer"}
    if gpus:
        container["resources"] = {"limits": {GPU: str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [container],
            **({"schedulingGates": held} if held else {}),
            **spec,
        },
    }


def make(cluster: Cluster, namespace: str, body: dict[str, Any]) -> None:
    """Created by the cluster admin, who is held by no exception but breaks no rule here."""
    made = kubectl(cluster, "create", "-n", namespace, "-f", "-", stdin=as_json(body))
    assert made.returncode == 0, made.stderr


def merge(patch: dict[str, Any]) -> tuple[str, ...]:
    return ("--type=merge", "-p", json.dumps(patch))


# -- a queued pod cannot name its node ---------------------------------------------------


def test_a_queued_pod_cannot_name_its_node(cluster: Cluster, tenant: str) -> None:
    node = h100(7)[0]
    for label in (QUEUE, KUEUE):
        body = pod(f"pinned-{secrets.token_hex(2)}", labels={label: "q"}, nodeName=node)
        result = alice(cluster, "create", "-n", tenant, "-f", "-", stdin=as_json(body))
        assert refused(result, f"{FULLNAME}-node-name", "queued pod nodeName"), result.stderr
    # Nor a queued Job's pods, through its template.
    body = job("pinned", queue="q", gpus=1, pods=1, nodes=[node], suspend=True, nodeName=node)
    result = alice(cluster, "create", "-n", tenant, "-f", "-", stdin=as_json(body))
    assert refused(result, f"{FULLNAME}-node-name"), result.stderr
    # An unqueued pod may (outside managed namespaces): the rule is about the queue only.
    body = pod("unqueued", labels={}, gpus=0, nodeName=node)
    assert allowed(alice(cluster, "create", "-n", tenant, "-f", "-", stdin=as_json(body)))
    # The policy's exception: the controller's user is let through.
    body = pod("by-the-controller", labels={QUEUE: "q"}, gpus=0, nodeName=node)
    made = a_cluster_admin_as_the_controller(
        cluster, "create", "-n", tenant, "-f", "-", stdin=as_json(body)
    )
    assert allowed(made), made.stderr


# -- the admission gate is the controller's to remove ------------------------------------


def test_only_the_controller_removes_the_admission_gate(cluster: Cluster, tenant: str) -> None:
    make(cluster, tenant, pod("gated", labels={QUEUE: "q"}, gates=(GATE,)))
    ungate = ("--type=json", "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]')
    result = alice(cluster, "patch", "pod", "gated", "-n", tenant, *ungate)
    assert refused(result, f"{FULLNAME}-admission-gate", "admission gate"), result.stderr
    # Nor by replacing the gate with another, nor by stripping the label first.
    other = merge({"spec": {"schedulingGates": [{"name": "example.com/other"}]}})
    assert refused(alice(cluster, "patch", "pod", "gated", "-n", tenant, *other))
    strip = alice(cluster, "label", "pod", "gated", "-n", tenant, f"{QUEUE}-")
    assert refused(strip, f"{FULLNAME}-queue-label"), strip.stderr
    gates = cluster.core.read_namespaced_pod("gated", tenant).spec.scheduling_gates
    assert [g.name for g in gates] == [GATE]
    # The controller removes it as it binds the member (kube/kinds: BindMember's patch).
    done = the_controller(cluster, "patch", "pod", "gated", "-n", tenant, *ungate)
    assert allowed(done), done.stderr
    assert not cluster.core.read_namespaced_pod("gated", tenant).spec.scheduling_gates


def test_the_pod_set_annotation_is_fixed(cluster: Cluster, tenant: str) -> None:
    body = pod("member", labels={QUEUE: "q"}, gates=(GATE,))
    body["metadata"]["annotations"] = {POD_SET: "role-abc"}
    make(cluster, tenant, body)
    for change in (f"{POD_SET}=workers", f"{POD_SET}-"):
        result = alice(cluster, "annotate", "pod", "member", "-n", tenant, "--overwrite", change)
        assert refused(result, f"{FULLNAME}-placement-annotations"), result.stderr
    # Other annotations are hers.
    assert allowed(alice(cluster, "annotate", "pod", "member", "-n", tenant, "note=mine"))
    done = the_controller(
        cluster, "patch", "pod", "member", "-n", tenant, *merge({"metadata": {"annotations": {}}})
    )
    assert allowed(done), done.stderr


# -- a held Job stays queued -------------------------------------------------------------


@pytest.mark.parametrize("label", [QUEUE, KUEUE])
def test_a_held_job_keeps_its_queue_label_and_stays_suspended(
    cluster: Cluster, tenant: str, label: str
) -> None:
    make(cluster, tenant, job("held", queue="q", gpus=1, pods=1, nodes=h100(7), label=label,
                              suspend=True))  # fmt: skip
    attempts = {
        "remove the label": ("label", "job", "held", f"{label}-"),
        "change the label": ("label", "job", "held", "--overwrite", f"{label}=other"),
        "add the other label": ("label", "job", "held", f"{({QUEUE, KUEUE} - {label}).pop()}=x"),
    }
    for what, args in attempts.items():
        result = alice(cluster, *args, "-n", tenant)
        assert refused(result, f"{FULLNAME}-queue-label", "queue label"), (what, result.stderr)
    unsuspend = merge({"spec": {"suspend": False}})
    result = alice(cluster, "patch", "job", "held", "-n", tenant, *unsuspend)
    assert refused(result, f"{FULLNAME}-job-suspend", "queued Job unsuspend"), result.stderr
    # Both at once: the label goes and the Job runs, as one request.
    both = merge({"metadata": {"labels": {label: None}}, "spec": {"suspend": False}})
    result = alice(cluster, "patch", "job", "held", "-n", tenant, *both)
    assert refused(result), result.stderr
    found = cluster.batch.read_namespaced_job("held", tenant)
    assert found.spec.suspend is True
    assert found.metadata.labels[label] == "q"
    # She may still suspend, edit and delete her own Job's other fields.
    assert allowed(alice(cluster, "label", "job", "held", "-n", tenant, "team=mine"))


def test_the_controller_releases_a_held_job_and_evicts_it(cluster: Cluster, tenant: str) -> None:
    make(cluster, tenant, job("release", queue="q", gpus=1, pods=2, nodes=h100(7), suspend=True))
    # The controller's release (kube/kinds/batchjob.py BatchJob.release): unsuspend, and gate
    # the pods the Job controller is about to make.
    release = merge(
        {"spec": {"suspend": False, "template": {"spec": {"schedulingGates": [{"name": GATE}]}}}}
    )
    done = the_controller(cluster, "patch", "job", "release", "-n", tenant, *release)
    assert allowed(done), done.stderr
    # Its eviction suspends it back into the queue; unsuspending it again is the controller's.
    evict = the_controller(cluster, "patch", "job", "release", "-n", tenant,
                           *merge({"spec": {"suspend": True}}))  # fmt: skip
    assert allowed(evict), evict.stderr
    back = alice(
        cluster, "patch", "job", "release", "-n", tenant, *merge({"spec": {"suspend": False}})
    )
    assert refused(back, f"{FULLNAME}-job-suspend"), back.stderr
    relabel = the_controller(cluster, "label", "job", "release", "-n", tenant, "--overwrite",
                             f"{QUEUE}=other")  # fmt: skip
    assert allowed(relabel), relabel.stderr


def may_edit_pytorchjobs(cluster: Cluster, namespace: str) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "training-jobs-editor", "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["kubeflow.org"],
                "resources": ["pytorchjobs"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            }
        ],
    }
    make(cluster, namespace, role)
    binding = kubectl(
        cluster, "create", "rolebinding", "alice-training", "-n", namespace,
        "--role=training-jobs-editor", "--user=alice",
    )  # fmt: skip
    assert binding.returncode == 0, binding.stderr
    eventually(
        lambda: allowed(alice(cluster, "get", "pytorchjobs", "-n", namespace)),
        timeout=30,
        what="alice's Role to take effect",
    )


def pytorchjob(name: str, *, labels: dict[str, str], gpus: int = 1) -> dict[str, Any]:
    """Held (suspended), so the training-operator makes none of its pods."""
    replica = {
        "replicas": 1,
        "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "trainer",
             "resources": {"limits": {GPU: str(gpus)} if gpus else {"cpu": "1"}}}
        ]}},
    }  # fmt: skip
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {"Master": replica}},
    }


def test_a_held_pytorchjob_keeps_its_queue_label_and_stays_suspended(
    cluster: Cluster, operators: None, tenant: str
) -> None:
    # alice may edit PyTorchJobs in her namespace, as the training-operator's aggregated
    # roles would let an editor; the policies still hold a queued one.
    may_edit_pytorchjobs(cluster, tenant)
    make(cluster, tenant, pytorchjob("held", labels={QUEUE: "q"}))
    strip = alice(cluster, "label", "pytorchjob", "held", "-n", tenant, f"{QUEUE}-")
    assert refused(strip, f"{FULLNAME}-queue-label", "queue label"), strip.stderr
    unsuspend = merge({"spec": {"runPolicy": {"suspend": False}}})
    result = alice(cluster, "patch", "pytorchjob", "held", "-n", tenant, *unsuspend)
    assert refused(result, f"{FULLNAME}-training-job-suspend", "queued training job"), result.stderr
    # The controller's release (kube/kinds/kubeflow.py): unsuspend, gate every template.
    release = merge({"spec": {"runPolicy": {"suspend": False}, "pytorchReplicaSpecs": {
        "Master": {"template": {"spec": {"schedulingGates": [{"name": GATE}]}}}
    }}})  # fmt: skip
    done = the_controller(cluster, "patch", "pytorchjob", "held", "-n", tenant, *release)
    assert allowed(done), done.stderr


def job_controller_creates(
    cluster: Cluster, namespace: str, owner: str, body: dict[str, Any]
) -> Any:
    """The Job controller's create of one of ``owner``'s pods, as its user, checked by the API
    server's admission (a server-side dry run: the test controller of other modules, running
    in this cluster, cannot race it by suspending the Job)."""
    uid = cluster.batch.read_namespaced_job(owner, namespace).metadata.uid
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": uid, "controller": True,
         "blockOwnerDeletion": True}
    ]  # fmt: skip
    return as_user(
        cluster, JOB_CONTROLLER, "create", "--dry-run=server", "-n", namespace, "-f", "-",
        groups=("system:masters",), stdin=as_json(body),
    )  # fmt: skip


def test_the_job_controller_makes_a_released_jobs_gated_pods(cluster: Cluster, tenant: str) -> None:
    make(cluster, tenant, job("released", queue="q", gpus=1, pods=1, nodes=h100(7)))
    member = pod("released-abcde", labels={QUEUE: "q"}, gates=(GATE,))
    made = job_controller_creates(cluster, tenant, "released", member)
    assert allowed(made), made.stderr


# -- a managed namespace queues every accelerator workload --------------------------------


def test_a_managed_namespace_refuses_unqueued_accelerator_work(
    cluster: Cluster, managed: str
) -> None:
    node = h100(7)[0]
    unlabelled_job = job("free-gpus", queue="", gpus=1, pods=1, nodes=[node])
    del unlabelled_job["metadata"]["labels"]
    result = alice(cluster, "create", "-n", managed, "-f", "-", stdin=as_json(unlabelled_job))
    assert refused(result, f"{FULLNAME}-managed-namespaces", "managed namespace queue label"), (
        result.stderr
    )
    result = alice(
        cluster, "create", "-n", managed, "-f", "-", stdin=as_json(pod("free", labels={}))
    )
    assert refused(result, "managed namespace queue label"), result.stderr
    # A DRA claim is an accelerator too.
    claimed = pod("claimed", labels={}, gpus=0, resourceClaims=[
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])  # fmt: skip
    result = alice(cluster, "create", "-n", managed, "-f", "-", stdin=as_json(claimed))
    assert refused(result, "managed namespace queue label"), result.stderr
    # Labelled, an accelerator pod still may not name its node.
    pinned = pod("pinned", labels={QUEUE: "default"}, nodeName=node)
    result = alice(cluster, "create", "-n", managed, "-f", "-", stdin=as_json(pinned))
    assert refused(result, "managed namespace nodeName"), result.stderr
    # What is not accelerator work is not the queue's.
    cpu = pod("cpu-only", labels={}, gpus=0)
    assert allowed(alice(cluster, "create", "-n", managed, "-f", "-", stdin=as_json(cpu)))


def test_a_queued_job_in_a_managed_namespace_gets_its_pods(cluster: Cluster, managed: str) -> None:
    # The Job is labelled; its pod template is not. The Job controller makes its pods
    # unlabelled, and the policy lets them through as the Job's.
    body = job("queued", queue="default", gpus=1, pods=1, nodes=h100(7), suspend=True)
    made = alice(cluster, "create", "-n", managed, "-f", "-", stdin=as_json(body))
    assert allowed(made), made.stderr
    member = pod("queued-abcde", labels={}, gates=(GATE,))
    made = job_controller_creates(cluster, managed, "queued", member)
    assert allowed(made), made.stderr
    # alice cannot pass a pod of her own off as the Job's.
    forged = pod("forged", labels={})
    uid = cluster.batch.read_namespaced_job("queued", managed).metadata.uid
    forged["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "queued", "uid": uid, "controller": True}
    ]
    result = alice(cluster, "create", "-n", managed, "-f", "-", stdin=as_json(forged))
    assert refused(result, "managed namespace queue label"), result.stderr


def test_a_managed_namespace_queues_training_jobs_and_lets_the_operators_pods_in(
    cluster: Cluster, operators: None, managed: str
) -> None:
    may_edit_pytorchjobs(cluster, managed)
    free = as_json(pytorchjob("free-gpus", labels={}))
    result = alice(cluster, "create", "--dry-run=server", "-n", managed, "-f", "-", stdin=free)
    assert refused(result, f"{FULLNAME}-managed-namespaces", "managed namespace queue label"), (
        result.stderr
    )
    cpu = as_json(pytorchjob("cpu-only", labels={}, gpus=0))
    made = alice(cluster, "create", "--dry-run=server", "-n", managed, "-f", "-", stdin=cpu)
    assert allowed(made), made.stderr
    queued = alice(cluster, "create", "-n", managed, "-f", "-",
                   stdin=as_json(pytorchjob("queued", labels={QUEUE: "default"})))  # fmt: skip
    assert allowed(queued), queued.stderr
    # The operator makes its pods unlabelled, as the job's; alice cannot pass hers off so.
    uid = json.loads(kubectl(cluster, "get", "pytorchjob", "queued", "-n", managed, "-o",
                             "json").stdout)["metadata"]["uid"]  # fmt: skip
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "queued",
             "uid": uid, "controller": True}  # fmt: skip
    member = pod("queued-master-0", labels={}, gates=(GATE,))
    member["metadata"]["ownerReferences"] = [owner]
    made = as_user(
        cluster, TRAINING_OPERATOR, "create", "--dry-run=server", "-n", managed, "-f", "-",
        groups=("system:masters",), stdin=as_json(member),
    )  # fmt: skip
    assert allowed(made), made.stderr
    forged = pod("forged", labels={})
    forged["metadata"]["ownerReferences"] = [owner]
    result = alice(cluster, "create", "-n", managed, "-f", "-", stdin=as_json(forged))
    assert refused(result, "managed namespace queue label"), result.stderr


def may_edit_ray(cluster: Cluster, namespace: str) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "ray-editor", "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["ray.io"],
                "resources": ["rayjobs", "rayclusters"],
                "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
            }
        ],
    }
    make(cluster, namespace, role)
    binding = kubectl(
        cluster, "create", "rolebinding", "alice-ray", "-n", namespace, "--role=ray-editor",
        "--user=alice",
    )  # fmt: skip
    assert binding.returncode == 0, binding.stderr
    eventually(
        lambda: allowed(alice(cluster, "get", "rayjobs", "-n", namespace)),
        timeout=30,
        what="alice's Role to take effect",
    )


def ray_cluster_spec(gpus: int = 1) -> dict[str, Any]:
    limits = {GPU: str(gpus)} if gpus else {"cpu": "1"}
    template = {"spec": {"containers": [
        {"name": "ray", "image": "ray", "resources": {"limits": limits}}]}}  # fmt: skip
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": template},
        "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
             "rayStartParams": {}, "template": template}
        ],
    }  # fmt: skip


def ray(kind: str, name: str, *, labels: dict[str, str], gpus: int = 1) -> dict[str, Any]:
    """Held (suspended), so KubeRay makes nothing of it."""
    spec: dict[str, Any] = {"suspend": True}
    if kind == "RayJob":
        spec.update(entrypoint="python x.py", shutdownAfterJobFinishes=True,
                    rayClusterSpec=ray_cluster_spec(gpus))  # fmt: skip
    else:
        spec.update(ray_cluster_spec(gpus))
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": name, "labels": labels},
            "spec": spec}  # fmt: skip


def test_a_held_rayjob_or_raycluster_keeps_its_queue_label_and_stays_suspended(
    cluster: Cluster, operators: None, tenant: str
) -> None:
    may_edit_ray(cluster, tenant)
    for kind in ("RayJob", "RayCluster"):
        name = kind.lower()
        make(cluster, tenant, ray(kind, "held", labels={KUEUE: "q"}))
        strip = alice(cluster, "label", name, "held", "-n", tenant, f"{KUEUE}-")
        assert refused(strip, f"{FULLNAME}-queue-label", "queue label"), strip.stderr
        unsuspend = merge({"spec": {"suspend": False}})
        result = alice(cluster, "patch", name, "held", "-n", tenant, *unsuspend)
        assert refused(result, f"{FULLNAME}-ray-suspend", "queued Ray unsuspend"), result.stderr
        # Suspending is anyone's right; so is the controller's release.
        done = the_controller(cluster, "patch", name, "held", "-n", tenant, *unsuspend)
        assert allowed(done), done.stderr
        again = alice(
            cluster, "patch", name, "held", "-n", tenant, *merge({"spec": {"suspend": True}})
        )
        assert allowed(again), again.stderr


def test_a_managed_namespace_queues_ray_work_and_lets_only_kuberay_make_a_rayjobs_parts(
    cluster: Cluster, operators: None, managed: str
) -> None:
    may_edit_ray(cluster, managed)
    for kind in ("RayJob", "RayCluster"):
        free = as_json(ray(kind, "free-gpus", labels={}))
        result = alice(cluster, "create", "--dry-run=server", "-n", managed, "-f", "-", stdin=free)
        assert refused(result, f"{FULLNAME}-managed-namespaces", "managed namespace queue label"), (
            result.stderr
        )
        cpu = as_json(ray(kind, "cpu-only", labels={}, gpus=0))
        made = alice(cluster, "create", "--dry-run=server", "-n", managed, "-f", "-", stdin=cpu)
        assert allowed(made), made.stderr
    queued = alice(cluster, "create", "-n", managed, "-f", "-",
                   stdin=as_json(ray("RayJob", "queued", labels={QUEUE: "default"})))  # fmt: skip
    assert allowed(queued), queued.stderr
    uid = json.loads(kubectl(cluster, "get", "rayjob", "queued", "-n", managed, "-o",
                             "json").stdout)["metadata"]["uid"]  # fmt: skip
    owner = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "queued", "uid": uid,
             "controller": True}  # fmt: skip
    # KubeRay makes the RayJob's cluster (with its labels) and its submitter Job; a tenant
    # who made such a cluster herself would have one the queue leaves to its RayJob.
    made_cluster = ray("RayCluster", "queued-x7k2p", labels={QUEUE: "default"})
    made_cluster["metadata"]["ownerReferences"] = [owner]
    submitter = job("queued", queue="", gpus=1, pods=1, nodes=h100(7), suspend=False)
    del submitter["metadata"]["labels"]
    submitter["metadata"]["ownerReferences"] = [owner]
    for body in (made_cluster, submitter):
        made = as_user(
            cluster, KUBERAY, "create", "--dry-run=server", "-n", managed, "-f", "-",
            groups=("system:masters",), stdin=as_json(body),
        )  # fmt: skip
        assert allowed(made), made.stderr
    forged = alice(cluster, "create", "--dry-run=server", "-n", managed, "-f", "-",
                   stdin=as_json(made_cluster))  # fmt: skip
    assert refused(forged, "managed namespace queue label"), forged.stderr
    # The cluster's pods, made by KubeRay unlabelled; alice cannot pass hers off so.
    member = pod("queued-x7k2p-head", labels={}, gates=(GATE,))
    member["metadata"]["ownerReferences"] = [
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "queued-x7k2p",
         "uid": "0c7c2b4e-5b1a-4c1e-9f8e-2f9d0f6b1a11", "controller": True}
    ]  # fmt: skip
    made = as_user(
        cluster, KUBERAY, "create", "--dry-run=server", "-n", managed, "-f", "-",
        groups=("system:masters",), stdin=as_json(member),
    )  # fmt: skip
    assert allowed(made), made.stderr
    result = alice(cluster, "create", "--dry-run=server", "-n", managed, "-f", "-",
                   stdin=as_json(member))  # fmt: skip
    assert refused(result, "managed namespace queue label"), result.stderr


# -- PriorityClasses, capped per namespace (examples/priority-classes/) --------------------


def _example(name: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all(Path(EXAMPLES / name).read_text()) if d]


@pytest.fixture
def critical(cluster: Cluster) -> Iterator[str]:
    """The example's gpu-critical PriorityClass, and its namespace policy."""
    classes = [d for d in _example("priority-classes.yaml") if d["kind"] == "PriorityClass"]
    policy = _example("policy.yaml")
    apply(cluster, [*classes, *policy])
    try:
        yield "gpu-critical"
    finally:
        delete(cluster, [*policy, *classes])


def test_a_tenant_cannot_use_a_capped_priority_class(
    cluster: Cluster, namespace: str, critical: str
) -> None:
    bind(cluster, namespace, "alice", "edit")
    quota = next(d for d in _example("resourcequota.yaml") if d["kind"] == "ResourceQuota")
    made = kubectl(cluster, "create", "-n", namespace, "-f", "-", stdin=as_json(quota))
    assert made.returncode == 0, made.stderr
    body = pod("urgent", labels={QUEUE: "q"}, priorityClassName=critical)

    def refused_by_quota() -> bool:
        result = alice(cluster, "create", "-n", namespace, "-f", "-", stdin=as_json(body))
        return refused(result, "exceeded quota", quota["metadata"]["name"])

    eventually(refused_by_quota, timeout=30, what="the ResourceQuota to refuse the class")
    # A class the namespace is not capped on is hers.
    body = pod("normal", labels={QUEUE: "q"}, priorityClassName="gpu-normal")
    made = alice(cluster, "create", "-n", namespace, "-f", "-", stdin=as_json(body))
    assert allowed(made), made.stderr


def test_the_example_policy_keeps_a_jobs_template_off_a_class(
    cluster: Cluster, namespace: str, critical: str
) -> None:
    # A Job's priority orders its gang (and lets it preempt) before any pod exists, which a
    # ResourceQuota on pods cannot see: the example policy checks Jobs' templates too.
    bind(cluster, namespace, "alice", "edit")
    cluster.core.patch_namespace(
        namespace,
        {
            "metadata": {
                "labels": {"queue-controller.io/priority-capped": "true"},
                "annotations": {"queue-controller.io/allowed-priority-classes": "gpu-normal"},
            }
        },
    )
    body = job("urgent", queue="q", gpus=1, pods=1, nodes=h100(7), suspend=True,
               priorityClassName=critical)  # fmt: skip

    def refused_by_policy() -> bool:
        result = alice(cluster, "create", "-n", namespace, "-f", "-", stdin=as_json(body))
        return refused(result, "priority class", critical)

    eventually(refused_by_policy, timeout=30, what="the example policy to refuse the class")
    body = job("normal", queue="q", gpus=1, pods=1, nodes=h100(7), suspend=True,
               priorityClassName="gpu-normal")  # fmt: skip
    made = alice(cluster, "create", "-n", namespace, "-f", "-", stdin=as_json(body))
    assert allowed(made), made.stderr
    # Tenants cannot lift the cap: a namespace is not theirs to edit.
    lift = alice(cluster, "annotate", "namespace", namespace, "--overwrite",
                 f"queue-controller.io/allowed-priority-classes={critical}")  # fmt: skip
    assert refused(lift), lift.stderr
