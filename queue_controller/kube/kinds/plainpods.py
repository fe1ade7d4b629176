"""Plain Pods as gangs: what Ray, Spark, LeaderWorkerSet and MPI launchers create.

Pods that carry a queue label and ``queue-controller.io/pod-group: <name>``
form one gang, whose size is the annotation
``queue-controller.io/pod-group-total-count: "<N>"`` on its members (Kueue's
``kueue.x-k8s.io/pod-group-name`` and ``kueue.x-k8s.io/pod-group-total-count``
are accepted as aliases).  A labelled Pod without a group is a gang of one.

* Held by our scheduling gate, which the webhook adds as each Pod is created.
* Admitted only once all N members exist and every one of them fits; until
  then the gang reports ``WaitingForMembers`` with how many exist.
* Members of different shapes (a launcher and its workers) are separate pod
  sets, named by a digest of what admission reads of them, so the name is the
  same in every process and across a restart.
* Released member by member: the gate comes off and a hostname
  ``nodeSelector`` for the planned node goes on (the controller's binding, as
  for a Job's pods), so there is nothing to release at the gang level.
* Evicted by deleting the members; the owner that made them (a ReplicaSet,
  your operator) makes them again, gated by the webhook, and they queue anew.
  A Pod without an owner is not made again: evicting it ends it.

Counts in annotations are read by :func:`fields.whole_number` (ASCII digits,
within int64), and a total count above :data:`fields.MAX_GANG_MEMBERS` (the
largest cluster Kubernetes supports) is refused: each is the gang's
``spec_error`` naming the annotation, never an exception out of :meth:`read`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from queue_controller.core.model import PodSet, PodTemplate, TopologyRequest
from queue_controller.errors import InputError
from queue_controller.kube.fields import (
    INT64_MAX,
    MAX_GANG_MEMBERS,
    Obj,
    get,
    objects,
    strings,
    whole_number,
)
from queue_controller.kube.kinds.base import (
    KindFacts,
    KindGang,
    Membership,
    RbacRule,
    WebhookRule,
    queue_name,
)
from queue_controller.kube.kinds.managed import raw_mapping
from queue_controller.kube.kinds.runtime import (
    NO_ASK,
    RUNTIME_ANNOTATION,
    RuntimeAsk,
    runtime_ask,
)
from queue_controller.kube.kinds.topology import topology_request
from queue_controller.kube.objects import pod_template
from queue_controller.kube.resources import ADMISSION_GATE, HOSTNAME_LABEL, POD, Resource
from queue_controller.kube.views import Delete, MemberPod, Write

GROUP_LABEL = "queue-controller.io/pod-group"
TOTAL_ANNOTATION = "queue-controller.io/pod-group-total-count"
# Kueue's plain-pod integration spells them so; accepted as they are.
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
GROUP_LABELS = (GROUP_LABEL, KUEUE_GROUP_LABEL)
TOTAL_ANNOTATIONS = (TOTAL_ANNOTATION, KUEUE_TOTAL_ANNOTATION)
TIMEOUT_ANNOTATION = "queue-controller.io/pods-ready-timeout-seconds"
# Written by the webhook as a member is created: its pod set, fixed for its life.
POD_SET_ANNOTATION = "queue-controller.io/pod-set"
SINGLE_POD_SET = "main"


def group_name(pod: MemberPod) -> str:
    return next((pod.labels[k] for k in GROUP_LABELS if pod.labels.get(k)), "")


def pod_set_name(pod: MemberPod) -> str:
    """The member's role: the annotation the webhook wrote, else a digest of its shape."""
    return pod.annotations.get(POD_SET_ANNOTATION) or _role(pod.template)


def _role(template: PodTemplate) -> str:
    """A digest of what admission reads of a member (requests, constraints).

    ``repr`` of the typed template is used, not ``hash``: Python salts string
    hashes per process, and this name is stored in the PodGroup's status.  The
    hostname selector is left out: binding adds it, and a bound member is of
    the same role as its gated siblings.
    """
    selector = {k: v for k, v in template.node_selector.items() if k != HOSTNAME_LABEL}
    shape = replace(template, node_selector=selector)
    digest = hashlib.sha256(repr(shape).encode()).hexdigest()
    return f"role-{digest[:10]}"


