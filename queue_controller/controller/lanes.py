"""Writes in lanes: each gang's actions in their planned order, different gangs at once.

An admission is several writes in an order that matters for restarts (the PodGroup's
status before the kind's release; see apply.py), but one gang's writes have nothing to
do with another's.  One at a time, a cycle that admitted 200 gangs sent ~1,000 writes
end to end, while the members of gangs admitted earlier waited for the next cycle
(issue 16).  So the actions are split into lanes, one per gang (or per object written,
for actions about no gang), and the lanes run at once, ``at_once`` of them at a time.

Lanes that let members run (an admission, a release, a member sent to its node, an
eviction that frees room) start before the rest (pending reasons, Queue and TeamQuota
status): at 1,000 nodes a cycle writes up to 200 pending reasons, and behind them the
members of the gangs it admitted waited seconds for their turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from queue_controller.controller import actions as act

__all__ = ["lanes", "run_in_lanes"]


def _lane(action: act.Action) -> tuple[str, ...]:
    """What an action must stay in order with: the other actions of its gang (which
    share its subject), else the object it writes; a member's release is its own lane."""
    if isinstance(action, act.BindMember):
        return ("Pod", action.pod.ref.namespace, action.pod.ref.name)
    if isinstance(action, act.QueueStatus):
        return ("Queue", action.queue.namespace, action.queue.name)
    if isinstance(action, act.TeamQuotaStatus):
        return ("TeamQuota", action.quota.name)
    if isinstance(action, act.CohortStatus):
        return ("Cohort", action.cohort.name)
    if isinstance(action, act.DeleteOrphan):
        return ("PodGroup", action.group_ref.namespace, action.group_ref.name)
    if isinstance(action, act.WarnLeftOut):
        return (action.about.resource.kind, action.about.namespace, action.about.name)
    who = action.subject
    return ("gang", who.kind, who.namespace, who.name)


_URGENT = (act.BindMember, act.Admit, act.ResumeAdmission, act.Evict, act.HoldUnadmitted)


def _urgent(lane: list[act.Action]) -> bool:
    return any(isinstance(action, _URGENT) for action in lane)


def lanes(actions: list[act.Action]) -> list[list[act.Action]]:
    """The actions split into lanes, each in its planned order: the urgent lanes first,
    then the others, each group by first action."""
    split: dict[tuple[str, ...], list[act.Action]] = {}
    for action in actions:
        split.setdefault(_lane(action), []).append(action)
    return sorted(split.values(), key=lambda lane: not _urgent(lane))


async def run_in_lanes(
    actions: list[act.Action], apply_one: Callable[[act.Action], Awaitable[int]], *, at_once: int
) -> int:
    """``apply_one`` every action, lane by lane; the sum of what it returned (failures)."""
    room = asyncio.Semaphore(at_once)

    async def in_order(lane: list[act.Action]) -> int:
        async with room:
            return sum([await apply_one(action) for action in lane])

    return sum(await asyncio.gather(*(in_order(lane) for lane in lanes(actions))))
