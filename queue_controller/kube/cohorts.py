"""Cohort trees as read from the cluster: cycles in ``spec.parentName`` refused.

The API server refuses a Cohort that names itself as its parent (a CEL rule
can say that much); a longer cycle only shows once every Cohort is read, so it
is refused here, naming the cycle.  Every Cohort in the cycle, or below it,
and every TeamQuota whose cohort is, is left out of the cycle: as in Kueue,
where ClusterQueues of a cohort tree with a cycle admit nothing, their gangs
wait, ``TeamQuotaInvalid``, naming the cycle.  The rest of the cluster goes on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from queue_controller.core.model import Cohort, TeamQuota
from queue_controller.core.quota import cycles
from queue_controller.errors import InputError
from queue_controller.kube.views import Ref


@dataclass(frozen=True, slots=True)
class CohortView:
    model: Cohort
    ref: Ref
    status: dict[str, object]


def in_cycles(
    cohorts: Iterable[Cohort], quotas: Iterable[TeamQuota]
) -> dict[tuple[str, str], tuple[str, ...]]:
    """(kind, name) -> the cycle it hangs from: each Cohort in or below a cycle, and
    each TeamQuota whose cohort is."""
    cohorts = list(cohorts)
    loops = {name: loop for loop in cycles(cohorts) for name in loop}
    if not loops:
        return {}
    parent = {c.name: c.parent for c in cohorts}

    def loop_of(cohort: str) -> tuple[str, ...] | None:
        seen: set[str] = set()
        while cohort and cohort not in seen:
            if cohort in loops:
                return loops[cohort]
            seen.add(cohort)
            cohort = parent.get(cohort, "")
        return None

    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for c in cohorts:
        if (loop := loop_of(c.name)) is not None:
            out[("Cohort", c.name)] = loop
    for q in quotas:
        if q.cohort and (loop := loop_of(q.cohort)) is not None:
            out[("TeamQuota", q.name)] = loop
    return out


def cycle_error(kind: str, loop: tuple[str, ...], *, where: str) -> InputError:
    """Why an object :func:`in_cycles` names is left out, naming the cycle."""
    around = " -> ".join((*loop, loop[0]))
    if kind == "Cohort":
        return InputError(
            f"cohort parents make a cycle: {around}", where=where, field="spec.parentName"
        )
    return InputError(f"its cohort tree has a cycle: {around}", where=where, field="spec.cohort")
