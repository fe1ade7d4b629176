"""One typed view per gang: its kind, its objects, its PodGroup, its Queue and the core's workload.

Built by :mod:`queue_controller.kube.snapshot` in the same pass that builds
the core's snapshot, so the planner, the metrics and the applier read the
same facts the core decided on, and nothing re-reads a raw object.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from queue_controller.api import v1alpha1
from queue_controller.core.model import (
    PodSet,
    Queue,
    Reason,
    Reservation,
    Workload,
    WorkloadPhase,
)
from queue_controller.kube.fields import epoch_seconds
from queue_controller.kube.kinds import QUEUE_LABEL, KindGang, WorkloadKind
from queue_controller.kube.resources import FIELD_MANAGER, POD_GROUP
from queue_controller.kube.unread import PROVISIONAL, BrokenGang
from queue_controller.kube.views import MemberPod, Ref

# Set on every PodGroup the controller creates: which kind of gang it is for.
WORKLOAD_KIND_LABEL = "queue-controller.io/workload-kind"
# A PodGroup in these phases holds its quota and planned nodes, even while its
# gang is still held: the controller wrote the admission and has yet to (or
# crashed before it could) release the gang.
# Only the controller writes PodGroup status (the chart grants no one else a status
# subresource), and it admits a gang by writing Admitted before it releases the gang. A held
# gang's Admitted or Running written by any other field manager is no admission: the gang
# stays pending and the quota check decides, so a hand-edited status cannot skip it.
HOLDING_PHASES = frozenset({v1alpha1.PodGroupPhase.ADMITTED, v1alpha1.PodGroupPhase.RUNNING})


@dataclass(frozen=True, slots=True)
class GroupView:
    """A PodGroup, validated, and how to write to it."""

    model: v1alpha1.PodGroup
    ref: Ref
    # The field manager that wrote status.phase (metadata.managedFields), None when the
    # object does not say (a dump, a test's object).
    phase_writer: str | None = None

    @property
    def phase(self) -> v1alpha1.PodGroupPhase:
        return self.model.status.phase

    @property
    def phase_by_controller(self) -> bool:
        """Whether the controller wrote the phase, as far as the object tells."""
        return self.phase_writer in (None, FIELD_MANAGER)

    @property
    def status(self) -> v1alpha1.PodGroupStatus:
        return self.model.status

    @property
    def min_member(self) -> int:
        return self.model.spec.minMember

    def condition_is(self, kind: str, status: str) -> bool:
        found = self.model.status.condition(kind)
        return found is not None and found.status == status


@dataclass(frozen=True, slots=True)
class GangView:
    kind: WorkloadKind
    gang: KindGang
    workload: Workload
    group: GroupView | None
    queue: Queue | None

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def namespace(self) -> str:
        return self.gang.namespace

    @property
    def name(self) -> str:
        return self.gang.name

    @property
    def queue_key(self) -> str:
        return f"{self.gang.namespace}/{self.gang.facts.queue}"

    @property
    def phase(self) -> v1alpha1.PodGroupPhase | None:
        return None if self.group is None else self.group.phase

    @property
    def holding(self) -> bool:
        """Admitted: its PodGroup's phase holds its quota and planned nodes."""
        return holds(self.group, held=self.gang.facts.held)

    @property
    def members(self) -> tuple[MemberPod, ...]:
        return tuple(self.gang.members)

    @property
    def live_pods(self) -> tuple[MemberPod, ...]:
        return tuple(p for p in self.gang.members if p.live)

    @property
    def about(self) -> tuple[Ref, ...]:
        """Where events about the gang go: its head object, if it has one, and its PodGroup."""
        refs = [self.gang.about] if self.gang.about is not None else []
        if self.group is not None:
            refs.append(self.group.ref)
        return tuple(refs)

    @property
    def size(self) -> int:
        """Members the gang says it needs; 0 when it cannot say (its spec is invalid)."""
        facts = self.gang.facts
        return facts.gang_size if facts.gang_size is not None else self.workload.gang_size

    def new_group(self) -> dict[str, Any]:
        """The PodGroup to create for a gang that has none yet.

        A gang that cannot say its size gets a provisional PodGroup of one member
        (the CRD refuses a minMember below 1), made anew once it can.
        """
        facts = self.gang.facts
        spec: dict[str, Any] = {"queue": facts.queue, "minMember": max(self.size, 1)}
        if facts.timeout_seconds is not None:
            spec["timeoutSeconds"] = facts.timeout_seconds
        body: dict[str, Any] = {
            "apiVersion": POD_GROUP.api_version,
            "kind": POD_GROUP.kind,
            "metadata": {
                "name": self.kind.pod_group_name(self.gang.name),
                "namespace": self.gang.namespace,
                "labels": {QUEUE_LABEL: facts.queue, WORKLOAD_KIND_LABEL: self.kind.name},
                "ownerReferences": self.kind.pod_group_owners(self.gang),
            },
            "spec": spec,
        }
        if self.size < 1 or isinstance(self.gang, BrokenGang):
            body["metadata"]["annotations"] = {PROVISIONAL: "true"}
        return body


