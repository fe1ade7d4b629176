"""What the objects themselves say about a gang, trusting the controller's status only
where nothing else can tell (what it planned, and that it evicted).

Whether a gang holds quota, which members run where, and since when it started
are read from the Job and its Pods: a controller that wrote a wrong status
cannot hide a gang that runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from queue_controller.core.rules import PriorityTable, prepare
from queue_controller.kube.fields import epoch_seconds, timestamp
from queue_controller.kube.gangs import GangView
from queue_controller.kube.views import MemberPod


@dataclass(frozen=True, slots=True)
class GangState:
    view: GangView
    # Holds quota by the objects: not finished, and released (a Job unsuspended) or
    # with a member bound to a node.
    holds: bool
    running: tuple[MemberPod, ...]  # live members in phase Running on a node
    live: tuple[MemberPod, ...]  # members neither terminated nor being deleted
    # When it was last released (Job startTime), else its first member; or, later, when
    # its newest member not yet running was made.
    started: float | None
    need: dict[str, int]  # its quota charge, by the core's rules
    evicted_at: float | None  # the PodGroup's Evicted condition, while not readmitted

    @property
    def name(self) -> str:
        return f"{self.view.kind.name} {self.view.namespace}/{self.view.name}"

    def running_on(self) -> Counter[str]:
        return Counter(pod.node_name for pod in self.running)


def gang_state(view: GangView, priorities: PriorityTable) -> GangState:
    facts = view.gang.facts
    live = tuple(pod for pod in view.gang.members if pod.live)
    running = tuple(pod for pod in live if pod.phase == "Running" and pod.node_name)
    holds = not facts.finished and (not facts.held or any(pod.node_name for pod in live))
    started = None
    head = view.gang.head
    if head is not None:
        started = timestamp(head, "status.startTime")
    created = [pod.created for pod in live if pod.created > 0]  # 0: not recorded
    if started is None and created:
        started = min(created)
    # A member made again after the gang started (its owner replaced a lost one) restarts
    # the count: the gang was whole until then as far as the objects tell, and the
    # controller's timeout for lost members runs from the loss too.  Without this a gang
    # that ran for hours and lost a member would count as partially placed for hours.
    waiting = [p.created for p in live if p.created > 0 and p.phase not in ("Running", "Succeeded")]
    if started is not None and waiting:
        started = max(started, max(waiting))
    # A member gone with none made again yet (its owner backs off, or the pod waits for
    # the garbage collector of a lost node) leaves no object to date the loss by; the
    # controller's own MembersLost mark does, and its timeout runs from there.  A
    # controller that never marks it is judged from the start, as before.
    lost = _members_lost_at(view)
    if started is not None and lost is not None:
        started = max(started, lost)
    # A lost node replaced (onNodeFailure: Replace) is no partial placement: its members
    # are sent to the replacement, and the timeout runs from the replacement on.
    replaced = _replaced_at(view)
    if started is not None and replaced is not None:
        started = max(started, replaced)
    prepared = prepare(view.workload, priorities)
    need = dict(prepared.need()) if not prepared.error else {}
    return GangState(view, holds, running, live, started, need, _evicted_at(view))


def _evicted_at(view: GangView) -> float | None:
    if view.group is None:
        return None
    status = view.group.status
    evicted = status.condition("Evicted")
    admitted = status.condition("Admitted")
    if evicted is None or evicted.status != "True":
        return None
    if admitted is not None and admitted.status == "True":
        return None  # readmitted since
    moment = evicted.lastTransitionTime
    return epoch_seconds(moment) if moment is not None else None


def _members_lost_at(view: GangView) -> float | None:
    if view.group is None:
        return None
    ready = view.group.status.condition("PodsReady")
    if ready is None or ready.status != "False" or ready.reason != "MembersLost":
        return None
    moment = ready.lastTransitionTime
    return epoch_seconds(moment) if moment is not None else None


def _replaced_at(view: GangView) -> float | None:
    if view.group is None:
        return None
    moments = [r.replacedAt for r in view.group.status.replacedNodes if r.replacedAt is not None]
    return max(epoch_seconds(m) for m in moments) if moments else None
