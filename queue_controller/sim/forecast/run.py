"""The forecast's loop: the live state run forward, one admission cycle per event.

Running gangs end at their estimates (``admitted_at + runtime.seconds``; one
already past its estimate ends now; one without an estimate never ends).  At
the current time and at every later event the core's own :func:`schedule` runs
over the state as it would then be, and each gang it admits runs for its own
estimate from there.  Events are: an estimated end, a requeued gang coming due,
a head becoming eligible for a reservation (``spec.reservation.afterSeconds``
after it began to wait ``NoNodeFit``) and a reservation's start.  What the
controller writes to PodGroup status between cycles is carried the same way
(the reservation a head holds, since when it has waited for room, a Queue's
decayed usage), so that the core decides in the forecast as it will live.

A Preempt is taken as an admission at once: its victims go (requeued with their
Queue's backoff, as the controller requeues them) and it takes the room it was
given.  Cost is bounded by ``max_cycles`` (each one cycle of the core over the
whole state) and by ``horizon_seconds``; gangs not reached by either say so.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import replace

from queue_controller.core import (
    BoundPod,
    Decision,
    Queue,
    Reason,
    Snapshot,
    Verdict,
    Workload,
    WorkloadPhase,
    schedule,
)
from queue_controller.core.quota.admissionfair import QueueKey, QueueUsage
from queue_controller.core.rules import requeue
from queue_controller.core.rules.durations import duration_text, instant_text
from queue_controller.sim.forecast.outcome import Eta, EtaReason, Forecast

DEFAULT_HORIZON_SECONDS = 7 * 86400.0
# Each cycle is one run of the core over the whole state (tens of milliseconds on a
# cluster of hundreds of nodes): 200 keep a refresh within seconds of CPU.
DEFAULT_MAX_CYCLES = 200
_WAITING_FOR_ROOM = (Reason.NO_NODE_FIT, Reason.RESERVED)


def forecast(
    snapshot: Snapshot,
    *,
    horizon_seconds: float = DEFAULT_HORIZON_SECONDS,
    max_cycles: int = DEFAULT_MAX_CYCLES,
    creation_backlog: int | None = None,
) -> Forecast:
    """Every pending gang's estimated start, by running ``snapshot`` forward.

    ``horizon_seconds`` bounds the simulated time and ``max_cycles`` the admission
    cycles run (at least one: the current decision, which every gang's ``waits_for``
    is).  ``creation_backlog`` paces admission as the controller's setting does.
    """
    if max_cycles < 1:
        raise ValueError("max_cycles must be at least 1")
    return _Run(snapshot, horizon_seconds, max_cycles, creation_backlog).run()


class _Run:
    def __init__(
        self, snapshot: Snapshot, horizon: float, max_cycles: int, backlog: int | None
    ) -> None:
        self.base = snapshot
        self.now = snapshot.now
        self.until = snapshot.now + horizon
        self.horizon = horizon
        self.max_cycles = max_cycles
        self.backlog = backlog
        self.queues: dict[tuple[str, str], Queue] = {
            (q.namespace, q.name): q for q in snapshot.queues
        }
        self.tree = _quota_trees(snapshot)
        self.workloads: dict[str, Workload] = {
            w.key: w for w in snapshot.workloads if w.phase is not WorkloadPhase.FINISHED
        }
        self.pods_of: dict[str, list[BoundPod]] = {}
        self.other_pods: list[BoundPod] = []
        for pod in snapshot.pods:
            if pod.workload:
                self.pods_of.setdefault(pod.workload, []).append(pod)
            else:
                self.other_pods.append(pod)
        self.originals = {w.key: w for w in snapshot.workloads}
        self.pending0 = {
            k: w for k, w in self.workloads.items() if w.phase is WorkloadPhase.PENDING
        }
        # (time, seq, key, generation): an eviction bumps the generation, voiding an end.
        self.ends: list[tuple[float, int, str, int]] = []
        self.generation: dict[str, int] = {}
        self.wakes: list[float] = []
        self.seq = 0
        self.never_ends: set[str] = set()  # admitted without an estimate
        for key, w in self.workloads.items():
            if w.phase is WorkloadPhase.ADMITTED:
                started = w.admitted_at if w.admitted_at is not None else self.now
                self._started(key, w, started, floor=self.now)
            else:
                self._wake_for(w, None, self.now)
        self.first: dict[str, Decision] = {}
        self.order: list[str] = []
        self.last: dict[str, Decision] = {}
        self.started_at: dict[str, float] = {}
        self.after: dict[str, tuple[str, ...]] = {}
        # Nodes each gang that ended held (planned or bound), for ``after``.
        self.nodes_of: dict[str, frozenset[str]] = {}
        self.cycles = 0

    # -- the loop ------------------------------------------------------------------

    def run(self) -> Forecast:
        t = self.now
        ended: list[str] = []
        stopped = "done"
        while True:
            if self.cycles >= self.max_cycles:
                stopped = "bound"
                break
            result = schedule(self._snapshot(t), creation_backlog=self.backlog)
            self.cycles += 1
            self._sampled(result.queue_usage)
            victims = self._apply(result.decisions, t, ended)
            if not any(k not in self.started_at and k in self.workloads for k in self.pending0):
                break
            if victims:  # their room came back mid-cycle: decide again at once
                ended = [*ended, *victims]
                continue
            nxt = self._next_event(t)
            if nxt is None:
                stopped = "stalled"
                break
            if nxt > self.until:
                stopped = "horizon"
                break
            t = max(t, nxt)
            ended = self._end_until(t)
        return Forecast(
            tuple(self._eta(key, stopped, t) for key in self.order),
            now=self.now,
            cycles=self.cycles,
            reached=t,
            stopped=stopped,
        )

    def _snapshot(self, t: float) -> Snapshot:
        pods = list(self.other_pods)
        for key in self.workloads:
            pods.extend(self.pods_of.get(key, ()))
        return replace(
            self.base,
            workloads=tuple(self.workloads.values()),
            pods=tuple(pods),
            queues=tuple(self.queues.values()),
            now=t,
        )

    def _sampled(self, usage: Mapping[QueueKey, QueueUsage]) -> None:
        """Each admission-fair Queue's decayed usage, carried as its status carries it."""
        for key, u in usage.items():
            queue = self.queues.get(key)
            if queue is not None and u.sampled:
                self.queues[key] = replace(queue, consumed=u.consumed, consumed_at=u.consumed_at)

    def _next_event(self, t: float) -> float | None:
        while self.ends and not self._live(self.ends[0]):
            heapq.heappop(self.ends)
        while self.wakes and self.wakes[0] <= t:
            heapq.heappop(self.wakes)
        candidates = [e[0] for e in self.ends[:1]] + self.wakes[:1]
        return min(candidates) if candidates else None

    def _live(self, entry: tuple[float, int, str, int]) -> bool:
        _, _, key, generation = entry
        w = self.workloads.get(key)
        return (
            w is not None
            and w.phase is WorkloadPhase.ADMITTED
            and self.generation.get(key, 0) == generation
        )

    def _end_until(self, t: float) -> list[str]:
        """End every gang whose estimate is up by ``t``; their keys, in order of ending."""
        ended: list[str] = []
        while self.ends and self.ends[0][0] <= t:
            entry = heapq.heappop(self.ends)
            if not self._live(entry):
                continue
            key = entry[2]
            self.nodes_of[key] = self._nodes(self.workloads.pop(key))
            self.pods_of.pop(key, None)
            ended.append(key)
        while self.wakes and self.wakes[0] <= t:
            heapq.heappop(self.wakes)
        return ended

    def _nodes(self, w: Workload) -> frozenset[str]:
        planned = {n for nodes in w.pod_set_placement.values() for n in nodes} | set(w.placement)
        return frozenset(planned | {p.node_name for p in self.pods_of.get(w.key, ())})

    # -- one cycle's decisions ---------------------------------------------------------

    def _apply(self, decisions: Iterable[Decision], t: float, ended: list[str]) -> list[str]:
        """Carry out one cycle's decisions at ``t``; the keys of the gangs preempted."""
        first = not self.first
        victims: list[str] = []
        for d in decisions:
            key = d.key
            w = self.workloads.get(key)
            if w is None or w.phase is not WorkloadPhase.PENDING:
                continue
            if first and key in self.pending0:
                self.first[key] = d
                self.order.append(key)
            self.last[key] = d
            if d.verdict in (Verdict.ADMIT, Verdict.PREEMPT):
                for victim, _ in d.victims:
                    if self._evict(victim, t):
                        victims.append(victim)
                self._admit(key, w, d, t, ended)
            elif d.verdict is Verdict.INVALID:
                del self.workloads[key]  # never admitted as written
            else:
                self._pending(key, w, d, t)
        return victims

    def _admit(self, key: str, w: Workload, d: Decision, t: float, ended: list[str]) -> None:
        if d.verdict is Verdict.PREEMPT:
            by_set = {name: dict(nodes) for name, nodes in d.nominated.items()}
        else:
            by_set = {name: dict(nodes) for name, nodes in d.pod_set_placement.items()}
        total: dict[str, int] = dict(d.placement)
        if not total:
            for nodes in by_set.values():
                for node, count in nodes.items():
                    total[node] = total.get(node, 0) + count
        admitted = replace(
            w,
            phase=WorkloadPhase.ADMITTED,
            admitted_at=t,
            placement=total,
            pod_set_placement=by_set if len(by_set) > 1 else {},
            nominated={},
            reservation=None,
            no_fit_since=None,
            requeue_at=None,
            uncreated_members=0,
        )
        self.workloads[key] = admitted
        self._started(key, admitted, t, floor=t)
        if key in self.pending0 and key not in self.started_at:
            self.started_at[key] = t
            self.after[key] = self._freed_by(w, frozenset(total), ended)

    def _started(self, key: str, w: Workload, started: float, *, floor: float) -> None:
        seconds = w.runtime.seconds
        if seconds is None:
            self.never_ends.add(key)
            return
        self.never_ends.discard(key)
        self.seq += 1
        end = max(floor, started + seconds)
        heapq.heappush(self.ends, (end, self.seq, key, self.generation.get(key, 0)))

    def _pending(self, key: str, w: Workload, d: Decision, t: float) -> None:
        waiting = d.reason in _WAITING_FOR_ROOM
        since = (w.no_fit_since if w.no_fit_since is not None else t) if waiting else None
        if since != w.no_fit_since or d.reservation != w.reservation:
            w = replace(w, no_fit_since=since, reservation=d.reservation)
            self.workloads[key] = w
        self._wake_for(w, d, t)

    def _wake_for(self, w: Workload, d: Decision | None, t: float) -> None:
        """The times at which this pending gang's answer may change without an end."""
        if w.requeue_at is not None and w.requeue_at > t:
            heapq.heappush(self.wakes, w.requeue_at)
        queue = self.queues.get((w.namespace, w.queue))
        after = None if queue is None else queue.reservation.after_seconds
        if after is not None and w.no_fit_since is not None and w.no_fit_since + after > t:
            heapq.heappush(self.wakes, w.no_fit_since + after)
        reservation = d.reservation if d is not None else w.reservation
        if reservation is not None and reservation.start > t:
            heapq.heappush(self.wakes, reservation.start)

    def _evict(self, key: str, t: float) -> bool:
        """A preempted gang goes at once and is requeued with its Queue's backoff."""
        w = self.workloads.get(key)
        if w is None or w.phase is not WorkloadPhase.ADMITTED:
            return False
        self.generation[key] = self.generation.get(key, 0) + 1
        self.never_ends.discard(key)
        self.nodes_of[key] = self._nodes(w)
        self.pods_of.pop(key, None)
        queue = self.queues.get((w.namespace, w.queue))
        if queue is None:
            del self.workloads[key]
            return True
        again = requeue(queue.requeue, previous=w.requeue_count, now=t)
        self.workloads[key] = replace(
            w,
            phase=WorkloadPhase.PENDING,
            placement={},
            pod_set_placement={},
            admitted_at=None,
            requeue_count=again.count,
            requeue_at=again.at,
            deactivated=again.deactivated,
        )
        heapq.heappush(self.wakes, again.at)
        return True

    # -- what it depends on ---------------------------------------------------------------

    def _tree_of(self, w: Workload) -> str | None:
        queue = self.queues.get((w.namespace, w.queue))
        return None if queue is None else self.tree.get(queue.team_quota, queue.team_quota)

    def _freed_by(self, w: Workload, nodes: frozenset[str], ended: list[str]) -> tuple[str, ...]:
        """Of the gangs that ended just before it started, those whose room it takes:
        on its nodes or, waiting for quota, in its quota's tree; else all of them."""
        if not ended:
            return ()
        tree = self._tree_of(w)
        related = [
            key
            for key in ended
            if self.nodes_of.get(key, frozenset()) & nodes
            or (tree is not None and self._tree_of_key(key) == tree)
        ]
        return tuple(related or ended)

    def _tree_of_key(self, key: str) -> str | None:
        original = self.originals.get(key)
        return None if original is None else self._tree_of(original)

    # -- the answers --------------------------------------------------------------------------

    def _eta(self, key: str, stopped: str, t: float) -> Eta:
        w = self.pending0[key]
        first = self.first[key]
        ahead = tuple(
            k
            for k in self.order[: self.order.index(key)]
            if (self.pending0[k].namespace, self.pending0[k].queue) == (w.namespace, w.queue)
        )

        def eta(
            start: float | None, reason: EtaReason, message: str, after: tuple[str, ...] = ()
        ) -> Eta:
            return Eta(
                key, first.queue, start, reason, message, w.runtime, after, ahead, waits_for=first
            )

        if key in self.started_at:
            start = self.started_at[key]
            after = self.after.get(key, ())
            when = "now" if start <= self.now else f"in {duration_text(start - self.now)}"
            message = f"starts {when} ({instant_text(start)})"
            if after:
                message += f", once {_names(after)} end"
            return eta(start, EtaReason.ESTIMATED, message, after)
        last = self.last.get(key, first)
        if last.verdict is Verdict.INVALID:
            return eta(None, EtaReason.INVALID, last.message)
        if stopped == "bound":
            return eta(
                None,
                EtaReason.FORECAST_BOUND,
                f"not admitted within the forecast's {self.max_cycles} cycles "
                f"(up to {instant_text(t)})",
            )
        if last.reason is Reason.WAITING_FOR_HEAD:
            head = self._head_of(key, w)
            if head is not None:
                found = self._eta(head, stopped, t)
                message = f"waits for its StrictFIFO head {head.split('/', 1)[1]}: {found.message}"
                return eta(None, found.reason, message, (head, *found.after))
        beyond = eta(
            None,
            EtaReason.BEYOND_HORIZON,
            f"not admitted within {duration_text(self.horizon)} of now",
        )
        if last.reason is Reason.BACKOFF:
            return beyond  # it comes due only past the horizon
        # Waiting for room or quota: gangs that end past the horizon may free it.
        waits = last.reason in (Reason.QUOTA_EXCEEDED, *_WAITING_FOR_ROOM)
        if waits and stopped == "horizon" and any(self._live(entry) for entry in self.ends):
            return beyond
        blockers = tuple(sorted(self.never_ends))
        if last.reason is Reason.QUOTA_EXCEEDED:
            tree = self._tree_of(w)
            related = tuple(b for b in blockers if self._tree_of_key(b) == tree)
            if related and self._alone(w) is not Reason.QUOTA_EXCEEDED:
                return eta(
                    None,
                    EtaReason.NO_RUNTIME_ESTIMATES,
                    f"its quota frees only when {_names(related)} end, and they have no "
                    "runtime estimate",
                    related,
                )
            return eta(
                None,
                EtaReason.BLOCKED_BY_QUOTA,
                "its quota never has room for it, even once every gang with an estimate "
                f"has ended: {last.message}",
            )
        if last.reason in _WAITING_FOR_ROOM:
            if blockers and self._alone(w) is not Reason.NO_NODE_FIT:
                return eta(
                    None,
                    EtaReason.NO_RUNTIME_ESTIMATES,
                    f"room frees only when gangs without a runtime estimate end "
                    f"({_names(blockers)})",
                    blockers,
                )
            return eta(
                None,
                EtaReason.NEVER_FITS,
                f"no node holds it even once every gang with an estimate has ended: {last.message}",
            )
        return eta(None, EtaReason.BLOCKED, f"{last.reason.value}: {last.message}")

    def _alone(self, w: Workload) -> Reason:
        """Its reason in the cluster emptied of every gang: only pods of no gang stay.

        Told apart from waiting behind gangs without an estimate: a gang that its quota
        (with all its cohort lends) or no node would hold even then waits for good.
        One small cycle (one gang) for each gang that stalls so.
        """
        alone = replace(
            self.base,
            workloads=(replace(w, reservation=None, nominated={}, requeue_at=None),),
            pods=tuple(self.other_pods),
        )
        decisions = schedule(alone).decisions
        return decisions[0].reason if decisions else Reason.NO_NODE_FIT

    def _head_of(self, key: str, w: Workload) -> str | None:
        """The gang before ``key`` in its StrictFIFO Queue that is not itself held up."""
        before = self.order[: self.order.index(key)]
        for k in reversed(before):
            other = self.pending0[k]
            if (other.namespace, other.queue) != (w.namespace, w.queue):
                continue
            if self.last.get(k, self.first[k]).reason is not Reason.WAITING_FOR_HEAD:
                return k
        return None


def _names(keys: Iterable[str], *, most: int = 3) -> str:
    names = [key.split("/", 1)[1] for key in keys]
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def _quota_trees(snapshot: Snapshot) -> dict[str, str]:
    """TeamQuota -> the root of its cohort tree (itself without a cohort)."""
    parent = {c.name: c.parent for c in snapshot.cohorts}
    out: dict[str, str] = {}
    for quota in snapshot.quotas:
        node = quota.cohort
        if not node:
            out[quota.name] = quota.name
            continue
        seen: set[str] = set()
        while parent.get(node) and node not in seen:
            seen.add(node)
            node = parent[node]
        out[quota.name] = f"cohort:{node}"
    return out
