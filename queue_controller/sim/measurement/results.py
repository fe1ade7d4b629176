"""What a simulation measured, per admission policy: the shape of ``report.json``."""

from __future__ import annotations

from dataclasses import dataclass, field

# Gang-size classes, by the GPUs (GPU-equivalents) the whole gang asks for.
SIZE_CLASSES = ("1", "2-8", "9-32", "33+")


def size_class(gpus: float) -> str:
    if gpus <= 1:
        return "1"
    if gpus <= 8:
        return "2-8"
    if gpus <= 32:
        return "9-32"
    return "33+"


@dataclass(frozen=True, slots=True)
class Percentiles:
    count: int
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(frozen=True, slots=True)
class TeamShare:
    allocated_gpu_hours: float
    share: float  # of all GPU hours allocated to fully placed gangs
    entitlement: float  # the team's nominal GPUs over the cohort's


@dataclass(frozen=True, slots=True)
class Series:
    """Step functions sampled at event times, for the plots."""

    times: tuple[float, ...]
    allocated_gpus: tuple[float, ...]  # held by fully placed gangs
    held_gpus: tuple[float, ...]  # held by any pod of a queued gang
    pending_gangs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShareSeries:
    """A team's weighted share of its cohort over time (sim.sharing defines it)."""

    weight: float
    mean: float  # time-weighted over the run
    peak: float
    times: tuple[float, ...] = ()
    values: tuple[float, ...] = ()  # a step function: each holds until the next time


@dataclass(frozen=True, slots=True)
class Preemptions:
    victims: int = 0  # gangs evicted by a preemption
    preemptors: int = 0  # Preempt decisions: gangs that evicted others for room
    lost_gpu_hours: float = 0.0  # GPU time the victims had held, thrown away (sim.preempting)


@dataclass(frozen=True, slots=True)
class ReclaimWaits:
    """Blocked lenders' gangs (sim.sharing), from the first cycle that found one
    reclaim-blocked until its admission: the whole wait, and what it waited for."""

    total: Percentiles
    parts: dict[str, Percentiles]  # lent | own | nodes -> seconds per gang
    hours: dict[str, float]  # the same, summed over the gangs, in hours


@dataclass(frozen=True, slots=True)
class TopologyFigures:
    """What topology did to the gangs that asked for it (sim.domainmeter defines both)."""

    preferred_placements: int  # placements of gangs that asked for a Preferred level
    preferred_in_domain: float | None  # of them, inside one domain of it; None: none
    domain_wait_gpu_hours: float | None  # None where not measured (no core placement)
    # Fragmentation inside the Topology (sim.domainmeter): mean shares; None: not sampled.
    free_on_used_nodes: float | None = None  # of free GPUs, on nodes partly in use
    broken_domains: float | None = None  # of the narrowest domains with room, partly in use


@dataclass(frozen=True, slots=True)
class ReservationFigures:
    """What reservation with backfill did in a gang-fit run (sim.measurement.reservation)."""

    reserving: bool  # whether the run had reservation on
    large_gang_min_gpus: float
    large_gangs: int
    large_gangs_never_started: int
    large_gang_wait_p95_seconds: float | None
    makespan_seconds: float
    reservations: int  # distinct reservations made
    backfilled_gangs: int
    overruns: int  # reservations overrun by a backfilled gang, plus overrun preemptions
    overrun_preemptions: int
    late_reservations: int
    # The forecast's estimated start on arrival against the actual one (a sample).
    eta_median_relative_error: float | None
    eta_gangs: int  # sampled gangs with an estimate, admitted after a wait
    # The same without the gangs admitted by the cycle the forecast began at.
    eta_median_relative_error_waited: float | None
    eta_first_cycle_gangs: int
    eta_sampled_gangs: int  # gangs forecast on arrival
    eta_unknown: int  # of them, those the forecast gave no start
    eta_unknown_reasons: dict[str, int]  # the forecast's reason -> how many
    # The start of a gang's first reservation against the actual one.
    reservation_start_median_relative_error: float | None
    reservation_start_gangs: int
    large_waits: tuple[float, ...] = field(default=(), repr=False)  # seconds, for the plot


@dataclass(frozen=True, slots=True)
class PolicyResult:
    policy: str  # gang-fit | quota-only | per-pod
    gpu_allocation: float
    gpu_allocation_saturated: float | None  # over the saturated window, if there is one
    wasted_gpu_hours: float
    stranded_gpu_fraction: float
    queue_delay_seconds: dict[str, Percentiles]  # "all" and each of SIZE_CLASSES
    jobs_submitted: int
    jobs_started: int
    jobs_completed: int
    evictions: dict[str, int]  # reason -> count
    deactivated_gangs: int
    deadlocked_gangs: int
    team_share: dict[str, TeamShare]
    cycles: int
    simulated_seconds: float
    wall_seconds: float
    series: Series
    # (size class, seconds from arrival until the whole gang ran), for the CDF.
    waits: tuple[tuple[str, float], ...] = ()
    preemption: Preemptions = Preemptions()
    # Reclaim time (sim.sharing): "all" and each lender that waited; empty where not
    # measured (per-pod has no quotas).
    reclaim_seconds: dict[str, Percentiles] = field(default_factory=dict)
    reclaim_waits: ReclaimWaits | None = None  # None where not measured
    shares: dict[str, ShareSeries] = field(default_factory=dict)  # cohort members
    # Queues of TeamQuotas with admission fair sharing ("ns/name"; sim.queueshare):
    # ``weight`` is the Queue's target part of its TeamQuota's usage.
    queue_shares: dict[str, ShareSeries] = field(default_factory=dict)
    topology: TopologyFigures | None = None  # None: no Queue uses a Topology
    reservation: ReservationFigures | None = None  # None: not a gang-fit run


@dataclass(frozen=True, slots=True)
class UpperBound:
    """The fluid bound: min(demand, capacity) over time, per GPU kind."""

    gpu_allocation: float
    gpu_allocation_saturated: float | None
    saturated_seconds: float  # how long the bound stayed at capacity
    series: Series


@dataclass(frozen=True, slots=True)
class SimulationReport:
    scenario: str
    seed: int
    policy_file: str
    capacity_gpus: float
    nodes: int
    jobs: int
    sources: dict[str, str]
    faults: dict[str, float]
    policies: dict[str, PolicyResult] = field(default_factory=dict)
    upper_bound: UpperBound | None = None
    preemption: str = "as-configured"  # as-configured | off | on | compare
    grace_period_seconds: float = 30.0  # of a preempted gang's pods
    dra: bool = False  # whole GPUs asked and offered through DRA (`simulate --dra`)
    reservation: str = "off"  # off | on | compare (`simulate --reservation`)
    reservation_after_seconds: int | None = None  # the Queues' afterSeconds, where on
    estimate_noise: float = 0.0  # of the runtime estimates (`simulate --estimate-noise`)