class PlainPods:
    name: str = "Pod"
    head: Resource | None = None
    webhook: WebhookRule = WebhookRule(resource=POD)
    held_until_bound: bool = True
    optional: bool = False
    status_read: frozenset[str] = frozenset()  # no head
    # Reading, binding and deleting pods are the core's rules already.
    rbac: tuple[RbacRule, ...] = ()

    def pod_specs(self, obj: Obj) -> list[Obj]:
        return [raw_mapping(obj, "spec")]

    def is_queued(self, obj: Obj) -> bool:
        return bool(queue_name(strings(obj, "metadata.labels")))

    def membership(self, pod: MemberPod) -> Membership | None:
        if not queue_name(pod.labels):
            return None
        group = group_name(pod)
        if not group:
            return Membership(workload=pod.ref.name, pod_set=SINGLE_POD_SET)
        return Membership(workload=group, pod_set=pod_set_name(pod))

    def read(
        self, *, namespace: str, name: str, head: Obj | None, members: Sequence[MemberPod]
    ) -> KindGang:
        del head  # pods alone make a pod group
        members = sorted(members, key=lambda p: (p.created, p.ref.name))
        grouped = any(group_name(p) for p in members)
        live = [p for p in members if p.live]
        succeeded = sum(1 for p in members if p.phase == "Succeeded")
        terminated = sum(1 for p in members if not p.live and not p.deleting)
        total, total_error = _total(members) if grouped else (1, "")
        topologies, topology_error = _topologies(live)
        timeout, timeout_error = _timeout(members)
        runtime, runtime_error = _runtime(members)
        spec_error = (
            total_error
            or _queues_agree(members)
            or topology_error
            or timeout_error
            or runtime_error
        )
        counted = len(live) + succeeded
        if not spec_error and len(live) > total:
            spec_error = (
                f"{len(live)} members exist but {TOTAL_ANNOTATION} is {total}: "
                "delete the extra pods or raise the count"
            )
        pod_sets = _pod_sets(live, topologies)
        queue = queue_name(members[0].labels) if members else ""
        facts = KindFacts(
            queue=queue,
            pod_sets=pod_sets,
            # Nothing of it may run: every live member still carries our gate.
            held=all(p.gated and not p.node_name for p in live),
            finished=not live and terminated >= total,
            succeeded=not live and succeeded >= total,
            absent_members=0 if spec_error else max(0, total - counted),
            spec_error=spec_error,
            timeout_seconds=timeout,
            gang_size=total if total and not spec_error else None,
            runtime=runtime,
        )
        return KindGang(
            namespace=namespace,
            name=name,
            head=None,
            head_ref=None,
            members=tuple(members),
            facts=facts,
            created=min((p.created for p in members), default=0.0),
            labels=members[0].labels if members else {},
        )

    def hold_at_creation(self, obj: Obj) -> Obj:
        # A pod that names its node skips the scheduler, and so the gate: not ours.
        if get(obj, "spec.nodeName", str, ""):
            return {}
        patch: dict[str, Any] = {}
        gates = list(objects(obj, "spec.schedulingGates"))
        if not any(g.get("name") == ADMISSION_GATE for g in gates):
            patch["spec"] = {"schedulingGates": [*gates, {"name": ADMISSION_GATE}]}
        # Written over whatever the pod came with: a pod set is charged its first member's
        # requests, so a role chosen by the user could pass big members off as a small one.
        # (The chart's placement-annotations policy keeps it fixed after creation; at
        # creation only this webhook knows the shape's digest.)
        role = _role(pod_template(get(obj, "spec", dict, {})))
        if strings(obj, "metadata.annotations").get(POD_SET_ANNOTATION) != role:
            patch["metadata"] = {"annotations": {POD_SET_ANNOTATION: role}}
        return patch

    def hold(self, gang: KindGang) -> list[Write]:
        # A pod cannot be gated again once created: one that runs without an
        # admission is deleted, for its owner to make again (gated by the webhook).
        # One without an owner would be lost, so it is left to run, charged to quota.
        return [
            Delete(ref=p.ref)
            for p in gang.members
            if p.live and not p.gated and p.owner is not None
        ]

    def release(self, gang: KindGang) -> list[Write]:
        return []  # each member is released by its own binding

    def evict(self, gang: KindGang) -> list[Write]:
        return []  # deleting the members is the eviction

    def pod_group_name(self, name: str) -> str:
        # Prefixed, so a Job and a pod group of one name never share a PodGroup.
        return f"pods-{name}"

    def pod_group_owners(self, gang: KindGang) -> list[Obj]:
        """The members' common owner, when they have one, so the PodGroup goes with it.

        Not the pods themselves: they are deleted on every eviction, and the
        PodGroup must outlive them to carry the requeue count and backoff.
        A group with no common owner is cleaned up by the controller once its
        members are gone for good.
        """
        owners = {
            (p.owner.api_version, p.owner.kind, p.owner.name, p.owner.uid)
            for p in gang.members
            if p.owner is not None
        }
        if len(owners) != 1 or any(p.owner is None for p in gang.members):
            return []
        ((api_version, kind, name, uid),) = owners
        if not (api_version and uid):
            return []
        return [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}]


