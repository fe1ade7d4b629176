"""Admission fair sharing: a TeamQuota's Queues take turns by their decayed usage.

Kueue's Admission Fair Sharing (KEP-4136, ClusterQueue ``admissionScope.admissionMode:
UsageBasedAdmissionFairSharing``), with a TeamQuota in the ClusterQueue's place and
its Queues in the LocalQueues'.  Each Queue keeps what its admitted gangs used,
decayed with a half-life, in ``status.fairSharing.admissionFairSharingStatus``; among
one TeamQuota's gangs of equal priority, the Queue whose usage per
``spec.fairSharing.weight`` is lowest goes first.

As Kueue:

* every sampling interval a Queue's consumed resources move towards what its
  admitted gangs hold now by ``alpha = 1 - 0.5 ** (elapsed / halfLife)``:
  ``consumed' = (1 - alpha) * consumed + alpha * current``, resource by resource;
* a gang admitted since the last sample adds an *entry penalty*, its request times
  the alpha of one sampling interval, at once, so that a Queue does not take every
  turn until the next sample sees its new gangs; the penalty is folded into the
  consumed resources at that sample;
* the resources are weighed into one number by ``resourceWeights`` (a resource not
  named weighs 1), each in its own unit (cores, bytes, devices), and divided by the
  Queue's weight; a weight of zero puts the Queue behind every other.

On purpose unlike Kueue: the usage orders gangs *behind* priority, not ahead of it
(Kueue compares the usage first).  Priority is what preemption judges by here: a
lower-priority gang admitted ahead of a higher one by its Queue's usage would be the
first victim of that gang under ``withinTeamQuota: LowerPriority``.  Ties go to the
older gang, then namespace and name, as :func:`..rules.ordering.order_key`.

Pure: the time comes from the snapshot, and the controller writes what
:meth:`FairQueues.result` returns.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from queue_controller.core.model.decisions import Decision, Verdict
from queue_controller.core.model.objects import AdmissionFairSharing, Queue, TeamQuota
from queue_controller.core.rules.prepared import Prepared

QueueKey = tuple[str, str]  # (namespace, name)


def alpha(*, elapsed: float, half_life: float) -> float:
    """How far one step of ``elapsed`` seconds moves usage towards the current usage.

    A half-life of zero or less keeps no history: the usage is the current usage.
    """
    if half_life <= 0:
        return 1.0
    return 1.0 - math.pow(0.5, max(elapsed, 0.0) / half_life)


def decayed(
    *,
    previous: Mapping[str, float],
    current: Mapping[str, float],
    elapsed: float,
    half_life: float,
) -> dict[str, float]:
    """``previous`` moved towards ``current`` over ``elapsed`` seconds, resource by resource."""
    step = alpha(elapsed=elapsed, half_life=half_life)
    return {
        resource: previous.get(resource, 0.0) * (1.0 - step) + current.get(resource, 0.0) * step
        for resource in sorted({*previous, *current})
    }


def entry_penalty(*, need: Mapping[str, int], policy: AdmissionFairSharing) -> dict[str, float]:
    """What admitting ``need`` adds to its Queue's usage at once: one interval's worth."""
    step = alpha(
        elapsed=policy.usage_sampling_interval_seconds, half_life=policy.usage_half_life_seconds
    )
    return {resource: amount * step for resource, amount in need.items()}


def weighed(
    *, consumed: Mapping[str, float], resource_weights: Mapping[str, int], weight: int
) -> float:
    """One number for ``consumed`` (milli-units): each resource in its unit, by its weight,
    the sum divided by the Queue's weight (thousandths).  Zero weight: infinite."""
    total = sum(
        resource_weights.get(resource, 1000) * amount for resource, amount in consumed.items()
    )
    if weight <= 0:
        return math.inf
    return total / 1000 / weight


@dataclass(frozen=True, slots=True)
class QueueUsage:
    """One Queue's admission fair sharing after a cycle."""

    # What status.fairSharing.admissionFairSharingStatus should say: resource ->
    # milli-units, as of ``consumed_at`` (seconds since the epoch).
    consumed: Mapping[str, float]
    consumed_at: float
    # True when this cycle took a new sample: the status is to be written.
    sampled: bool
    # What its gangs were last ordered by: the consumed resources with the penalties
    # since, weighed (Kueue's local_queue_admission_fair_sharing_usage).
    usage: float


