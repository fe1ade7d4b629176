"""What Queues, TeamQuotas and Cohorts show: their gangs counted, the quota used and
borrowed (a Cohort: its subtree's quota and use), the weighted share where fair sharing
is on, and a Queue's decayed usage where its TeamQuota has admission fair sharing
(sampled by the core, written here).

Derived each cycle from the gang views and the core's quota usage, and written
only where it changed.  Also the room held by preemptions, for its gauge.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping

from queue_controller.api.v1alpha1 import PodGroupPhase
from queue_controller.controller import actions as act
from queue_controller.core.cycle import CycleResult
from queue_controller.core.model import (
    ONE,
    Reason,
    ResourceQuota,
    Verdict,
    format_milli,
    is_extended,
)
from queue_controller.core.quota.admissionfair import QueueUsage
from queue_controller.core.rules import pod_request
from queue_controller.errors import InvalidSpecError
from queue_controller.kube.fields import iso
from queue_controller.kube.gangs import HOLDING_PHASES
from queue_controller.kube.snapshot import Translation


def summaries(seen: Translation, result: CycleResult) -> list[act.Action]:
    """The Queue and TeamQuota status writes this cycle needs: only where a count changed."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for gang in seen.gangs:
        if gang.gang.facts.finished:
            continue
        # A held gang's hand-written Admitted is no admission (GangView.holding).
        phase = gang.phase or PodGroupPhase.PENDING
        if phase in HOLDING_PHASES and not gang.holding:
            phase = PodGroupPhase.PENDING
        bucket = {PodGroupPhase.ADMITTED: "admittedGangs", PodGroupPhase.RUNNING: "runningGangs"}
        counts[gang.queue_key][bucket.get(phase, "pendingGangs")] += 1
    out: list[act.Action] = []
    team_counts: dict[str, Counter[str]] = defaultdict(Counter)
    for queue in seen.queues:
        key = f"{queue.model.namespace}/{queue.model.name}"
        wanted = {k: counts[key][k] for k in ("pendingGangs", "admittedGangs", "runningGangs")}
        team = queue.model.team_quota
        team_counts[team]["pendingGangs"] += wanted["pendingGangs"]
        team_counts[team]["admittedGangs"] += wanted["admittedGangs"] + wanted["runningGangs"]
        usage = result.queue_usage.get((queue.model.namespace, queue.model.name))
        sample = fair_sharing_status(queue.status, usage) if usage is not None else None
        # A Queue whose TeamQuota dropped admission fair sharing loses its figure.
        drop = usage is None and queue.status.get("fairSharing") is not None
        if sample is not None or drop or any(queue.status.get(k) != v for k, v in wanted.items()):
            out.append(
                act.QueueStatus(
                    queue=queue.ref,
                    current=queue.status,
                    counts=wanted,
                    fair_sharing=sample,
                    drop_fair_sharing=drop,
                )
            )
    for quota in seen.quotas:
        name = quota.model.name
        used_milli = result.quota_usage.get(name, {})
        used, borrowed = quota_figures(quota.model.resources, used_milli)
        wanted_counts = {k: team_counts[name][k] for k in ("pendingGangs", "admittedGangs")}
        current = quota.status
        share = result.weighted_shares.get(name)
        fair = current.get("fairSharing")
        if (
            current.get("used", {}) != used
            or current.get("borrowed", {}) != borrowed
            or any(current.get(k) != v for k, v in wanted_counts.items())
            or (fair.get("weightedShare") if isinstance(fair, dict) else None) != share
        ):
            out.append(
                act.TeamQuotaStatus(
                    quota=quota.ref,
                    current=current,
                    used=used,
                    borrowed=borrowed,
                    counts=wanted_counts,
                    weighted_share=share,
                )
            )
    out.extend(_cohort_statuses(seen, result))
    return out


