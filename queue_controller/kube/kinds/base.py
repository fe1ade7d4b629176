"""What a workload kind must say for the controller to queue it (Kueue's ``GenericJob``).

A kind is one small adapter.  It names what to watch and the webhook that
holds new objects; it says which pods are its members and in which pod set;
it reads a gang's facts (queue, pod sets, finished, held); and it spells the
writes that hold a gang, release it once admitted, and take it back on
eviction.  Nothing in ``controller/`` or ``core/`` knows one kind from another:
adding a kind means a module here, its tests and its RBAC rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from queue_controller.core.model import PodSet
from queue_controller.errors import InputError
from queue_controller.kube.fields import Obj, get, objects
from queue_controller.kube.kinds.runtime import NO_ASK, RuntimeAsk
from queue_controller.kube.resources import Resource
from queue_controller.kube.views import Delete, MemberPod, Patch, Ref, Write, ref_of

QUEUE_LABEL = "queue-controller.io/queue"
# Kueue's label, accepted so teams can move over without relabelling.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
QUEUE_LABELS = (QUEUE_LABEL, KUEUE_QUEUE_LABEL)


T = TypeVar("T")


def read_or(read: Callable[[], T], default: T, errors: list[str]) -> T:
    """``read()``, or ``default`` with the InputError's text added to ``errors``.

    How a kind turns a field it cannot read into its gang's ``spec_error``
    instead of losing the whole gang (see :meth:`WorkloadKind.read`).
    """
    try:
        return read()
    except InputError as error:
        errors.append(str(error))
        return default


def queue_name(labels: Mapping[str, str]) -> str:
    """The queue an object asks for: our label first, then Kueue's; ``""`` if neither."""
    return labels.get(QUEUE_LABEL) or labels.get(KUEUE_QUEUE_LABEL) or ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RbacRule:
    """What a kind needs of the API beyond the core's reads (listed in the chart's ClusterRole)."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookRule:
    """The mutating webhook that holds a kind's new objects before anything runs."""

    resource: Resource
    operations: tuple[Literal["CREATE", "UPDATE", "DELETE", "CONNECT"], ...] = ("CREATE",)


@dataclass(frozen=True, slots=True, kw_only=True)
class Membership:
    """A pod claimed by a kind: the workload it belongs to, and its pod set."""

    workload: str  # the workload's name in the pod's namespace
    pod_set: str


@dataclass(frozen=True, slots=True, kw_only=True)
class KindFacts:
    """What a kind reads of one gang, for the core and the lifecycle."""

    queue: str
    pod_sets: tuple[PodSet, ...]
    held: bool  # nothing of it may run: a suspended Job, gated pods
    finished: bool
    succeeded: bool = False
    # Members the kind expects but that do not exist yet (a pod group short of N).
    absent_members: int = 0
    # Members the kind's own controller makes only once the gang runs, not made yet
    # (a suspended Job's, all of them): what admission is paced on.
    uncreated_members: int = 0
    spec_error: str = ""  # why it cannot be admitted as written (names the field)
    timeout_seconds: int | None = None  # asked for on the object itself
    # Members placed together, when the kind says (a pod group's total count); else
    # the sum of its pod sets' min_count.  Written to the PodGroup's minMember.
    gang_size: int | None = None
    # Pod sets whose members the kind's controller makes only once the rest of the gang
    # runs (a RayJob's submitter, made when its cluster is ready).  Planned and charged
    # with the rest, but the gang is whole without them: binding, which waits for the
    # whole gang, would otherwise wait for them for ever.  They are bound as they come.
    later_pod_sets: frozenset[str] = frozenset()
    # What its objects say of its runtime (kinds/runtime.py): for reservation and backfill.
    runtime: RuntimeAsk = NO_ASK


@dataclass(frozen=True, slots=True, kw_only=True)
class KindGang:
    """The objects of one gang as its kind sees them."""

    namespace: str
    name: str
    head: Obj | None  # the object the gang is (a Job); None when it is only pods
    head_ref: Ref | None
    members: Sequence[MemberPod]
    facts: KindFacts
    created: float
    # Where events about the gang are posted besides its PodGroup.
    about: Ref | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def finished_by(head: Obj, conditions: tuple[str, str]) -> tuple[bool, bool]:
    """(finished, succeeded), from the head's first true condition of the two types,
    success first (a Job's Complete and Failed, a training job's Succeeded and Failed)."""
    for condition in objects(head, "status.conditions"):
        if condition.get("status") == "True" and condition.get("type") in conditions:
            return True, condition.get("type") == conditions[0]
    return False, False


def head_gang(
    resource: Resource,
    *,
    namespace: str,
    name: str,
    head: Obj,
    members: Sequence[MemberPod],
    facts: KindFacts,
    created: float | None,
    labels: Mapping[str, str],
) -> KindGang:
    """The gang a head object makes (a Job, a PyTorchJob): events about it go to the head."""
    head_ref = ref_of(resource, head)
    return KindGang(
        namespace=namespace,
        name=name,
        head=head,
        head_ref=head_ref,
        members=members,
        facts=facts,
        created=created or 0.0,
        about=head_ref,
        labels=labels,
    )


