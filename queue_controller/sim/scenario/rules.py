"""What a scenario fixes for the whole run, read once before it starts: the placer a
policy admits with, and which teams may preempt, be preempted, or share fairly."""

from __future__ import annotations

from collections.abc import Mapping

from queue_controller.core.model import BorrowPolicy, ReclaimPolicy
from queue_controller.core.placement import Placement
from queue_controller.core.quota import roots_of
from queue_controller.sim.scenario.spec import Scenario


class NeverRefuses:
    """quota-only's placer: admission looks at the quota and nothing else."""

    def __init__(self, *_: object) -> None:
        pass

    def try_place(self, shape: object, count: int) -> Placement:
        return Placement(nodes={})

    def commit(self, shape: object, placement: Placement) -> None:
        pass

    def release(self, shape: object, placement: Placement) -> None:
        pass

    def adjust(self, node: str, freed: Mapping[str, int]) -> None:
        pass

    def place_on(self, shape: object, nodes: Mapping[str, int]) -> Placement:
        return Placement(nodes=dict(nodes))

    def withhold(self, node: str) -> Mapping[str, int]:
        return {}


def preemption_teams(scenario: Scenario) -> tuple[frozenset[str], frozenset[str]]:
    """(TeamQuotas that may preempt, TeamQuotas whose gangs may be preempted).

    A quota with preemption on may take from its own gangs (withinTeamQuota) and,
    reclaiming or borrowing, from every quota of its cohort.
    """
    preempting = {q.name for q in scenario.quotas if q.preemption.enabled}
    victims = set(preempting)
    roots = roots_of(scenario.quotas, scenario.cohorts)
    for quota in scenario.quotas:
        policy = quota.preemption
        if (
            quota.name in preempting
            and quota.cohort
            and (
                policy.reclaim_within_cohort is not ReclaimPolicy.NEVER
                or policy.borrow_within_cohort is not BorrowPolicy.NEVER
            )
        ):
            victims.update(name for name, root in roots.items() if root == roots[quota.name])
    return frozenset(preempting), frozenset(victims)


def fair_sharing_teams(scenario: Scenario) -> frozenset[str]:
    """The TeamQuotas of cohort trees whose root Cohort object enables fair sharing."""
    fair = {c.name for c in scenario.cohorts if c.fair_sharing}
    roots = roots_of(scenario.quotas, scenario.cohorts)
    return frozenset(name for name, root in roots.items() if root in fair)


def admission_fair_teams(scenario: Scenario) -> frozenset[str]:
    """The TeamQuotas with admission fair sharing: their Queues take turns by usage."""
    return frozenset(q.name for q in scenario.quotas if q.admission_fair_sharing is not None)
