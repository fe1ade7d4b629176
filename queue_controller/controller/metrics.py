"""Prometheus metrics, prefix ``queue_controller_``, in one registry of our own.

The names follow what Kueue users already graph (pending, admitted, evicted
with a reason, wait time, quota use) and add what no gang scheduler exports:
how many gangs sit partially placed right now, and for how long they do.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from queue_controller.core import CohortFigures

_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
_PARTIAL_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_RECLAIM_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
_CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r, p = self.registry, "queue_controller_"
        self.pending_gangs = Gauge(
            p + "pending_gangs",
            "Gangs waiting for admission, by reason.",
            ["queue", "reason"],
            registry=r,
        )
        self.admitted_gangs = Counter(
            p + "admitted_gangs", "Gangs admitted.", ["queue"], registry=r
        )
        self.evicted_gangs = Counter(
            p + "evicted_gangs", "Gangs evicted, by reason.", ["queue", "reason"], registry=r
        )
        self.requeued_gangs = Counter(
            p + "requeued_gangs", "Gangs requeued after an eviction.", ["queue"], registry=r
        )
        self.preemptions = Counter(
            p + "preemptions",
            "Gangs evicted to make room for another, by the queue of the evicted gang and "
            "the preemption's reason (ReclaimWithinCohort, BorrowWithinCohort, WithinTeamQuota).",
            ["queue", "reason"],
            registry=r,
        )
        self.reclaim = Histogram(
            p + "reclaim_seconds",
            "For a gang that preempted: from its preemption (when it took its nominated room) "
            "to its admission there, by its queue.",
            ["queue"],
            buckets=_RECLAIM_BUCKETS,
            registry=r,
        )
        self.nominated = Gauge(
            p + "nominated_accelerators",
            "Accelerators (nvidia.com/gpu, MIG slices: extended resources) held in the "
            "nominatedPlacement of gangs waiting for their preempted gangs to go, by queue "
            "and resource.",
            ["queue", "resource"],
            registry=r,
        )
        self.admission_wait = Histogram(
            p + "admission_wait_seconds",
            "From Job creation to admission.",
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.partially_placed = Gauge(
            p + "partially_placed_gangs",
            "Admitted gangs with some, but fewer than minMember, members running.",
            registry=r,
        )
        self.awaiting_creation = Gauge(
            p + "pods_awaiting_creation",
            "Pods of admitted gangs that their controllers (the Job controller) have not "
            "made yet: admission waits while these pass --creation-backlog.",
            registry=r,
        )
        self.partial_placement = Histogram(
            p + "partial_placement_seconds",
            "How long a gang stayed partially placed before it ran whole or was evicted.",
            buckets=_PARTIAL_BUCKETS,
            registry=r,
        )
        self.quota_used = Gauge(
            p + "quota_used", "TeamQuota usage.", ["team_quota", "resource"], registry=r
        )
        self.quota_nominal = Gauge(
            p + "quota_nominal", "TeamQuota nominal quota.", ["team_quota", "resource"], registry=r
        )
        self.weighted_share = Gauge(
            p + "team_quota_weighted_share",
            "Fair sharing's weighted share of a TeamQuota whose Cohort enables it (x1000, "
            "Kueue's weightedShare): what it borrows over what the cohort lends, by its weight.",
            ["team_quota"],
            registry=r,
        )
        # A Cohort's subtree, as its status says (Kueue: cohort_subtree_quota, _usage).
        self.cohort_subtree_quota = Gauge(
            p + "cohort_subtree_quota",
            "What a Cohort's subtree holds: its own nominal and what its children lend it.",
            ["cohort", "resource"],
            registry=r,
        )
        self.cohort_subtree_used = Gauge(
            p + "cohort_subtree_used",
            "What the TeamQuotas of a Cohort's subtree use.",
            ["cohort", "resource"],
            registry=r,
        )
        self.cohort_weighted_share = Gauge(
            p + "cohort_weighted_share",
            "Fair sharing's weighted share of a Cohort among its siblings (x1000), where its "
            "tree's root enables fair sharing.",
            ["cohort"],
            registry=r,
        )
        self.admission_fair_sharing_usage = Gauge(
            p + "queue_admission_fair_sharing_usage",
            "Admission fair sharing's usage of a Queue whose TeamQuota sets "
            "spec.admissionFairSharing (Kueue's local_queue_admission_fair_sharing_usage): "
            "decayed usage with entry penalties, weighed by resourceWeights, by its weight.",
            ["queue"],
            registry=r,
        )
        self.cycle_seconds = Histogram(
            p + "scheduling_cycle_seconds",
            "One admission cycle, snapshot to decisions.",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        # Where a cycle's time goes, so that "cycles are slow" says which step to fix.
        self.cycle_phase_seconds = Histogram(
            p + "scheduling_cycle_phase_seconds",
            "One step of an admission cycle: translate (raw objects to the snapshot), "
            "core (the pure decisions), plan (decisions to writes), apply (the writes).",
            ["phase"],
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(p + "leader", "1 while this replica holds the lease.", registry=r)
        self.api_writes = Counter(
            p + "api_writes",
            "Writes sent to the API server, by verb (create, patch, delete, event) and "
            "resource: divided by admitted_gangs_total, what an admission costs.",
            ["verb", "resource"],
            registry=r,
        )
        self.leader_election_errors = Counter(
            p + "leader_election_errors",
            "Times the API server refused this replica's Lease, by reason (NamespaceNotFound, "
            "Forbidden, APIError): while they grow it can never lead, so it admits nothing.",
            ["reason"],
            registry=r,
        )
        self.unhealthy_gpus = Gauge(
            p + "unhealthy_gpus",
            "GPUs that a Node's health report takes out of admission.",
            ["node"],
            registry=r,
        )
        self.flagged_gangs = Gauge(
            p + "flagged_gangs",
            "Admitted gangs with a GPU condition set (Idle, or GPUUnhealthy under Mark).",
            ["queue", "condition"],
            registry=r,
        )
        self.dcgm_targets_down = Gauge(
            p + "dcgm_targets_down", "DCGM targets that did not answer the last read.", registry=r
        )
        self.cycle_failures = Counter(
            p + "cycle_failures",
            "Scheduling cycles that failed as a whole, by the exception's class: a bug. While "
            "it grows nothing is admitted; one bad object never counts here (objects_left_out).",
            ["reason"],
            registry=r,
        )
        self.objects_left_out = Gauge(
            p + "objects_left_out",
            "Objects the last cycle left out because they could not be read, by kind; each "
            "has a Warning event (reason InvalidObject) saying why.",
            ["kind"],
            registry=r,
        )
        self.reservations = Gauge(
            p + "reservations",
            "Reservations held for starving Queue heads (reason Reserved), by queue.",
            ["queue"],
            registry=r,
        )
        self.backfilled = Counter(
            p + "backfilled",
            "Gangs admitted onto nodes reserved for another gang (a backfill), by queue.",
            ["queue"],
            registry=r,
        )
        self.forecast = Histogram(
            p + "eta_forecast_seconds",
            "How long one forecast of every pending gang's start took (--eta-interval).",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.estimated_gangs = Gauge(
            p + "estimated_gangs",
            "Pending gangs by the reason of their estimated start (status.eta.reason): "
            "Estimated, NoRuntimeEstimates, BlockedByQuota, ...",
            ["queue", "reason"],
            registry=r,
        )
        self.journal_up = Gauge(
            p + "journal_up", "1 while the decision journal accepts writes.", registry=r
        )

    def set_pending(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the pending gauge: reasons that no longer occur drop to nothing."""
        self.pending_gangs.clear()
        for (queue, reason), count in counts.items():
            self.pending_gangs.labels(queue, reason).set(count)

    def set_quota(
        self, used: Mapping[tuple[str, str], float], nominal: Mapping[tuple[str, str], float]
    ) -> None:
        self.quota_used.clear()
        self.quota_nominal.clear()
        for (quota, resource), value in used.items():
            self.quota_used.labels(quota, resource).set(value)
        for (quota, resource), value in nominal.items():
            self.quota_nominal.labels(quota, resource).set(value)

    def set_weighted_shares(self, shares: Mapping[str, int]) -> None:
        """Replace the share gauge: a quota whose cohort stops fair sharing drops out."""
        self.weighted_share.clear()
        for quota, share in shares.items():
            self.weighted_share.labels(quota).set(share)

    def set_cohorts(self, figures: Mapping[str, CohortFigures]) -> None:
        """Replace the cohort gauges: a Cohort deleted, or a resource gone, drops out."""
        for gauge in (self.cohort_subtree_quota, self.cohort_subtree_used):
            gauge.clear()
        self.cohort_weighted_share.clear()
        for name, cohort in figures.items():
            for resource, milli in cohort.subtree_quota.items():
                self.cohort_subtree_quota.labels(name, resource).set(milli / 1000)
            for resource, milli in cohort.used.items():
                self.cohort_subtree_used.labels(name, resource).set(milli / 1000)
            if cohort.weighted_share is not None:
                self.cohort_weighted_share.labels(name).set(cohort.weighted_share)

    def set_admission_fair_sharing(self, usage: Mapping[str, float]) -> None:
        """Replace the usage gauge: a Queue whose TeamQuota stops it drops out."""
        self.admission_fair_sharing_usage.clear()
        for queue, value in usage.items():
            self.admission_fair_sharing_usage.labels(queue).set(value)

    def set_nominated(self, held: Mapping[tuple[str, str], float]) -> None:
        """Replace the nominated-room gauge: a queue whose room became a placement drops out."""
        self.nominated.clear()
        for (queue, resource), amount in held.items():
            self.nominated.labels(queue, resource).set(amount)

    def set_gpu_signals(
        self, unhealthy: Mapping[str, int], flagged: Mapping[tuple[str, str], int]
    ) -> None:
        self.unhealthy_gpus.clear()
        for node, count in unhealthy.items():
            self.unhealthy_gpus.labels(node).set(count)
        self.flagged_gangs.clear()
        for (queue, condition), count in flagged.items():
            self.flagged_gangs.labels(queue, condition).set(count)

    def set_reservations(self, held: Mapping[str, int]) -> None:
        """Replace the reservations gauge: a queue whose reservation ended drops out."""
        self.reservations.clear()
        for queue, count in held.items():
            self.reservations.labels(queue).set(count)

    def set_estimated(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Replace the estimated-gangs gauge with the latest forecast's (queue, reason)."""
        self.estimated_gangs.clear()
        for (queue, reason), count in counts.items():
            self.estimated_gangs.labels(queue, reason).set(count)

    def set_left_out(self, counts: Mapping[str, int]) -> None:
        """Replace the left-out gauge: a kind with nothing left out any more drops out."""
        self.objects_left_out.clear()
        for kind, count in counts.items():
            self.objects_left_out.labels(kind).set(count)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