def head_rbac(resource: Resource, why: str) -> tuple[RbacRule, ...]:
    """What a kind headed by ``resource`` needs: to find and write its heads (``why``), and
    to update their finalizers, since a PodGroup's owner reference to its head sets
    blockOwnerDeletion (which the OwnerReferencesPermissionEnforcement plugin checks)."""
    return (
        RbacRule(
            group=resource.group,
            resources=(resource.plural,),
            verbs=("get", "list", "watch", "patch"),
            why=why,
        ),
        RbacRule(
            group=resource.group,
            resources=(f"{resource.plural}/finalizers",),
            verbs=("update",),
            why=f"a PodGroup's ownerReference to its {resource.kind} sets blockOwnerDeletion",
        ),
    )


class SuspendedHead:
    """The hold, hold-and-stop and eviction of a kind whose head has a suspend field (a
    Job's ``spec.suspend``, a PyTorchJob's ``spec.runPolicy.suspend``, a RayJob's): set
    to true, the head's own controller makes no pod, and deletes those it made."""

    def __init__(self, path: str) -> None:
        self.path = path  # "spec.suspend", "spec.runPolicy.suspend"

    def body(self, value: bool) -> dict[str, Any]:
        """The merge patch that sets the field to ``value``."""
        out: dict[str, Any] = {self.path.rsplit(".", 1)[-1]: value}
        for part in reversed(self.path.split(".")[:-1]):
            out = {part: out}
        return out

    def at_creation(self, obj: Obj) -> dict[str, Any]:
        """The webhook's hold: suspended, unless it already is."""
        return {} if get(obj, self.path, bool, False) else self.body(True)

    def stop(self, gang: KindGang) -> list[Write]:
        """A gang that runs unadmitted: suspended, and its live members deleted at once
        rather than when the head's controller gets to them."""
        assert gang.head_ref is not None
        return [
            Patch(ref=gang.head_ref, body=self.body(True)),
            *(Delete(ref=pod.ref) for pod in gang.members if pod.live),
        ]

    def evict(self, gang: KindGang) -> list[Write]:
        """Suspended again (nothing to write if it is held already)."""
        if gang.facts.held:
            return []
        assert gang.head_ref is not None
        return [Patch(ref=gang.head_ref, body=self.body(True))]


def head_owner(resource: Resource, gang: KindGang) -> list[Obj]:
    """The PodGroup's owner reference to the gang's head: it goes when the head goes, and
    blockOwnerDeletion holds the head's deletion until the PodGroup is gone."""
    assert gang.head_ref is not None
    return [
        {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "name": gang.name,
            "uid": gang.head_ref.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


class WorkloadKind(Protocol):
    """One kind of workload that can queue."""

    # The core's Workload.kind, part of the workload's key and every decision.
    name: str
    # The object that heads a gang, watched and listed; None when pods alone make one.
    head: Resource | None
    webhook: WebhookRule
    rbac: tuple[RbacRule, ...]
    # True when the hold is on each member pod (a scheduling gate) and binding a member
    # lifts it: an admitted gang is then still "held" until its members are bound, and
    # that is not someone else holding it.  False when the hold is on the gang's head
    # object (a Job's suspend), which the release lifts at once.
    held_until_bound: bool
    # True when the kind's head is a custom resource whose CRD may not be installed (an
    # operator's): the controller then lists and watches nothing of it, and says so.
    optional: bool
    # The fields of the head's status that ``read`` looks at.  A change to any other
    # (the Job controller's pod counts, written as each member comes and goes) cannot
    # move a decision, so it wakes no cycle (kube/relevance.py).
    status_read: frozenset[str]

    def is_queued(self, obj: Obj) -> bool:
        """Whether a head object asks for a queue (and is so ours to hold)."""
        ...

    def pod_specs(self, obj: Obj) -> list[Obj]:
        """The pod specs an object of the kind's webhook resource makes its members from,
        read raw (never failing): whether it asks for an accelerator is judged on them."""
        ...

    def membership(self, pod: MemberPod) -> Membership | None:
        """Whether ``pod`` is a member of one of this kind's gangs, and of which."""
        ...

    def read(
        self, *, namespace: str, name: str, head: Obj | None, members: Sequence[MemberPod]
    ) -> KindGang:
        """The gang named ``name``: from its head object, or from its member pods alone.

        Raises :class:`InputError` only for what even a broken gang must get
        right (its name, its labels, its identity); any other field of its head
        or its members that cannot be read, or that makes no gang, becomes
        ``facts.spec_error`` naming the object and the field, so the gang is
        InvalidSpec on its own and every other gang is decided as if it were
        not there.
        """
        ...

    def hold_at_creation(self, obj: Obj) -> Obj:
        """The merge patch the webhook applies to a new object so nothing of it runs."""
        ...

    def hold(self, gang: KindGang) -> list[Write]:
        """A gang that runs without an admission: stop it (it is requeued as it is)."""
        ...

    def release(self, gang: KindGang) -> list[Write]:
        """An admitted gang: let its members be created; each stays gated until bound."""
        ...

    def evict(self, gang: KindGang) -> list[Write]:
        """Take everything back from an evicted gang (its pods are deleted separately)."""
        ...

    def pod_group_name(self, name: str) -> str:
        """The name of the gang's PodGroup: distinct from any other kind's of the same name."""
        ...

    def pod_group_owners(self, gang: KindGang) -> list[Obj]:
        """Owner references for the gang's PodGroup, so it goes when the gang goes."""
        ...
