"""Admission fair sharing over a run: each Queue's part of its TeamQuota's usage.

Where a TeamQuota sets ``spec.admissionFairSharing``, its Queues take turns by
their decayed usage (core/quota/admissionfair.py).  A Queue's *share* here is its
part of what all the TeamQuota's Queues have used, decayed, each resource by
the TeamQuota's ``resourceWeights`` (the Queues' own weights left out); its
*target* is its weight's part of theirs.  Turns by usage pull the shares of
Queues that keep asking towards their targets, however much more one submits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from queue_controller.core import Queue, TeamQuota
from queue_controller.core.quota.admissionfair import QueueKey, QueueUsage, weighed
from queue_controller.sim.measurement.measure import StepSeries
from queue_controller.sim.measurement.results import ShareSeries

ONE = 1000  # a weight of one, in thousandths


class QueueShareMeter:
    """Each admission-fair Queue's share (see the module) as a step function of time."""

    def __init__(self, quotas: Sequence[TeamQuota], queues: Sequence[Queue]) -> None:
        policy = {q.name: q.admission_fair_sharing for q in quotas}
        self.weights = {
            q.name: dict(p.resource_weights) for q in quotas if (p := policy[q.name]) is not None
        }
        self.team_of = {
            (q.namespace, q.name): q.team_quota for q in queues if q.team_quota in self.weights
        }
        total: dict[str, int] = {}
        for q in queues:
            if q.team_quota in self.weights:
                total[q.team_quota] = total.get(q.team_quota, 0) + q.fair_weight
        self.target = {
            (q.namespace, q.name): q.fair_weight / total[q.team_quota] if total[q.team_quota] else 0
            for q in queues
            if q.team_quota in self.weights
        }
        self.series = {key: StepSeries() for key in self.team_of}

    def sample(self, usage: Mapping[QueueKey, QueueUsage], now: float) -> None:
        """The Queues' usage after the cycle at ``now``."""
        if not usage:
            return
        used = {
            key: weighed(consumed=u.consumed, resource_weights=self.weights[team], weight=ONE)
            for key, u in usage.items()
            if (team := self.team_of.get(key)) is not None
        }
        totals: dict[str, float] = {}
        for key, amount in used.items():
            totals[self.team_of[key]] = totals.get(self.team_of[key], 0.0) + amount
        for key, amount in used.items():
            total = totals[self.team_of[key]]
            self.series[key].step(amount / total if total > 0 else 0.0, now)

    def result(self, end: float) -> dict[str, ShareSeries]:
        """Each Queue, as ``namespace/name``: its target (``weight``) and its share over time."""
        return {
            f"{key[0]}/{key[1]}": self.series[key].series(round(self.target[key], 4), end)
            for key in sorted(self.team_of)
        }
