"""The registry of workload kinds: everything that can queue.

Order matters where kinds overlap: a pod is claimed by the first kind that
says it is a member, so a Job's pods belong to the Job even when they carry
the queue label that would also make them a plain pod group.
"""

from __future__ import annotations

from collections.abc import Mapping

from queue_controller.errors import InputError
from queue_controller.kube.fields import Obj, strings
from queue_controller.kube.kinds.base import (
    KUEUE_QUEUE_LABEL,
    QUEUE_LABEL,
    QUEUE_LABELS,
    KindFacts,
    KindGang,
    Membership,
    RbacRule,
    WebhookRule,
    WorkloadKind,
    queue_name,
)
from queue_controller.kube.kinds.batchjob import BatchJob
from queue_controller.kube.kinds.kubeflow import TRAINING_JOBS
from queue_controller.kube.kinds.managed import (
    DEFAULT_QUEUE,
    asks_for_accelerator,
    merge,
    raw_mapping,
)
from queue_controller.kube.kinds.plainpods import PlainPods
from queue_controller.kube.kinds.ray import RayClusterKind, RayJobKind
from queue_controller.kube.resources import CORE, POD, Resource
from queue_controller.kube.views import MemberPod, member_pod

__all__ = [
    "DEFAULT_QUEUE",
    "KINDS",
    "KUEUE_QUEUE_LABEL",
    "OPTIONAL",
    "QUEUE_LABEL",
    "QUEUE_LABELS",
    "WATCHED",
    "KindFacts",
    "KindGang",
    "Membership",
    "RbacRule",
    "WebhookRule",
    "WorkloadKind",
    "by_name",
    "claim",
    "hold_at_creation",
    "queue_by_default",
    "queue_name",
    "rbac_rules",
]

# A RayJob first: the pods it labels at release are its own, though a RayCluster or
# (its submitter's) a Job owns them.  The training-operator's jobs and RayClusters before
# plain pods: their pods are theirs, whatever labels the templates gave them.
PLAIN_PODS = PlainPods()
KINDS: tuple[WorkloadKind, ...] = (
    RayJobKind(),
    BatchJob(),
    *TRAINING_JOBS,
    RayClusterKind(),
    PLAIN_PODS,
)

BY_NAME: Mapping[str, WorkloadKind] = {kind.name: kind for kind in KINDS}
BY_HEAD: Mapping[str, WorkloadKind] = {
    kind.head.kind: kind for kind in KINDS if kind.head is not None
}
# Every resource the controller lists and watches: the core's and the kinds' heads.
WATCHED: tuple[Resource, ...] = CORE + tuple(k.head for k in KINDS if k.head is not None)
# Heads whose CRD may be missing (an operator not installed): a listing that finds no
# such API means no objects of it, not a broken cluster.
OPTIONAL: frozenset[Resource] = frozenset(
    k.head for k in KINDS if k.head is not None and k.optional
)

# What the controller itself asks of the API, whatever kinds are registered.  The
# chart's ClusterRole is checked against rbac_rules() (tests/deploy), and every call
# the applier makes in the write-side tests is checked against it too.
CORE_RBAC: tuple[RbacRule, ...] = (
    *(
        RbacRule(
            group=r.group,
            resources=(r.plural,),
            verbs=("get", "list", "watch"),
            why="listed at start-up and watched: the state every cycle reads",
        )
        for r in CORE
    ),
    RbacRule(
        group="",
        resources=("pods",),
        verbs=("patch", "delete"),
        why="binding a member (gate off, planned node), deleting members on eviction",
    ),
    RbacRule(
        group="",
        resources=("nodes", "nodes/status"),
        verbs=("patch",),
        why="GPU health from DCGM: the health annotation, taint and GPUHealthy condition",
    ),
    RbacRule(
        group="queue-controller.io",
        resources=("podgroups",),
        verbs=("create", "delete"),
        why="one PodGroup per gang; deleting one whose gang is gone for good",
    ),
    RbacRule(
        group="queue-controller.io",
        resources=("cohorts/status", "podgroups/status", "queues/status", "teamquotas/status"),
        verbs=("patch",),
        why="phase, reason and placement; queue counts; quota usage; a cohort's subtree",
    ),
    RbacRule(group="", resources=("events",), verbs=("create",), why="an Event per decision"),
    RbacRule(
        group="",
        resources=("namespaces",),
        verbs=("get", "list", "watch"),
        why="managed namespaces: a namespace's labels say whether queueing is enforced in it",
    ),
    RbacRule(
        group="apiextensions.k8s.io",
        resources=("customresourcedefinitions",),
        verbs=("list", "watch"),
        why="kopf's resource observer notices our CRDs being installed",
    ),
)


