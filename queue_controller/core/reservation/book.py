"""The reservations one cycle holds: withheld from other gangs, made, kept and ended.

A reservation lives in its gang's PodGroup status, so the cycle is told of it
in the snapshot (``Workload.reservation``) and keeps it while the gang is still
its Queue's head, still waits for room and is within the limits; it makes a
new one for a head that has starved long enough.  While it is kept, its nodes
are withheld from the cycle's placer: a gang tried later sees them full.  Two
gangs are let onto them:

* the reserved gang itself, whose nodes are given back for its own attempt;
* a backfill: a gang whose own estimated end comes the reservation's margin
  before its start.  Only the reservations it would end before are opened for
  it, and taken again after.

When the start comes and the gang still does not fit, gangs backfilled onto
its nodes have overrun their estimates.  ``overrun: Wait`` waits for them;
``Preempt`` evicts them (they were admitted on the promise to be gone).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from queue_controller.core.model.decisions import Decision, Reason, Verdict
from queue_controller.core.model.objects import (
    Node,
    Queue,
    Workload,
)
from queue_controller.core.model.reservations import (
    Overrun,
    Reservation,
)
from queue_controller.core.placement.shapes import Placer, SetShape
from queue_controller.core.reservation.choose import Occupant, PlacerFactory, Usage, choose
from queue_controller.core.rules.durations import instant_text
from queue_controller.core.rules.prepared import Prepared

# New reservations tried in one cycle: each builds a few placers over every node, and
# heads that no estimate can free would try again at every cycle.
CHOICES_PER_CYCLE = 4


@dataclass(slots=True)
class _Held:
    workload: Workload
    queue: Queue
    reservation: Reservation
    withheld: dict[str, Mapping[str, int]] = field(default_factory=dict)


class ReservationBook:
    """One cycle's reservations, over the cycle's placer."""

    def __init__(
        self,
        *,
        pending: Sequence[Prepared],
        admitted: Sequence[Prepared],
        queues: Mapping[tuple[str, str], Queue],
        shapes: Mapping[str, tuple[SetShape, ...]],
        placer: Placer,
        nodes: Sequence[Node],
        used: Usage,
        held: Mapping[str, Usage],
        now: float,
        limit: int,
        placer_factory: PlacerFactory,
    ) -> None:
        self.placer = placer
        self.nodes = nodes
        # The room used now, this cycle's admissions added as they come.
        self.used: dict[str, dict[str, int]] = {n: dict(a) for n, a in used.items()}
        self.now = now
        self.limit = limit
        self.placer_factory = placer_factory
        self.queues = queues
        self.shapes = shapes
        self.heads = _heads(pending, queues, shapes, now)
        # Running gangs by their estimated end: room the estimates promise.  One whose
        # estimate has passed is expected to end at any moment.
        self.occupants: list[Occupant] = []
        # Admitted gangs and where they hold room: overrun victims are found here.
        self.admitted: list[tuple[Workload, frozenset[str]]] = []
        for p in admitted:
            usage = held.get(p.workload.key, {})
            self.admitted.append((p.workload, frozenset(usage)))
            runtime = p.workload.runtime.seconds
            if runtime is not None and usage:
                started = p.workload.admitted_at if p.workload.admitted_at is not None else now
                self.occupants.append(Occupant(max(now, started + runtime), usage))
        self.held: dict[str, _Held] = {}
        self.choices_left = CHOICES_PER_CYCLE
        self.per_quota: Counter[str] = Counter()
        kept = sorted(
            (p for p in pending if p.workload.reservation is not None),
            key=lambda p: p.workload.reservation.made if p.workload.reservation else 0.0,
        )
        known = {node.name for node in nodes}
        for p in kept:
            reservation = p.workload.reservation
            assert reservation is not None
            queue = queues.get((p.workload.namespace, p.workload.queue))
            if queue is None or not self._may_hold(p, queue):
                continue
            if not reservation.nodes <= known or not _matches(reservation, shapes[p.workload.key]):
                continue  # a node is gone, or the gang changed: tried afresh
            self._hold(_Held(p.workload, queue, reservation))

    @staticmethod
    def wanted(queues: Sequence[Queue]) -> bool:
        return any(q.reservation.after_seconds is not None for q in queues)

    # -- what the cycle asks -------------------------------------------------

    def holds(self, key: str) -> bool:
        return key in self.held

    def give_back(self, key: str) -> None:
        """Let the reserved gang itself onto its nodes (before its own attempt)."""
        for node, room in self.held[key].withheld.items():
            self.placer.adjust(node, room)
        self.held[key].withheld = {}

    def take_again(self, key: str) -> None:
        held = self.held[key]
        for node in sorted(held.reservation.nodes):
            if not any(node in other.withheld for other in self.held.values()):
                held.withheld[node] = self.placer.withhold(node)

    def windows(self, prepared: Prepared) -> list[str]:
        """The reservations ``prepared`` would end before: it may backfill onto them."""
        runtime = prepared.workload.runtime.seconds
        if runtime is None or prepared.workload.key in self.held:
            return []
        return [
            key
            for key, held in self.held.items()
            if self.now + runtime + held.queue.reservation.backfill_margin_seconds
            <= held.reservation.start
        ]

    def open(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.give_back(key)

    def close(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.take_again(key)

    def backfilled_over(self, keys: Sequence[str], placement: Mapping[str, int]) -> tuple[str, ...]:
        return tuple(k for k in keys if self.held[k].reservation.nodes & placement.keys())

    def admitted_now(
        self, prepared: Prepared, sets: Sequence[SetShape], decision: Decision
    ) -> None:
        """A gang this cycle admitted: it holds room, until its estimated end if known."""
        usage: dict[str, dict[str, int]] = {}
        by_set = decision.pod_set_placement or {sets[0].pod_set.name: decision.placement}
        for item in sets:
            for node, members in by_set.get(item.pod_set.name, {}).items():
                here = usage.setdefault(node, {})
                for resource, amount in item.shape.request.items():
                    here[resource] = here.get(resource, 0) + amount * members
        for node, amounts in usage.items():
            used = self.used.setdefault(node, {})
            for resource, amount in amounts.items():
                used[resource] = used.get(resource, 0) + amount
        runtime = prepared.workload.runtime.seconds
        if runtime is not None:
            self.occupants.append(Occupant(self.now + runtime, usage))

    def note(self) -> str:
        """What a gang that did not fit is told, while nodes are withheld from it."""
        if not self.held:
            return ""
        nodes = {n for held in self.held.values() for n in held.reservation.nodes}
        return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} reserved for " + ", ".join(
            sorted(h.workload.namespaced_name for h in self.held.values())
        )

    def decided(self, prepared: Prepared, queue: Queue, decision: Decision) -> Decision:
        """The decision, with the reservation kept, made, or ended."""
        key = prepared.workload.key
        held = self.held.get(key)
        if held is not None:
            if decision.verdict is not Verdict.PENDING or decision.reason is not Reason.NO_NODE_FIT:
                del self.held[key]  # admitted, preempting, or blocked by quota: it ends
                self.per_quota[queue.team_quota] -= 1
                return decision
            overrun = self._overrun(held)
            if overrun is not None:
                del self.held[key]  # it holds the room as a preemptor from now on
                self.per_quota[queue.team_quota] -= 1
                return overrun
            self.take_again(key)
            return self._reserved(held, decision)
        if decision.verdict is not Verdict.PENDING or decision.reason is not Reason.NO_NODE_FIT:
            return decision
        if (
            not self._may_hold(prepared, queue)
            or not self._starved(prepared, queue)
            or self.choices_left <= 0
        ):
            note = self.note()
            return replace(decision, message=f"{decision.message}; {note}") if note else decision
        self.choices_left -= 1
        chosen = self._choose(prepared)
        if chosen is None:
            return replace(
                decision,
                message=f"{decision.message}; no reservation: the running gangs' runtime "
                "estimates free no room for it",
            )
        made = _Held(
            prepared.workload, queue, Reservation(chosen.placement, chosen.start, self.now)
        )
        self._hold(made)
        return self._reserved(made, decision)

    # -- inside --------------------------------------------------------------

    def _hold(self, held: _Held) -> None:
        self.held[held.workload.key] = held
        self.per_quota[held.queue.team_quota] += 1
        self.take_again(held.workload.key)

    def _may_hold(self, prepared: Prepared, queue: Queue) -> bool:
        """A head of a Queue with reservation on, within the limits, that fits its quota
        (the cycle only says NoNodeFit of a gang within its quota)."""
        policy = queue.reservation
        if policy.after_seconds is None or prepared.workload.key not in self.heads:
            return False
        if len(self.held) >= self.limit:
            return False
        return self.per_quota[queue.team_quota] < policy.max_per_team_quota

    def _starved(self, prepared: Prepared, queue: Queue) -> bool:
        since = prepared.workload.no_fit_since
        after = queue.reservation.after_seconds
        return since is not None and after is not None and self.now - since >= after

    def _choose(self, prepared: Prepared) -> Reservation | None:
        reserved = {n for held in self.held.values() for n in held.reservation.nodes}
        nodes = [n for n in self.nodes if n.name not in reserved]
        chosen = choose(
            self.shapes[prepared.workload.key],
            nodes=nodes,
            used=self.used,
            occupants=self.occupants,
            now=self.now,
            placer=self.placer_factory,
        )
        return None if chosen is None else Reservation(chosen.placement, chosen.start, self.now)

    def _overrun(self, held: _Held) -> Decision | None:
        """Past its start: evict the gangs backfilled onto its nodes, if its Queue says so."""
        reservation = held.reservation
        if self.now < reservation.start or held.queue.reservation.overrun is not Overrun.PREEMPT:
            return None
        victims = tuple(
            (workload.key, Reason.RESERVATION_OVERRUN)
            for workload, nodes in self.admitted
            if nodes & reservation.nodes
            and workload.admitted_at is not None
            and workload.admitted_at >= reservation.made
        )
        if not victims:
            return None
        total: Counter[str] = Counter()
        for nodes in reservation.placement.values():
            total.update(nodes)
        names = ", ".join(key.split("/", 1)[1] for key, _ in victims)
        return Decision(
            held.workload.namespaced_name,
            held.workload.queue,
            Verdict.PREEMPT,
            Reason.RESERVATION_OVERRUN,
            f"its reserved start {instant_text(reservation.start)} has passed and gangs "
            f"backfilled onto its nodes still run: evicting {names}",
            dict(sorted(total.items())),
            kind=held.workload.kind,
            victims=victims,
            nominated={name: dict(nodes) for name, nodes in reservation.placement.items()},
        )

    def _reserved(self, held: _Held, decision: Decision) -> Decision:
        reservation = held.reservation
        nodes = sorted(reservation.nodes)
        shown = ", ".join(nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
        if reservation.start > self.now:
            # No "in 12m": a message that changed with the clock would be written each cycle.
            when = f"from {instant_text(reservation.start)}"
        else:
            when = (
                f"since {instant_text(reservation.start)}, waiting for the gangs there to end "
                f"(overrun: {held.queue.reservation.overrun.value})"
            )
        return replace(
            decision,
            reason=Reason.RESERVED,
            message=f"reserved {len(nodes)} node{'s' if len(nodes) != 1 else ''} ({shown}) "
            f"{when}; now: {decision.message}",
            reservation=reservation,
        )


def _matches(reservation: Reservation, sets: Sequence[SetShape]) -> bool:
    return all(
        sum(reservation.placement.get(item.pod_set.name, {}).values()) == item.pod_set.min_count
        for item in sets
    )


def _heads(
    pending: Sequence[Prepared],
    queues: Mapping[tuple[str, str], Queue],
    shapes: Mapping[str, tuple[SetShape, ...]],
    now: float,
) -> set[str]:
    """Each Queue's head: its first gang, in the cycle's order, that can be tried now."""
    heads: dict[tuple[str, str], str] = {}
    for p in pending:
        workload = p.workload
        queue_key = (workload.namespace, workload.queue)
        if queue_key in heads or queue_key not in queues:
            continue
        if p.error or workload.deactivated or workload.absent_members > 0:
            continue
        if workload.requeue_at is not None and workload.requeue_at > now:
            continue
        if workload.key in shapes:
            heads[queue_key] = workload.key
    return set(heads.values())
