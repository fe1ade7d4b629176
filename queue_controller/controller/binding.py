"""Binding: which node each gated member of an admitted gang is sent to.

The PodGroup's status holds the plan (members per node, pod set by pod set, and the
slices of a topology-aware pod set); each gated member takes a slot of it that no
member already sent holds.  Read back from the status every cycle, so a restart
binds exactly as before it.

Members are sent by cycles and, between them, by the releaser (controller/release.py).
A member whose release is *in flight* (its patch sent, the written pod not yet in the
state) holds its slot for both: :class:`InFlight` says which, and :func:`with_sent`
shows such members as sent, so no two members are ever given one slot.

A cycle plans from a copy, on its own thread, while the releaser goes on sending: it
notes what was sent since its copy (:meth:`InFlight.since`) and drops its own
bindings of those members and to those nodes (:func:`without_sent_since`).  Two
members meet on one slot only on one node, so what was sent elsewhere cannot clash.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

from queue_controller.controller import actions as act
from queue_controller.kube.gangs import GangView
from queue_controller.kube.resources import ADMISSION_GATE, HOSTNAME_LABEL
from queue_controller.kube.views import MemberPod

__all__ = [
    "InFlight",
    "SentSince",
    "bindings",
    "member_bindings",
    "with_sent",
    "without_sent_since",
]


class SentSince:
    """The members sent, and the nodes they were sent to, since it was opened."""

    def __init__(self) -> None:
        self.pods: set[str] = set()
        self.nodes: set[str] = set()


class InFlight:
    """Members whose release is under way: pod key -> the node it is sent to.

    Touched only from the event loop's thread (the appliers' coroutines); a cycle
    takes a copy with its frozen state.
    """

    def __init__(self) -> None:
        self._nodes: dict[str, str] = {}
        self._open: list[SentSince] = []  # one per cycle planning now (at most one)

    def add(self, pod: str, node: str) -> None:
        self._nodes[pod] = node
        for record in self._open:
            record.pods.add(pod)
            record.nodes.add(node)

    def since(self) -> SentSince:
        """Start noting what is sent from now on; :meth:`close` it when done."""
        record = SentSince()
        self._open.append(record)
        return record

    def close(self, record: SentSince) -> SentSince:
        self._open.remove(record)
        return record

    def discard(self, pod: str) -> None:
        self._nodes.pop(pod, None)

    def copy(self) -> dict[str, str]:
        return dict(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)


def _as_sent(pod: MemberPod, node: str) -> MemberPod:
    """``pod`` as it will be once its release lands: ungated, on ``node``."""
    return replace(
        pod,
        gates=tuple(g for g in pod.gates if g != ADMISSION_GATE),
        node_selector={**pod.node_selector, HOSTNAME_LABEL: node},
    )


def with_sent(gangs: Sequence[GangView], sent: Mapping[str, str]) -> tuple[GangView, ...]:
    """``gangs`` with every member in ``sent`` (InFlight.copy()) shown as sent."""
    if not sent:
        return tuple(gangs)
    out = []
    for gang in gangs:
        members = gang.gang.members
        if any(p.gated and p.key in sent for p in members):
            members = tuple(
                _as_sent(p, sent[p.key]) if p.gated and p.key in sent else p for p in members
            )
            gang = replace(gang, gang=replace(gang.gang, members=members))
        out.append(gang)
    return tuple(out)


def without_sent_since(actions: list[act.Action], sent: SentSince) -> list[act.Action]:
    """``actions`` less the bindings a cycle planned that what was sent since its copy
    may clash with: of the same member, or to a node that got a member meanwhile.  They
    stay gated for the next cycle, which sees how things stand."""
    if not sent.pods:
        return actions
    return [
        a
        for a in actions
        if not (isinstance(a, act.BindMember) and (a.pod.key in sent.pods or a.node in sent.nodes))
    ]


def member_bindings(gang: GangView, lost: Collection[str] = ()) -> list[act.BindMember]:
    """Where each gated member of an admitted gang goes, by its PodGroup's plan.

    ``lost``: nodes that are gone or NotReady.  No member is sent there: it could never
    start.  It stays gated until the plan names another node (a replacement, with
    ``onNodeFailure: Replace``) or the gang is evicted."""
    assert gang.group is not None
    status = gang.group.status
    sliced = {
        pod_set: assignment.slices
        for pod_set, assignment in status.topologyAssignment.items()
        if assignment.slices
    }
    return list(bindings(gang, status.placement, status.podSetPlacement, sliced, lost))


def bindings(
    gang: GangView,
    placement: Mapping[str, int],
    by_set: Mapping[str, Mapping[str, int]],
    sliced: Mapping[str, Sequence[Mapping[str, int]]] | None = None,
    lost: Collection[str] = (),
) -> Iterable[act.BindMember]:
    """Each gated member gets a node of its pod set's plan that still has a slot for it.

    Only once the gang is whole: until every planned member exists (running, done, or
    gated and waiting), none is sent.  A Job's members are made by the Job controller a
    few at a time, and under load the last came a minute after the first (`make
    bench-e2e` at 1,000 nodes); members sent as they came held their GPUs all that while
    with the gang only partly placed.

    A pod set admitted in slices (``sliced``) binds by slice instead (:func:`_slice_bindings`).

    A member is only ever sent to a node of the plan.  Members past it (a Job whose
    ``min-member`` is below its parallelism, a duplicate completion index) stay gated
    until a slot of the plan is free: one a member that finished, failed or went left
    behind.  Let go unpinned, as they once were, kube-scheduler put them wherever a GPU
    was free, and that was often one the core had planned for another gang, which then
    could not start (issue 22).  The core places ``min_count`` members; planning more
    than that onto spare capacity would be its job, not binding's.
    """
    sliced = sliced or {}
    first = gang.workload.pod_sets[0].name if gang.workload.pod_sets else ""
    plans = dict(by_set) if by_set else {first: placement}
    if not _whole(gang, plans, first):
        return
    live = gang.live_pods
    for pod_set, plan in sorted(plans.items()):

        def of_set(pod: MemberPod, pod_set: str = pod_set) -> bool:
            return (pod.pod_set or first) == pod_set

        if sliced.get(pod_set):
            yield from _slice_bindings([p for p in live if of_set(p)], sliced[pod_set], lost)
            continue
        assigned = Counter(
            node for p in live if of_set(p) and not p.gated and (node := p.node) is not None
        )
        slots = {
            node: 0 if node in lost else count - assigned[node]
            for node, count in sorted(plan.items())
        }
        for pod in sorted((p for p in live if p.gated and of_set(p)), key=lambda p: p.ref.name):
            node = next((n for n, free in slots.items() if free > 0), None)
            if node is None:
                break  # the plan is full: the rest are beyond it and stay gated
            slots[node] -= 1
            yield act.BindMember(pod=pod, node=node)
    # Members of no planned pod set are beyond the gang too: they stay gated.


def _whole(gang: GangView, plans: Mapping[str, Mapping[str, int]], first: str) -> bool:
    """Every planned member exists (``made``: a member that succeeded is not made
    again, and its replacement-free siblings must still go), but for the pod sets its
    kind makes only once the rest runs (``later_pod_sets``)."""
    now = {s for s in plans if s not in gang.gang.facts.later_pod_sets}
    planned = sum(sum(plans[s].values()) for s in now)
    present = sum(1 for p in gang.gang.members if p.made and (p.pod_set or first) in now)
    return present >= planned


def _slice_bindings(
    members: Sequence[MemberPod], slices: Sequence[Mapping[str, int]], lost: Collection[str] = ()
) -> Iterable[act.BindMember]:
    """A sliced pod set's gated members onto their slices' nodes.

    Slice j holds the members whose completion index i has i // k == j (k: members per
    slice), so that ranks j*k .. j*k+k-1 (a tensor-parallel group, say) share a domain.
    A member without an index takes any slot left; one whose slice is full is beyond
    the gang (a duplicate index) and stays gated, as extras do.
    """
    size = sum(slices[0].values())
    free = [dict(sorted(one.items())) for one in slices]

    def slice_of(pod: MemberPod) -> int | None:
        if pod.index is None or size <= 0 or pod.index // size >= len(free):
            return None
        return pod.index // size

    def take(node: str, where: int | None) -> bool:
        order = [where] if where is not None else range(len(free))
        for j in order:
            if free[j].get(node, 0) > 0:
                free[j][node] -= 1
                return True
        return False

    # Members already sent to a node hold their slot, in their own slice where they have one.
    for pod in members:
        if not pod.gated and (node := pod.node) is not None and not take(node, slice_of(pod)):
            take(node, None)
    for one in free:
        for node in lost:
            if node in one:
                one[node] = 0
    gated = [p for p in members if p.gated]
    # Indexed members first, so that no unindexed one takes the slot of a slice's own member.
    gated.sort(key=lambda p: (p.index is None, p.index or 0, p.ref.name))
    for pod in gated:
        where = slice_of(pod)
        candidates = [where] if where is not None else range(len(free))
        slot = next(((j, n) for j in candidates for n, left in free[j].items() if left > 0), None)
        if slot is not None:
            take(slot[1], slot[0])
            yield act.BindMember(pod=pod, node=slot[1])
