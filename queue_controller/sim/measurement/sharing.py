"""How a cohort's teams share it over a run: reclaim times and each team's share.

**Reclaim time** measures how long a lender waits for its nominal quota to come
back.  A pending gang is *reclaim-blocked* at an admission cycle when, on the
quota its team's admitted gangs are charged, the gang fits within what is left
of its team's own nominal (``QuotaLedger.within_nominal``) and the quota still
refuses it (``QuotaLedger.shortfall``): the rest of the cohort is using the
team's nominal, so the team has lent it out.  The clock starts at the first
cycle that finds the gang so (its arrival, or its requeue coming due, is seen
at the next cycle) and stops at the cycle that admits it.  Each stop is one
sample, for the team and for all teams.

That wait is split by what each cycle found the gang waiting for, until the
next cycle (:data:`PARTS`): *lent*, reclaim-blocked, or holding the room its
preemption nominated while its victims' pods go; *own*, refused on quota that
its own team's admitted gangs now fill (the cohort gave the nominal back; the
gang would have to borrow, as any gang beyond its nominal); *nodes*, the quota
has room but no node it may use does (its turn, or node room held by anyone).
The reclaim time is the *lent* part: the time the cohort kept the gang's
nominal.  The whole wait, and each part, are reported too
(:class:`~queue_controller.sim.measurement.results.ReclaimWaits`), so that a long wait is
not read as a slow reclaim.

**Share** is Kueue's fair-sharing share of a cohort: for each resource, what a
team uses beyond its nominal over what the whole cohort can lend of it (the
sum of its members' lendable nominal; in a cohort tree, what the team's cohort
could give it were nothing in use), the largest of these over the team's
resources (its dominant share), divided by the team's weight.  0 while a team
stays within its nominal.  The weight is the TeamQuota's
``spec.fairSharing.weight`` (1 unless set).  A team of weight 0 that borrows
has an infinite share to the core; it is drawn with its unweighted share.
Where a Cohort enables fair sharing the core orders the cohort's borrowers by
this share, so the teams' shares are drawn towards each other.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from queue_controller.core import Cohort, TeamQuota
from queue_controller.core.model import scale
from queue_controller.core.quota import QuotaLedger, QuotaTree
from queue_controller.sim.measurement.measure import HOUR, StepSeries, percentiles
from queue_controller.sim.measurement.results import Percentiles, ReclaimWaits, ShareSeries
from queue_controller.sim.world.runstate import JobState, Phase

ALL_TEAMS = "all"


LENT = "lent"  # the cohort uses the nominal the gang fits in (or its victims are going)
OWN = "own"  # its own team's gangs fill the nominal it needs: it waits as a borrower
NODES = "nodes"  # the quota has room: it waits for a node it may use, or its turn
PARTS = (LENT, OWN, NODES)


@dataclass(slots=True)
class _Wait:
    team: str
    state: str  # what the last cycle found it waiting for
    since: float  # that cycle
    parts: dict[str, float]  # part -> seconds so far


class ReclaimClock:
    def __init__(self, quotas: Sequence[TeamQuota]) -> None:
        self.in_cohort = {q.name for q in quotas if q.cohort}
        self.open: dict[str, _Wait] = {}  # gang -> its wait, from the first blocked cycle
        self.samples: list[tuple[str, dict[str, float]]] = []  # (team, part -> seconds)

    def observe(self, pending: Iterable[JobState], ledger: QuotaLedger, now: float) -> None:
        """Before a cycle at ``now``: start the clock of every pending gang it finds blocked."""
        blocked: dict[tuple[object, ...], bool] = {}  # gangs alike get the same answer
        for job in pending:
            if (
                job.key in self.open
                or job.team not in self.in_cohort
                or not job.request
                or not _eligible(job, now)
            ):
                continue
            key = (job.team, job.shape, job.pods)
            found = blocked.get(key)
            if found is None:
                found = blocked[key] = _waiting_for(job, ledger) == LENT
            if found:
                self.open[job.key] = _Wait(job.team, LENT, now, dict.fromkeys(PARTS, 0.0))

    def waiting(self, pending: Mapping[str, JobState], ledger: QuotaLedger, now: float) -> None:
        """After the cycle at ``now``, on the quota as it left it (``ledger``, with the
        room nominated gangs hold charged): what each gang whose clock runs and that
        it left pending waits for, until the next cycle."""
        found: dict[tuple[object, ...], str] = {}
        for key, wait in self.open.items():
            job = pending.get(key)
            if job is None or not _eligible(job, now):
                continue
            if job.nominated:
                state = LENT  # it preempted: its victims' pods are still going
            else:
                alike = (job.team, job.shape, job.pods)
                state = found.get(alike, "")
                if not state:
                    state = found[alike] = _waiting_for(job, ledger)
            if state != wait.state:
                wait.parts[wait.state] += now - wait.since
                wait.state, wait.since = state, now

    def admitted(self, job: JobState, now: float) -> None:
        wait = self.open.pop(job.key, None)
        if wait is not None:
            wait.parts[wait.state] += now - wait.since
            self.samples.append((wait.team, wait.parts))

    def result(self) -> dict[str, Percentiles]:
        """The reclaim time (the *lent* part): ``all`` and each lender that waited once."""
        by_team: dict[str, list[float]] = defaultdict(list)
        for team, parts in self.samples:
            by_team[team].append(parts[LENT])
        out = {ALL_TEAMS: percentiles(parts[LENT] for _, parts in self.samples)}
        out.update({team: percentiles(by_team[team]) for team in sorted(by_team)})
        return out

    def waits(self) -> ReclaimWaits:
        """Every blocked gang's whole wait, and its parts, over all lenders."""
        return ReclaimWaits(
            total=percentiles(sum(parts.values()) for _, parts in self.samples),
            parts={part: percentiles(p[part] for _, p in self.samples) for part in PARTS},
            hours={part: round(sum(p[part] for _, p in self.samples) / HOUR, 2) for part in PARTS},
        )


