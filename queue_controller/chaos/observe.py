"""What a chaos run watches: one gang's recovery, phase by phase, from one listing.

Every poll lists the cluster once (as ``check`` does) and reads the gang from
the same objects, so the timeline and the invariants agree on what was seen.
Whether the gang gave its quota back is counted from its objects (its head
suspended, no member left alive), not taken from the controller's status.  A gang
is any kind's with a head (a Job, a PyTorchJob, a RayJob...): its members are the
pods the kind claims, read as the controller reads them (kube/pieces).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from queue_controller.errors import InputError
from queue_controller.kube import gateway as gw
from queue_controller.kube import kinds, pieces
from queue_controller.kube.fields import Obj, get, objects
from queue_controller.kube.snapshot import Located

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
HOLDING = ("Admitted", "Running")
# The phases of a recovery, in order; each experiment expects some of them.
PHASES = ("injected", "evicted", "quota back", "requeued", "readmitted")


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    node: str  # "" while unbound
    phase: str
    live: bool  # not terminated, not being deleted
    # The scheduler's message while it finds the pod no node (PodScheduled False,
    # Unschedulable); "" otherwise, a gated pod included.
    unschedulable: str = ""
    gated: bool = False  # it has scheduling gates: nothing tries to place it yet
    # Its tolerations, each as sorted (key, value) pairs (hashable, like the rest).
    tolerations: tuple[tuple[tuple[str, str], ...], ...] = ()


@dataclass(frozen=True, slots=True)
class GangSeen:
    """One gang (its head: a Job, a PyTorchJob, a RayJob...; its PodGroup; its member
    pods) at one poll."""

    namespace: str
    name: str
    head: Obj | None
    group: Obj | None
    members: tuple[Member, ...]
    kind: str = "Job"  # the workload kind's name (kube/kinds)

    @property
    def what(self) -> str:
        """How messages name it: ``Job ns/name``, ``RayJob ns/name``."""
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def phase(self) -> str:
        return get(self.group, "status.phase", str, "") if self.group else ""

    @property
    def group_name(self) -> str:
        return kinds.by_name(self.kind).pod_group_name(self.name)

    @property
    def suspended(self) -> bool:
        """Held by its kind (a Job's or a RayJob's spec.suspend, a PyTorchJob's runPolicy)."""
        if self.head is None:
            return False
        kind = kinds.by_name(self.kind)
        try:
            gang = kind.read(namespace=self.namespace, name=self.name, head=self.head, members=())
        except InputError:
            return False
        return gang.facts.held

    @property
    def pod_specs(self) -> list[Obj]:
        """The head's pod templates' specs: what the members it makes will be."""
        return kinds.by_name(self.kind).pod_specs(self.head) if self.head is not None else []

    @property
    def live(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.live)

    @property
    def placement(self) -> dict[str, int]:
        raw = get(self.group, "status.placement", dict, {}) if self.group else {}
        return {str(k): int(v) for k, v in raw.items()}

    @property
    def requeue_count(self) -> int:
        return get(self.group, "status.requeueCount", int, 0) if self.group else 0

    @property
    def replaced_nodes(self) -> list[tuple[str, str]]:
        """status.replacedNodes: (lost node, replacement), oldest first."""
        raw = get(self.group, "status.replacedNodes", list, []) if self.group else []
        return [
            (str(r.get("node", "")), str(r.get("replacement", "")))
            for r in raw
            if isinstance(r, dict)
        ]

    def condition(self, kind: str) -> dict[str, object] | None:
        if self.group is None:
            return None
        found = next(
            (c for c in objects(self.group, "status.conditions") if c.get("type") == kind), None
        )
        return dict(found) if found is not None else None


def member_of(pod: Obj) -> tuple[str, str, str] | None:
    """(kind, namespace, gang name) of the gang that claims ``pod``, as the controller
    reads it; None for a pod of no gang (or one it cannot read)."""
    try:
        _, gang = pieces.member_of(pod)
    except InputError:
        return None
    return gang


def gang_seen(items: Iterable[Located], namespace: str, name: str, kind: str = "Job") -> GangSeen:
    """The gang as one listing of the cluster shows it."""
    head_kind = kinds.by_name(kind).head
    group_name = kinds.by_name(kind).pod_group_name(name)
    head = group = None
    pods = []
    for item in items:
        obj = item.obj
        if get(obj, "metadata.namespace", str, "") != namespace:
            continue
        found = (obj.get("kind"), get(obj, "metadata.name", str, ""))
        if head_kind is not None and found == (head_kind.kind, name):
            head = obj
        elif found == ("PodGroup", group_name):
            group = obj
        elif found[0] == "Pod" and member_of(obj) == (kind, namespace, name):
            pods.append(obj)
    return _gang(kind, namespace, name, head, group, pods)


def read_gang(gateway: gw.Gateway, namespace: str, name: str, kind: str = "Job") -> GangSeen:
    """The gang, read on its own: three requests, cheap enough to poll often."""
    of_kind = kinds.by_name(kind)
    head: Obj | None = None
    if of_kind.head is not None:
        try:
            head = gateway.get(of_kind.head, namespace, name)
        except gw.NotFound:
            head = None
    try:
        group: Obj | None = gateway.get(gw.POD_GROUP, namespace, of_kind.pod_group_name(name))
    except gw.NotFound:
        group = None
    # A Job's members carry its name; any other kind's are found by who claims them.
    selector = f"{JOB_NAME_LABEL}={name}" if kind == "Job" else ""
    listed = gateway.list(gw.POD, namespace=namespace, label_selector=selector)
    pods = [p for p in listed if member_of(p) == (kind, namespace, name)]
    return _gang(kind, namespace, name, head, group, pods)


def _gang(
    kind: str,
    namespace: str,
    name: str,
    head: Obj | None,
    group: Obj | None,
    pods: Sequence[Obj],
) -> GangSeen:
    members = []
    for obj in pods:
        phase = get(obj, "status.phase", str, "Pending")
        deleting = get(obj, "metadata.deletionTimestamp", str, "") != ""
        members.append(
            Member(
                name=get(obj, "metadata.name", str, ""),
                node=get(obj, "spec.nodeName", str, ""),
                phase=phase,
                live=not deleting and phase not in ("Succeeded", "Failed"),
                unschedulable=_unschedulable(obj),
                gated=bool(objects(obj, "spec.schedulingGates")),
                tolerations=tuple(
                    tuple(sorted((str(k), str(v)) for k, v in t.items()))
                    for t in objects(obj, "spec.tolerations")
                ),
            )
        )
    members.sort(key=lambda m: m.name)
    return GangSeen(namespace, name, head, group, tuple(members), kind)


def _unschedulable(pod: Obj) -> str:
    for condition in objects(pod, "status.conditions"):
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("message") or "Unschedulable")
    return ""