def rbac_rules() -> tuple[RbacRule, ...]:
    """Every rule the controller needs cluster-wide: the core's, then each kind's."""
    return CORE_RBAC + tuple(rule for kind in KINDS for rule in kind.rbac)


def by_name(name: str) -> WorkloadKind:
    return BY_NAME[name]


def claim(pod: MemberPod) -> tuple[WorkloadKind, Membership] | None:
    """The kind (and gang) a pod belongs to: the first kind that claims it."""
    for kind in KINDS:
        membership = kind.membership(pod)
        if membership is not None:
            return kind, membership
    return None


def hold_at_creation(resource: Resource, obj: Obj) -> Obj:
    """What the webhook adds to a new object of ``resource``: ``{}`` when it is not ours.

    A pod is held only by the kind that claims it as a member, and only if that
    kind holds gangs through their pods (a Job's pods are held by the Job).
    """
    if resource == POD:
        try:
            claimed = claim(member_pod(obj))
        except InputError:
            return {}  # the API server will refuse it, or the cycle will report it
        if claimed is None or claimed[0].webhook.resource != POD:
            return {}
        return claimed[0].hold_at_creation(obj)
    kind = BY_HEAD.get(resource.kind)
    if kind is None or not kind.is_queued(obj):
        return {}
    return kind.hold_at_creation(obj)


def _made_by_a_head(obj: Obj) -> bool:
    """Whether ``obj``'s controlling owner is another kind's head (a RayJob makes a Job
    and a RayCluster): it is part of that gang, never queued on its own."""
    refs = raw_mapping(obj, "metadata").get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind = BY_HEAD.get(str(ref.get("kind")))
            head = kind.head if kind is not None else None
            if head is not None and ref.get("apiVersion") == head.api_version:
                return True
    return False


def queue_by_default(resource: Resource, obj: Obj) -> Obj:
    """What the webhook adds to a new object of ``resource`` without a queue label in a
    managed namespace (kinds/managed.py): ``{}`` when it is not ours to queue.

    Ours: an object of a known kind (a Job, a PyTorchJob and kin, a RayJob or
    RayCluster; a Pod no other kind claims, so never a Job's pod) that asks for an
    accelerator in any of its templates and is not made by another kind's head (a
    RayJob's submitter Job and cluster are the RayJob's).  It gets the queue label
    ``default`` and the hold its kind gives every queued object.  The namespace is the
    caller's to check: this says what to do *if* it is managed.
    """
    if queue_name(strings(obj, "metadata.labels")):
        return {}  # labelled: hold_at_creation, by the kind's own webhook
    if _made_by_a_head(obj):
        return {}  # a part of a queued gang (a RayJob's submitter Job or RayCluster)
    kind = PLAIN_PODS if resource == POD else BY_HEAD.get(resource.kind)
    if kind is None or not any(asks_for_accelerator(s) for s in kind.pod_specs(obj)):
        return {}
    if resource == POD:
        try:
            if claim(member_pod(obj)) is not None:
                return {}  # a member of a gang headed elsewhere (a Job's pod)
        except InputError:
            return {}  # the API server refuses it, or the cycle reports it
    label: Obj = {"metadata": {"labels": {QUEUE_LABEL: DEFAULT_QUEUE}}}
    # A pod that names its node cannot be gated: labelled all the same, it is a queued
    # pod that the admission policies refuse, or the controller holds or charges.
    return merge(label, hold_at_creation(resource, merge(obj, label)))