class GroupIndex:
    """PodGroups by what can tie them to a gang: owner uid, owner name, own name."""

    def __init__(self, groups: Iterable[GroupView]) -> None:
        self._by: dict[tuple[str, str, str], GroupView] = {}
        self._used: set[int] = set()
        self._all = list(groups)
        for group in self._all:
            meta = group.model.metadata
            namespace = meta.namespace or "default"
            for ref in meta.ownerReferences:
                kind = str(ref.get("kind", ""))
                if ref.get("uid"):
                    self._by.setdefault((namespace, kind, f"uid:{ref['uid']}"), group)
                if ref.get("name"):
                    self._by.setdefault((namespace, kind, f"name:{ref['name']}"), group)
            self._by.setdefault((namespace, "", f"own:{meta.name}"), group)

    def find(self, kind: WorkloadKind, gang: KindGang) -> GroupView | None:
        """The gang's PodGroup: owned by its head object, else named for it.

        An owner reference is matched by uid when both sides have one, else by
        name; a PodGroup named for the gang but labelled for another kind, or
        owned by another object, is not this gang's.
        """
        namespace = gang.namespace or "default"
        found: GroupView | None = None
        head = gang.head_ref
        if head is not None:
            if head.uid:
                found = self._by.get((namespace, head.resource.kind, f"uid:{head.uid}"))
            if found is None:
                candidate = self._by.get((namespace, head.resource.kind, f"name:{head.name}"))
                if candidate is not None and _owner_matches(candidate, head):
                    found = candidate
        if found is None:
            candidate = self._by.get((namespace, "", f"own:{kind.pod_group_name(gang.name)}"))
            if candidate is not None and _named_for(candidate, kind, head):
                found = candidate
        if found is not None:
            self._used.add(id(found))
        return found

    def unclaimed(self) -> list[GroupView]:
        """PodGroups no gang claimed (after every gang was looked up)."""
        return [g for g in self._all if id(g) not in self._used]


def _owner_matches(group: GroupView, head: Ref) -> bool:
    for ref in group.model.metadata.ownerReferences:
        if ref.get("kind") != head.resource.kind:
            continue
        if ref.get("uid") and head.uid:
            if ref.get("uid") == head.uid:
                return True
        elif ref.get("name") == head.name:
            return True
    return False


def _named_for(group: GroupView, kind: WorkloadKind, head: Ref | None) -> bool:
    labelled = group.model.metadata.labels.get(WORKLOAD_KIND_LABEL)
    if labelled is not None:
        return labelled == kind.name
    owners = group.model.metadata.ownerReferences
    if not owners:
        return True  # written by hand for the gang: it sets the gang size
    return (
        head is not None
        and any(r.get("kind") == head.resource.kind for r in owners)
        and (_owner_matches(group, head))
    )


def holds(group: GroupView | None, *, held: bool) -> bool:
    """Whether a gang's PodGroup phase (Admitted, Running) holds its quota and planned nodes.

    A gang that is still held (nothing of it released) holds them only on the controller's
    own word: it wrote Admitted and has yet to (or crashed before it could) release the gang.
    """
    if group is None or group.phase not in HOLDING_PHASES:
        return False
    return not held or group.phase_by_controller