@dataclass(frozen=True, slots=True)
class Mark:
    phase: str
    seconds: float  # since injection
    detail: str

    def as_dict(self) -> dict[str, object]:
        return {"phase": self.phase, "seconds": round(self.seconds, 1), "detail": self.detail}


@dataclass
class Timeline:
    """The phases of one recovery, each the first time a poll saw it."""

    injected_at: float
    requeues_before: int
    marks: list[Mark] = field(default_factory=list)
    placement: dict[str, int] = field(default_factory=dict)  # where it was readmitted
    track_running: bool = False  # mark "running" too: the gang Running after the injection
    # onNodeFailure: Replace: mark "replaced" (a lost node replaced in status.replacedNodes
    # since the injection), and "running" only after it.
    replaced_before: int = 0
    track_replaced: bool = False

    def reached(self, phase: str) -> bool:
        return any(m.phase == phase for m in self.marks)

    def mark(self, phase: str, now: float, detail: str) -> Mark | None:
        if self.reached(phase):
            return None
        made = Mark(phase, max(0.0, now - self.injected_at), detail)
        self.marks.append(made)
        return made

    def observe(self, gang: GangSeen, now: float) -> list[Mark]:
        """The phases this poll shows for the first time, in order."""
        new = self._recovery(gang, now)
        replaced = gang.replaced_nodes
        if self.track_replaced and len(replaced) > self.replaced_before:
            lost, node = replaced[-1]
            made = self.mark("replaced", now, f"{lost} replaced by {node}")
            new += [made] if made else []
        # After a replacement the phase stayed Running all along: only the whole gang
        # running again (its minMember) is recovery.
        whole = not self.track_replaced or (
            self.reached("replaced")
            and sum(1 for m in gang.live if m.phase == "Running")
            >= get(gang.group or {}, "spec.minMember", int, 1)
        )
        if self.track_running and whole and gang.phase == "Running" and not self.reached("running"):
            running = sum(1 for m in gang.live if m.phase == "Running")
            made = self.mark("running", now, f"{running} members running")
            new += [made] if made else []
        return new

    def _recovery(self, gang: GangSeen, now: float) -> list[Mark]:
        new: list[Mark | None] = []
        evicted = gang.condition("Evicted")
        again = gang.requeue_count > self.requeues_before
        if not self.reached("evicted") and again and evicted and evicted.get("status") == "True":
            what = f"{evicted.get('reason', '')}: {evicted.get('message', '')}"
            new.append(self.mark("evicted", now, what))
        if not self.reached("evicted"):
            return [m for m in new if m]
        if gang.suspended and not gang.live and not self.reached("quota back"):
            held = f"{gang.kind} suspended, no member left alive"
            new.append(self.mark("quota back", now, held))
        # Evicted (the requeue count moved) and holding again: admitted afresh.
        readmitted = gang.phase in HOLDING
        if readmitted and not self.reached("quota back"):
            # Given back and taken again between two looks; check's EvictedStillHolding
            # would have caught a gang that never gave it back.
            new.append(self.mark("quota back", now, "not caught between looks: by readmission"))
        if (gang.phase == "Pending" or readmitted) and not self.reached("requeued"):
            new.append(self.mark("requeued", now, f"requeue {gang.requeue_count}, back in queue"))
        if readmitted and not self.reached("readmitted"):
            self.placement = gang.placement
            nodes = ", ".join(f"{n}: {c}" for n, c in sorted(gang.placement.items()))
            new.append(self.mark("readmitted", now, f"on {nodes}"))
        return [m for m in new if m]