def _total(members: Sequence[MemberPod]) -> tuple[int, str]:
    """The group's size from its members' annotation; they must agree."""
    seen: dict[str, tuple[str, str]] = {}  # value -> (annotation, first pod with it)
    for pod in members:
        key = next((k for k in TOTAL_ANNOTATIONS if k in pod.annotations), None)
        if key is not None:
            seen.setdefault(pod.annotations[key], (key, pod.ref.name))
    if not seen:
        return 0, (
            f"metadata.annotations[{TOTAL_ANNOTATION}]: a pod group needs its total count "
            f"(on pod {members[0].ref.name if members else '?'})"
        )
    if len(seen) > 1:
        shown = ", ".join(f"{v[:40]!r} on pod {pod}" for v, (_, pod) in sorted(seen.items()))
        return 0, f"metadata.annotations[{TOTAL_ANNOTATION}]: the members disagree ({shown})"
    ((raw, (annotation, first)),) = seen.items()
    field = f"metadata.annotations[{annotation}]"
    try:
        total = whole_number(raw, field=field, maximum=MAX_GANG_MEMBERS)
    except InputError as error:
        return 0, f"{error} (on pod {first})"
    if total < 1:
        return 0, f"{field}: 0 is not a positive count (on pod {first})"
    return total, ""


def _queues_agree(members: Sequence[MemberPod]) -> str:
    queues = {queue_name(p.labels): p.ref.name for p in members}
    if len(queues) <= 1:
        return ""
    shown = ", ".join(f"{q!r} on pod {pod}" for q, pod in sorted(queues.items()))
    return f"metadata.labels: the members of one pod group name different queues ({shown})"


def _timeout(members: Sequence[MemberPod]) -> tuple[int | None, str]:
    """The first member's timeout annotation, and why it cannot be read."""
    for pod in members:
        raw = pod.annotations.get(TIMEOUT_ANNOTATION)
        if raw is not None:
            field = f"metadata.annotations[{TIMEOUT_ANNOTATION}]"
            try:
                return whole_number(raw, field=field, maximum=INT64_MAX), ""
            except InputError as error:
                return None, f"{error} (on pod {pod.ref.name})"
    return None, ""


def _runtime(members: Sequence[MemberPod]) -> tuple[RuntimeAsk, str]:
    """The first member's runtime annotation that has one, and its runtime class."""
    try:
        ask = runtime_ask(
            annotations=(("metadata.annotations", p.annotations) for p in members),
            labels=members[0].labels if members else {},
        )
    except InputError as error:
        holder = next(p for p in members if RUNTIME_ANNOTATION in p.annotations)
        return NO_ASK, f"{error} (on pod {holder.ref.name})"
    return ask, ""


# Plain pods carry no completion index (unlike an Indexed Job's), so nothing says which
# slice a member is in: a pod group asking for slices is refused rather than mis-sliced.
NO_INDEX = "slices are filled by completion index, which plain pods do not have; use an Indexed Job"


def _topologies(live: Sequence[MemberPod]) -> tuple[dict[str, TopologyRequest | None], str]:
    """Each role's topology request, from its members' annotations; they must agree."""
    out: dict[str, TopologyRequest | None] = {}
    first: dict[str, str] = {}
    for pod in live:
        role = pod.pod_set or SINGLE_POD_SET
        request, error = topology_request(
            pod.annotations, prefix="metadata.annotations", no_index=NO_INDEX
        )
        if error:
            return {}, f"{error} (on pod {pod.ref.name})"
        if role not in out:
            out[role], first[role] = request, pod.ref.name
        elif out[role] != request:
            return {}, (
                "metadata.annotations: the members of one pod set ask for different "
                f"topologies (pods {first[role]} and {pod.ref.name})"
            )
    return out, ""


def _pod_sets(
    live: Sequence[MemberPod], topologies: dict[str, TopologyRequest | None]
) -> tuple[PodSet, ...]:
    """One pod set per role among the live members, in the order roles first appear."""
    by_role: dict[str, list[MemberPod]] = {}
    for pod in live:
        by_role.setdefault(pod.pod_set or SINGLE_POD_SET, []).append(pod)
    return tuple(
        PodSet(
            role, pods[0].template, len(pods), len(pods), path="spec", topology=topologies.get(role)
        )
        for role, pods in by_role.items()
    )
