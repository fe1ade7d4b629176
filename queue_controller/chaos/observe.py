"""What a chaos run watches: one gang's recovery, phase by phase, from one listing.

Every poll lists the cluster once (as ``check`` does) and reads the gang from
the same objects, so the timeline and the invariants agree on what was seen.
Whether the gang gave its quota back is counted from its objects (its Job
suspended, no member left alive), not taken from the controller's status.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import Obj, get, objects, strings
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
    """One gang (a batch Job and its PodGroup) at one poll."""

    namespace: str
    name: str
    job: Obj | None
    group: Obj | None
    members: tuple[Member, ...]

    @property
    def phase(self) -> str:
        return get(self.group, "status.phase", str, "") if self.group else ""

    @property
    def suspended(self) -> bool:
        return self.job is not None and get(self.job, "spec.suspend", bool, False)

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

    def condition(self, kind: str) -> dict[str, object] | None:
        if self.group is None:
            return None
        found = next(
            (c for c in objects(self.group, "status.conditions") if c.get("type") == kind), None
        )
        return dict(found) if found is not None else None


def gang_seen(items: Iterable[Located], namespace: str, name: str) -> GangSeen:
    """The gang as one listing of the cluster shows it."""
    job = group = None
    pods = []
    for item in items:
        obj = item.obj
        if get(obj, "metadata.namespace", str, "") != namespace:
            continue
        kind = obj.get("kind")
        if kind == "Job" and get(obj, "metadata.name", str, "") == name:
            job = obj
        elif kind == "PodGroup" and get(obj, "metadata.name", str, "") == name:
            group = obj
        elif kind == "Pod" and strings(obj, "metadata.labels").get(JOB_NAME_LABEL) == name:
            pods.append(obj)
    return _gang(namespace, name, job, group, pods)


def read_gang(gateway: gw.Gateway, namespace: str, name: str) -> GangSeen:
    """The gang, read on its own: three requests, cheap enough to poll often."""

    try:
        job: Obj | None = gateway.get(gw.JOB, namespace, name)
    except gw.NotFound:
        job = None
    try:
        group: Obj | None = gateway.get(gw.POD_GROUP, namespace, name)
    except gw.NotFound:
        group = None
    pods = gateway.list(gw.POD, namespace=namespace, label_selector=f"{JOB_NAME_LABEL}={name}")
    return _gang(namespace, name, job, group, pods)


def _gang(
    namespace: str, name: str, job: Obj | None, group: Obj | None, pods: Sequence[Obj]
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
    return GangSeen(namespace, name, job, group, tuple(sorted(members, key=lambda m: m.name)))


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
        if self.track_running and gang.phase == "Running" and not self.reached("running"):
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
            new.append(self.mark("quota back", now, "Job suspended, no member left alive"))
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
