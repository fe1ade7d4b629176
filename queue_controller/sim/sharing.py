"""How a cohort's teams share it over a run: reclaim times and each team's share.

**Reclaim time** measures how long a lender waits for its nominal quota to come
back.  A pending gang is *reclaim-blocked* at an admission cycle when, on the
quota its team's admitted gangs are charged, the gang fits within what is left
of its team's own nominal (``QuotaLedger.within_nominal``) and the quota still
refuses it (``QuotaLedger.shortfall``): the rest of the cohort is using the
team's nominal, so the team has lent it out.  The clock starts at the first
cycle that finds the gang so (its arrival, or its requeue coming due, is seen
at the next cycle) and stops at the cycle that admits it, in the room its
preemption freed or in room given back as borrowers finish.  Each stop is one
sample, for the team and for all teams.

**Share** is Kueue's fair-sharing share of a cohort: for each resource, what a
team uses beyond its nominal over what the whole cohort can lend of it (the
sum of its members' lendable nominal), the largest of these over the team's
resources (its dominant share), divided by the team's weight.  0 while a team
stays within its nominal.  TeamQuota has no fair-sharing weight yet, so every
team weighs 1 (:data:`DEFAULT_WEIGHT`) until it does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from queue_controller.core import TeamQuota
from queue_controller.core.quota import QuotaLedger, lendable
from queue_controller.core.resources import scale
from queue_controller.sim.measure import percentiles
from queue_controller.sim.results import Percentiles, ShareSeries
from queue_controller.sim.runstate import JobState, Phase

DEFAULT_WEIGHT = 1.0
ALL_TEAMS = "all"


class ReclaimClock:
    def __init__(self, quotas: Sequence[TeamQuota]) -> None:
        self.in_cohort = {q.name for q in quotas if q.cohort}
        self.samples: list[tuple[str, float]] = []  # (team, seconds)

    def observe(self, pending: Iterable[JobState], ledger: QuotaLedger, now: float) -> None:
        """Start the clock of every pending gang that a cycle at ``now`` finds blocked."""
        blocked: dict[tuple[object, ...], bool] = {}  # gangs alike get the same answer
        for job in pending:
            if (
                job.blocked_since is not None
                or job.team not in self.in_cohort
                or not job.request
                or job.phase is not Phase.PENDING
                or (job.requeue_at is not None and job.requeue_at > now)
            ):
                continue
            key = (job.team, job.shape, job.pods)
            found = blocked.get(key)
            if found is None:
                need = scale(job.request, job.pods)
                found = blocked[key] = (
                    ledger.within_nominal(job.team, need)
                    and ledger.shortfall(job.team, need) is not None
                )
            if found:
                job.blocked_since = now

    def admitted(self, job: JobState, now: float) -> None:
        if job.blocked_since is not None:
            self.samples.append((job.team, now - job.blocked_since))
            job.blocked_since = None

    def result(self) -> dict[str, Percentiles]:
        """``all`` and each lender that waited at least once."""
        by_team: dict[str, list[float]] = defaultdict(list)
        for team, seconds in self.samples:
            by_team[team].append(seconds)
        out = {ALL_TEAMS: percentiles(seconds for _, seconds in self.samples)}
        out.update({team: percentiles(by_team[team]) for team in sorted(by_team)})
        return out


class ShareMeter:
    """Each cohort member's share (see the module) as a step function of time."""

    def __init__(self, quotas: Sequence[TeamQuota]) -> None:
        self.quotas = {q.name: q for q in quotas if q.cohort}
        self.pool: dict[tuple[str, str], int] = defaultdict(int)
        for quota in self.quotas.values():
            for resource, limits in quota.resources.items():
                self.pool[(quota.cohort, resource)] += lendable(limits)
        self.weight = dict.fromkeys(self.quotas, DEFAULT_WEIGHT)
        self.times: dict[str, list[float]] = {team: [0.0] for team in self.quotas}
        self.values: dict[str, list[float]] = {team: [0.0] for team in self.quotas}
        self.area: dict[str, float] = dict.fromkeys(self.quotas, 0.0)

    def share(self, team: str, used: Mapping[str, int]) -> float:
        quota = self.quotas[team]
        dominant = 0.0
        for resource, limits in quota.resources.items():
            pool = self.pool[(quota.cohort, resource)]
            over = used.get(resource, 0) - limits.nominal
            if pool > 0 and over > 0:
                dominant = max(dominant, over / pool)
        return dominant / self.weight[team]

    def sample(self, team: str, used: Mapping[str, int], now: float) -> None:
        """``team``'s usage changed at ``now``."""
        if team not in self.quotas:
            return
        value = self.share(team, used)
        times, values = self.times[team], self.values[team]
        if value == values[-1]:
            return
        self.area[team] += values[-1] * (now - times[-1])
        if times[-1] == now:
            values[-1] = value
        else:
            times.append(now)
            values.append(value)

    def result(self, end: float) -> dict[str, ShareSeries]:
        out = {}
        for team in sorted(self.quotas):
            times, values = self.times[team], self.values[team]
            area = self.area[team] + values[-1] * max(0.0, end - times[-1])
            out[team] = ShareSeries(
                weight=self.weight[team],
                mean=round(area / end, 4) if end > 0 else 0.0,
                peak=round(max(values), 4),
                times=tuple(times),
                values=tuple(values),
            )
        return out