def workload_of(kind: WorkloadKind, gang: KindGang, group: GroupView | None) -> Workload:
    """The core's view of a gang, with what its PodGroup records."""
    facts = gang.facts
    spec_error = facts.spec_error
    pod_sets = facts.pod_sets
    requeue_at: float | None = None
    admitted_at: float | None = None
    requeue_count = 0
    deactivated = False
    placement: dict[str, int] = {}
    by_set: dict[str, dict[str, int]] = {}
    nominated: dict[str, dict[str, int]] = {}
    no_fit_since: float | None = None
    reservation: Reservation | None = None
    domains: dict[str, str] = {}
    slices: dict[str, tuple[dict[str, int], ...]] = {}
    if group is not None:
        model = group.model
        # A provisional PodGroup's minMember says nothing of the gang (kube/unread.py).
        provisional = PROVISIONAL in model.metadata.annotations
        if len(pod_sets) == 1 and model.spec.minMember != pod_sets[0].min_count and not provisional:
            only = pod_sets[0]
            pod_sets = (
                PodSet(only.name, only.template, only.count, model.spec.minMember, only.path),
            )
        if model.spec.minMember < 1 and not spec_error:
            # A hand-written PodGroup of minMember 0 would admit a gang of nobody.
            spec_error = (
                f"PodGroup {model.metadata.name}: spec.minMember: 0 is a gang of nobody; "
                "at least 1 member"
            )
        if model.spec.queue != facts.queue and not spec_error:
            spec_error = (
                f"PodGroup {model.metadata.name} names queue {model.spec.queue!r} but the "
                f"{kind.name} is labelled for queue {facts.queue!r}"
            )
        status = model.status
        requeue_count = status.requeueCount
        # epoch_seconds: a time written without a zone is UTC, not this machine's zone.
        requeue_at = epoch_seconds(status.requeueAt) if status.requeueAt else None
        admitted_at = epoch_seconds(status.admittedAt) if status.admittedAt else None
        deactivated = status.phase is v1alpha1.PodGroupPhase.FAILED
        placement = dict(status.placement)
        by_set = {name: dict(nodes) for name, nodes in status.podSetPlacement.items()}
        nominated = {name: dict(nodes) for name, nodes in status.nominatedPlacement.items()}
        no_fit_since = _no_fit_since(status)
        reservation = _reservation(status)
        domains = {name: a.domain for name, a in status.topologyAssignment.items() if a.domain}
        slices = {
            name: tuple(dict(one) for one in a.slices)
            for name, a in status.topologyAssignment.items()
            if a.slices
        }
    if facts.finished:
        phase = WorkloadPhase.FINISHED
    elif holds(group, held=facts.held):
        phase = WorkloadPhase.ADMITTED
    elif facts.held:
        phase = WorkloadPhase.PENDING
    else:
        # Running: admitted, or being evicted, or started behind the queue's back.
        # Either way it uses quota until it is held again.
        phase = WorkloadPhase.ADMITTED
    return Workload(
        namespace=gang.namespace,
        # Named as its PodGroup is: what `kubectl get podgroups`, `plan` and the journal
        # all show, and unique in a namespace whatever the kind.
        name=kind.pod_group_name(gang.name),
        queue=facts.queue,
        pod_sets=pod_sets,
        phase=phase,
        created=gang.created,
        kind=kind.name,
        requeue_at=requeue_at,
        requeue_count=requeue_count,
        deactivated=deactivated,
        placement=placement,
        pod_set_placement=by_set,
        spec_error=spec_error,
        absent_members=facts.absent_members,
        uncreated_members=facts.uncreated_members,
        nominated=nominated if phase is WorkloadPhase.PENDING else {},
        admitted_at=admitted_at if phase is WorkloadPhase.ADMITTED else None,
        no_fit_since=no_fit_since if phase is WorkloadPhase.PENDING else None,
        reservation=reservation if phase is WorkloadPhase.PENDING else None,
        topology_domains=domains if phase is WorkloadPhase.ADMITTED else {},
        slices=slices if phase is WorkloadPhase.ADMITTED else {},
    )


# The pending reasons of a gang that waits for room: a reservation counts its wait from
# when the first of them began.
NO_FIT_REASONS = frozenset({Reason.NO_NODE_FIT.value, Reason.RESERVED.value})


def _no_fit_since(status: v1alpha1.PodGroupStatus) -> float | None:
    """Since when the gang has waited for room: status.noFitSince, else (a PodGroup
    written before it was kept) its Admitted condition's lastTransitionTime."""
    if status.reason not in NO_FIT_REASONS:
        return None
    if status.noFitSince is not None:
        return epoch_seconds(status.noFitSince)
    condition = status.condition("Admitted")
    if condition is None or condition.reason not in NO_FIT_REASONS:
        return None
    changed = condition.lastTransitionTime
    return epoch_seconds(changed) if changed is not None else None


def _reservation(status: v1alpha1.PodGroupStatus) -> Reservation | None:
    """The reservation the PodGroup holds (status.reservedPlacement, reservedStart,
    reservationMadeAt): it survives a restart of the controller."""
    if not status.reservedPlacement or status.reservedStart is None:
        return None
    start = epoch_seconds(status.reservedStart)
    made = status.reservationMadeAt
    return Reservation(
        placement={name: dict(nodes) for name, nodes in status.reservedPlacement.items()},
        start=start,
        made=epoch_seconds(made) if made is not None else start,
    )