def _cohort_statuses(seen: Translation, result: CycleResult) -> list[act.Action]:
    """A Cohort's status: its subtree's quota and use, and its weighted share."""
    out: list[act.Action] = []
    for cohort in seen.cohorts:
        figures = result.cohorts.get(cohort.model.name)
        if figures is None:
            continue
        quota = {r: format_milli(a, r) for r, a in sorted(figures.subtree_quota.items())}
        used = {r: format_milli(a, r) for r, a in sorted(figures.used.items()) if a}
        current = cohort.status
        fair = current.get("fairSharing")
        if (
            current.get("subtreeQuota", {}) != quota
            or current.get("used", {}) != used
            or (fair.get("weightedShare") if isinstance(fair, dict) else None)
            != figures.weighted_share
        ):
            out.append(
                act.CohortStatus(
                    cohort=cohort.ref,
                    current=current,
                    subtree_quota=quota,
                    used=used,
                    weighted_share=figures.weighted_share,
                )
            )
    return out


def fair_sharing_status(
    current: Mapping[str, object], usage: QueueUsage
) -> dict[str, object] | None:
    """status.fairSharing.admissionFairSharingStatus after a new sample, as a merge patch
    (a resource no longer consumed gets an explicit null); None when nothing was sampled."""
    if not usage.sampled:
        return None
    consumed: dict[str, str | None] = {
        resource: format_milli(max(0, round(amount)), resource)
        for resource, amount in sorted(usage.consumed.items())
    }
    fair = current.get("fairSharing")
    held = fair.get("admissionFairSharingStatus") if isinstance(fair, Mapping) else None
    old = held.get("consumedResources") if isinstance(held, Mapping) else None
    gone = dict.fromkeys(old) if isinstance(old, Mapping) else {}
    return {
        "consumedResources": gone | consumed,
        "lastUpdate": iso(usage.consumed_at),
        "usage": usage_figure(usage.usage),
    }


def usage_figure(usage: float) -> str:
    """The one number, as the printer column shows it: a few significant digits."""
    return "Inf" if math.isinf(usage) else f"{usage:.4g}"


def quota_figures(
    resources: Mapping[str, ResourceQuota], used_milli: Mapping[str, int]
) -> tuple[dict[str, str], dict[str, str]]:
    """What a TeamQuota's status shows: used per resource, and what is borrowed past nominal."""
    used: dict[str, str] = {}
    borrowed: dict[str, str] = {}
    for resource, limits in resources.items():
        amount = used_milli.get(resource, 0)
        used[resource] = format_milli(amount, resource)
        over = amount - limits.nominal
        if over > 0:
            borrowed[resource] = format_milli(over, resource)
    return used, borrowed


def nominated_room(seen: Translation, result: CycleResult) -> dict[tuple[str, str], float]:
    """Accelerators held as nominated room after this cycle: (queue, resource) -> amount.

    A gang that preempts in this cycle holds the room its decision names; one still
    waiting for the gangs it preempted to go holds what its PodGroup records.  A gang
    admitted onto its room holds a placement instead, and is not counted.
    """
    gangs = {gang.key: gang for gang in seen.gangs}
    held: Counter[tuple[str, str]] = Counter()  # milli-units
    for decision in result.decisions:
        gang = gangs.get(decision.key)
        if gang is None:
            continue
        if decision.verdict is Verdict.PREEMPT:
            room = decision.nominated
        elif decision.reason is Reason.PREEMPTING:
            room = gang.workload.nominated
        else:
            continue
        pod_sets = {pod_set.name: pod_set for pod_set in gang.workload.pod_sets}
        for name, nodes in room.items():
            pod_set = pod_sets.get(name)
            if pod_set is None:
                continue
            try:
                request = pod_request(pod_set.template)
            except InvalidSpecError:  # the core said why; a gang it cannot read holds nothing
                continue
            members = sum(nodes.values())
            for resource, amount in request.items():
                if is_extended(resource) and amount:
                    held[(gang.queue_key, resource)] += amount * members
    return {key: milli / ONE for key, milli in sorted(held.items())}