class FairQueues:
    """The Queues of the TeamQuotas with admission fair sharing, over one cycle."""

    def __init__(
        self,
        *,
        quotas: Iterable[TeamQuota],
        queues: Mapping[QueueKey, Queue],
        admitted: Iterable[Prepared],
        now: float,
    ) -> None:
        self._now = now
        self._policy = {
            quota.name: quota.admission_fair_sharing
            for quota in quotas
            if quota.admission_fair_sharing is not None
        }
        self._queues = {key: q for key, q in queues.items() if q.team_quota in self._policy}
        # What each Queue's admitted gangs hold now, and the penalties not yet sampled.
        self._current: dict[QueueKey, Counter[str]] = defaultdict(Counter)
        self._penalty: dict[QueueKey, dict[str, float]] = defaultdict(dict)
        self._decided: set[str] = set()
        for prepared in admitted:
            key = self._key(prepared)
            if key is None:
                continue
            self._current[key].update(prepared.need())
            since = self._queues[key].consumed_at
            at = prepared.workload.admitted_at
            if at is not None and (since is None or at > since):
                self._penalize(key, prepared)

    def _key(self, prepared: Prepared) -> QueueKey | None:
        key = (prepared.workload.namespace, prepared.workload.queue)
        return key if key in self._queues and not prepared.error else None

    def _penalize(self, key: QueueKey, prepared: Prepared) -> None:
        policy = self._policy[self._queues[key].team_quota]
        for resource, amount in entry_penalty(need=prepared.need(), policy=policy).items():
            self._penalty[key][resource] = self._penalty[key].get(resource, 0.0) + amount

    def usage(self, key: QueueKey) -> float:
        """The Queue's usage as its gangs are ordered by now."""
        queue = self._queues[key]
        policy = self._policy[queue.team_quota]
        consumed = dict(queue.consumed)
        for resource, amount in self._penalty.get(key, {}).items():
            consumed[resource] = consumed.get(resource, 0.0) + amount
        return weighed(
            consumed=consumed, resource_weights=policy.resource_weights, weight=queue.fair_weight
        )

    def turns(self, pending: Sequence[Prepared]) -> Iterator[Prepared]:
        """``pending`` (in priority and age order) with each fair TeamQuota's gangs reordered.

        A TeamQuota's gangs keep the places they hold among everyone's; each of its
        places goes, when its turn comes, to the first gang of the Queue that is ahead
        by (priority, usage, age), read after the decisions before it (call
        :meth:`decided` on each).  Other gangs, and invalid ones, keep their places.
        """
        if not self._queues:  # no TeamQuota shares admission: the order stands as it is
            yield from pending
            return
        waiting: dict[str, dict[QueueKey, deque[Prepared]]] = defaultdict(dict)
        for prepared in pending:
            key = self._key(prepared)
            if key is not None:
                team = self._queues[key].team_quota
                waiting[team].setdefault(key, deque()).append(prepared)
        for prepared in pending:
            key = self._key(prepared)
            if key is None:
                yield prepared
                continue
            queues = waiting[self._queues[key].team_quota]
            chosen = min(
                (k for k, gangs in queues.items() if gangs),
                key=lambda k: self._turn_key(k, queues[k][0]),
            )
            yield queues[chosen].popleft()

    def _turn_key(self, key: QueueKey, head: Prepared) -> tuple[int, float, float, str, str, str]:
        workload = head.workload
        return (
            -head.priority,
            self.usage(key),
            workload.created,
            workload.namespace,
            workload.name,
            workload.kind,
        )

    def decided(self, prepared: Prepared, decision: Decision) -> None:
        """An admitted gang counts for its Queue at once: current usage and entry penalty."""
        if not self._queues or decision.verdict is not Verdict.ADMIT:
            return
        key = self._key(prepared)
        if key is None:
            return
        if prepared.workload.key in self._decided:
            return
        self._decided.add(prepared.workload.key)
        self._current[key].update(prepared.need())
        self._penalize(key, prepared)

    def result(self) -> dict[QueueKey, QueueUsage]:
        """Each fair Queue's usage after the cycle, sampled anew where its interval is up.

        A sample folds the penalties into the decayed usage and starts the next
        interval at ``now``; a Queue never sampled starts from nothing (as Kueue's
        LocalQueue status is initialised), so its first sample keeps only penalties.
        """
        out: dict[QueueKey, QueueUsage] = {}
        for key, queue in sorted(self._queues.items()):
            policy = self._policy[queue.team_quota]
            since = queue.consumed_at
            due = since is None or self._now - since >= policy.usage_sampling_interval_seconds
            if not due:
                assert since is not None
                usage = self.usage(key)
                out[key] = QueueUsage(queue.consumed, since, sampled=False, usage=usage)
                continue
            consumed = decayed(
                previous=queue.consumed,
                current=self._current.get(key, {}),
                elapsed=0.0 if since is None else self._now - since,
                half_life=policy.usage_half_life_seconds,
            )
            for resource, amount in self._penalty.get(key, {}).items():
                consumed[resource] = consumed.get(resource, 0.0) + amount
            usage = weighed(
                consumed=consumed,
                resource_weights=policy.resource_weights,
                weight=queue.fair_weight,
            )
            out[key] = QueueUsage(consumed, self._now, sampled=True, usage=usage)
        return out
