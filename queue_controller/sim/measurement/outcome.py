"""What a policy's run leaves behind: journal entries as it goes, and its result at the end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from queue_controller.sim.measurement.measure import HOUR, Meters, entitlements
from queue_controller.sim.measurement.results import (
    Percentiles,
    PolicyResult,
    Preemptions,
    ReclaimWaits,
    ShareSeries,
    TopologyFigures,
)
from queue_controller.sim.scenario.spec import Scenario
from queue_controller.sim.world.events import EPOCH
from queue_controller.sim.world.runstate import JobState

if TYPE_CHECKING:
    from queue_controller.journal import Entry
    from queue_controller.sim.measurement.domainmeter import DomainMeter


def journal_entry(
    job: JobState,
    event: str,
    reason: str,
    message: str,
    *,
    at: float,
    source: str,
    placement: Mapping[str, int],
) -> Entry:
    """The controller's journal entry for a decision taken at simulated second ``at``."""
    # Imported here: SQLAlchemy is only paid for when a journal is kept.
    from queue_controller.journal import Entry, JournalEvent

    return Entry(
        at=EPOCH + timedelta(seconds=at),
        namespace=job.spec.namespace,
        name=job.spec.name,
        queue=job.spec.queue,
        event=JournalEvent(event),
        reason=reason,
        message=message,
        placement=dict(placement),
        requeue_count=job.requeue_count,
        source=source,
    )


def policy_result(
    meters: Meters,
    *,
    policy: str,
    scenario: Scenario,
    jobs: Sequence[JobState],
    completed: int,
    deactivated: int,
    deadlocked: int,
    cycles: int,
    wall_seconds: float,
    preemption: Preemptions,
    reclaim: dict[str, Percentiles],
    reclaim_waits: ReclaimWaits | None,
    shares: dict[str, ShareSeries],
    domains: DomainMeter | None = None,
    queue_shares: dict[str, ShareSeries] | None = None,
) -> PolicyResult:
    # The run ends with its last change: a gang finishing or giving up.  Stale
    # retries, empty ticks and samples after it do not stretch it.
    end = meters.times[-1]
    return PolicyResult(
        policy=policy,
        gpu_allocation=round(meters.fraction(meters.allocated_area, end), 4),
        gpu_allocation_saturated=None,  # the engine fills it in against the bound
        wasted_gpu_hours=round(meters.wasted_area / HOUR, 2),
        stranded_gpu_fraction=round(meters.fraction(meters.stranded_area, meters.stranded_span), 4),
        queue_delay_seconds=meters.queue_delays(),
        jobs_submitted=len(jobs),
        jobs_started=sum(1 for job in jobs if job.placed_once),
        jobs_completed=completed,
        evictions=dict(sorted(meters.evictions.items())),
        deactivated_gangs=deactivated,
        deadlocked_gangs=deadlocked,
        team_share=meters.team_shares(entitlements(scenario)),
        cycles=cycles,
        simulated_seconds=round(end, 1),
        wall_seconds=round(wall_seconds, 2),
        series=meters.series(),
        waits=tuple(meters.waits),
        preemption=preemption,
        reclaim_seconds=reclaim,
        reclaim_waits=reclaim_waits,
        shares=shares,
        queue_shares=queue_shares or {},
        topology=_topology(domains),
    )


def _topology(domains: DomainMeter | None) -> TopologyFigures | None:
    if domains is None or not domains.active:
        return None
    hours = domains.wait_gpu_hours()
    on_used, broken = domains.fragmentation()
    return TopologyFigures(
        preferred_placements=domains.preferred,
        preferred_in_domain=_rounded(domains.preferred_fraction(), 4),
        domain_wait_gpu_hours=_rounded(hours, 2),
        free_on_used_nodes=_rounded(on_used, 4),
        broken_domains=_rounded(broken, 4),
    )


def _rounded(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)