def _eligible(job: JobState, now: float) -> bool:
    return job.phase is Phase.PENDING and (job.requeue_at is None or job.requeue_at <= now)


def _waiting_for(job: JobState, ledger: QuotaLedger) -> str:
    need = scale(job.request, job.pods)
    if ledger.shortfall(job.team, need) is None:
        return NODES
    return LENT if ledger.within_nominal(job.team, need) else OWN


class ShareMeter:
    """Each cohort member's share (see the module) as a step function of time."""

    def __init__(self, quotas: Sequence[TeamQuota], cohorts: Sequence[Cohort] = ()) -> None:
        self.quotas = {q.name: q for q in quotas if q.cohort}
        # What each team's cohort could give it were nothing in use: in a flat cohort,
        # its members' lendable nominal; in a tree, Kueue's potentialAvailable.
        tree = QuotaTree(quotas, cohorts, {})
        self.pool: dict[tuple[str, str], int] = {}
        for quota in self.quotas.values():
            parent = tree.quotas[quota.name].parent
            assert parent is not None
            for resource in quota.resources:
                self.pool[(quota.name, resource)] = tree.potential(parent, resource)
        self.weight = {team: q.fair_weight / 1000 for team, q in self.quotas.items()}
        self.series = {team: StepSeries() for team in self.quotas}

    def share(self, team: str, used: Mapping[str, int]) -> float:
        quota = self.quotas[team]
        dominant = 0.0
        for resource, limits in quota.resources.items():
            pool = self.pool[(team, resource)]
            over = used.get(resource, 0) - limits.nominal
            if pool > 0 and over > 0:
                dominant = max(dominant, over / pool)
        weight = self.weight[team]
        return dominant / weight if weight > 0 else dominant

    def sample(self, team: str, used: Mapping[str, int], now: float) -> None:
        """``team``'s usage changed at ``now``."""
        if team not in self.quotas:
            return
        self.series[team].step(self.share(team, used), now)

    def result(self, end: float) -> dict[str, ShareSeries]:
        return {
            team: self.series[team].series(self.weight[team], end) for team in sorted(self.quotas)
        }
