"""Members of admitted gangs released as they arrive, between cycles (issue 16).

A gang's members are created by its kind's own controller (the Job controller) a moment
after the cycle that admitted it lets it go, each held by our scheduling gate.  Left to
the next cycle, a member waited for the cycle under way to end, the pause that gathers a
burst of changes, and the whole of the next cycle: about 1.5 s at the median, and 4 s
at p99, in `make bench-e2e` at 200 nodes.

The releaser sends such members to their nodes as their watch events arrive.  It
decides nothing: the plan is the one a cycle wrote into the gang's PodGroup status
(read from the state, where the cycle's own writes are assumed at once), and the
members go by the same :func:`~queue_controller.controller.binding.member_bindings`
as in a cycle.  It reads only the objects of the gangs whose members arrived: the gang's
head, its PodGroup and its members (those the last cycle saw, and those that arrived
since), translated by the same kube/snapshot.translate.

No two members get one slot.  A member's release is *in flight* (binding.InFlight) from
the moment it is planned until the write is done (and, if it landed, the written pod
is in the state); the releaser and every cycle count in-flight members as sent.  The
releaser does not wait for a cycle that is planning (most of a second at thousands of
nodes): it reads the state and reserves its releases at once, under the loop's
``planning`` lock, which a cycle holds only to copy the state and to reserve its own.
The cycle drops its bindings that what the releaser sent meanwhile could clash with
(binding.without_sent_since).  Writes are conditional, as every write is; one that
loses a race conflicts, and the next cycle sees how things stand.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.binding import member_bindings, with_sent
from queue_controller.controller.leader import Leadership
from queue_controller.controller.lifecycle import HOLDING
from queue_controller.controller.loop import GangMembers
from queue_controller.controller.state import ClusterState, Key
from queue_controller.errors import InputError
from queue_controller.kube import kinds
from queue_controller.kube.gangs import GangView
from queue_controller.kube.pieces import member_of
from queue_controller.kube.snapshot import Located, translate

log = logging.getLogger(__name__)
# Its own threads: on the loop's, its releases queued behind a cycle's pending reasons.
RELEASE_THREADS = 8
_GangKey = tuple[str, str, str]  # (kind name, namespace, gang name)


class Releaser:
    def __init__(
        self,
        *,
        state: ClusterState,
        applier: Applier,
        leadership: Leadership,
        members: Callable[[], GangMembers],
        planning: asyncio.Lock,
        clock: Callable[[], float],
        gather_seconds: float = 0.02,
    ) -> None:
        self.state, self.applier, self.leadership = state, applier, leadership
        self.members = members  # the last cycle's index of each gang's members
        self.planning = planning  # the loop's: held while a cycle copies or reserves
        self.clock = clock
        self.gather = gather_seconds  # the rest of a burst (a Job's pods come together)
        # Members that arrived since: the last cycle's index may not have them yet.
        self._arrived: dict[_GangKey, set[str]] = {}
        self._index: GangMembers | None = None
        self.released = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            arrived = asyncio.create_task(self.state.gated_arrived.wait())
            stopping = asyncio.create_task(stop.wait())
            try:
                # At least once a second: a safety net only, the event wakes it at once.
                await asyncio.wait(
                    (arrived, stopping), timeout=1.0, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                arrived.cancel()
                stopping.cancel()
            if stop.is_set():
                return
            await asyncio.sleep(self.gather)
            try:
                await self.release()
            except Exception:  # a bug here must not end releasing; cycles still bind
                log.exception("releasing arrived members failed")

    async def release(self) -> int:
        """Send every gated member of an admitted gang that arrived since the last call;
        how many were sent."""
        async with self.planning:
            arrived = self.state.take_gated_arrivals()
            if not self.leadership.leading:
                self._arrived.clear()
                return 0
            touched = self._note(arrived)
            # Only members with a slot of the plan: those past it stay gated (binding.py).
            actions: list[act.Action] = [
                action
                for gang in self._gangs(touched)
                for action in member_bindings(gang, self._lost(gang))
            ]
            if not actions:
                return 0
            reserved = self.applier.reserve(actions)
        failed = await self.applier.apply_all(actions, reserved=reserved)
        sent = len(actions) - failed
        self.released += sent
        log.debug("released %d arrived members (%d to retry)", sent, failed)
        return sent

    def _lost(self, gang: GangView) -> frozenset[str]:
        """Nodes of the gang's plan that are gone or not Ready: no member is sent there
        (the cycle replaces them, or the gang's timeout evicts it)."""
        assert gang.group is not None
        if not self._replaces(gang):
            return frozenset()
        status = gang.group.status
        plan = {*status.placement, *(n for s in status.podSetPlacement.values() for n in s)}
        return frozenset(n for n in plan if not _ready(self.state.get("Node", "", n)))

    def _replaces(self, gang: GangView) -> bool:
        """Whether the gang's Queue (else its TeamQuota) says ``onNodeFailure: Replace``."""
        queue = self.state.get("Queue", gang.namespace, gang.gang.facts.queue)
        if not queue or not any(s.topology is not None for s in gang.workload.pod_sets):
            return False  # only a gang with a topology request is replaced (core/cycle)
        spec = queue.get("spec") or {}
        chosen = spec.get("onNodeFailure")
        if chosen is None:
            quota = self.state.get("TeamQuota", "", str(spec.get("teamQuota", ""))) or {}
            chosen = (quota.get("spec") or {}).get("onNodeFailure")
        return chosen != "Evict"  # the default is Replace

    def _note(self, arrived: Iterable[Key]) -> set[_GangKey]:
        """The gangs the arrived gated pods belong to (kept with the pods' names)."""
        index = self.members()
        if index is not self._index:  # a cycle has run: what it saw needs no keeping
            self._index = index
            for known in list(self._arrived):
                self._arrived[known] -= set(index.get(known, ()))
                if not self._arrived[known]:
                    del self._arrived[known]
        touched: set[_GangKey] = set()
        for key in arrived:
            obj = self.state.get(*key)
            if obj is None:
                continue
            try:
                pod, gang = member_of(obj)
            except InputError:
                continue  # the cycle reports it
            if gang is None or not pod.gated:
                continue
            self._arrived.setdefault(gang, set()).add(pod.ref.name)
            touched.add(gang)
        return touched

    def _gangs(self, touched: set[_GangKey]) -> list[GangView]:
        """Each touched gang as it stands now, if it is admitted and let go."""
        index = self.members()
        out = []
        for key in sorted(touched):
            kind_name, namespace, name = key
            kind = kinds.by_name(kind_name)
            names = set(index.get(key, ())) | self._arrived.get(key, set())
            objects = [self.state.get("Pod", namespace, pod) for pod in sorted(names)]
            pods = [obj for obj in objects if obj is not None]
            # Arrivals the state no longer holds are gone for good.
            held = {p["metadata"]["name"] for p in pods} & self._arrived.get(key, set())
            if held:
                self._arrived[key] = held
            else:
                self._arrived.pop(key, None)
            group = self.state.get("PodGroup", namespace, kind.pod_group_name(name))
            head = self.state.get(kind.head.kind, namespace, name) if kind.head else None
            if group is None or (kind.head is not None and head is None):
                continue
            related = [*pods, group, *([head] if head is not None else [])]
            seen = translate(
                (Located(None, obj) for obj in related), now=self.clock(), skip=lambda _: None
            )
            for gang in with_sent(seen.gangs, self.applier.in_flight.copy()):
                if (gang.kind.name, gang.namespace, gang.gang.name) != key:
                    continue
                if gang.group is None or gang.group.phase not in HOLDING:
                    continue
                if gang.gang.facts.held and not gang.kind.held_until_bound:
                    continue  # not let go yet (a Job still suspended): the cycle resumes it
                out.append(gang)
        return out


def _ready(node: dict[str, Any] | None) -> bool:
    if node is None:
        return False
    conditions = node.get("status", {}).get("conditions", [])
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in conditions
        if isinstance(c, dict)
    )
