"""Team quotas, and lending within a cohort.

Each TeamQuota ``q`` names some resources; a resource it does not name is not
limited by it.  For a named resource, with nominal ``N``, usage ``U``,
borrowing limit ``B`` and lending limit ``L`` (default: all of ``N``):

* ``N - L`` is guaranteed to ``q`` and can never be lent;
* the cohort shares a pool of ``sum(L)`` over its members;
* each member's usage above its guarantee, ``max(0, U - (N - L))``, is drawn
  from that pool, so the pool can never be overdrawn; and
* a member never holds more than ``N + B`` in total.

This is the same accounting Kueue uses for ``lendingLimit``: unused nominal is
lent, but never more of it than the lender's ``lendingLimit`` allows.  A quota
without a cohort simply stops at ``N``.  Admissions are reserved in the ledger
as the cycle goes, so gangs admitted earlier in a cycle count against later ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from queue_controller.core.model import ResourceQuota, TeamQuota
from queue_controller.core.quantity import format_milli
from queue_controller.core.resources import Resources, scarcity_rank


@dataclass(frozen=True, slots=True)
class QuotaShortfall:
    quota: TeamQuota
    resource: str
    needed: int
    available: int
    used: int

    def describe(self) -> str:
        limits = self.quota.resources[self.resource]

        def q(milli: int) -> str:
            return format_milli(milli, self.resource)

        terms = [f"nominal {q(limits.nominal)}", f"{q(self.used)} in use"]
        if self.quota.cohort:
            borrow = "unlimited" if limits.borrowing_limit is None else q(limits.borrowing_limit)
            terms.append(f"borrowing limit {borrow} from cohort {self.quota.cohort}")
        return (
            f"TeamQuota {self.quota.name}: {self.resource} needs {q(self.needed)}, "
            f"only {q(self.available)} available ({', '.join(terms)})"
        )


def guaranteed(limits: ResourceQuota) -> int:
    """The part of the nominal quota that is never lent."""
    if limits.lending_limit is None:
        return 0
    return max(0, limits.nominal - limits.lending_limit)


def lendable(limits: ResourceQuota) -> int:
    return limits.nominal - guaranteed(limits)


class QuotaLedger:
    """Usage per quota, with cohort pools kept up to date as admissions are reserved."""

    def __init__(self, quotas: Iterable[TeamQuota], usage: Mapping[str, Resources]) -> None:
        self._quotas = {quota.name: quota for quota in quotas}
        self._usage: dict[str, dict[str, int]] = {
            name: dict(usage.get(name, {})) for name in self._quotas
        }
        # (cohort, resource) -> [pool size, pool used]
        self._pools: dict[tuple[str, str], list[int]] = {}
        for quota in self._quotas.values():
            if not quota.cohort:
                continue
            for resource, limits in quota.resources.items():
                pool = self._pools.setdefault((quota.cohort, resource), [0, 0])
                pool[0] += lendable(limits)
                pool[1] += self._drawn(limits, self._usage[quota.name].get(resource, 0))

    @staticmethod
    def _drawn(limits: ResourceQuota, used: int) -> int:
        return max(0, used - guaranteed(limits))

    def __contains__(self, name: str) -> bool:
        return name in self._quotas

    def quota(self, name: str) -> TeamQuota:
        return self._quotas[name]

    def used(self, name: str) -> Mapping[str, int]:
        return self._usage[name]

    def pool_left(self, cohort: str, resource: str) -> int:
        size, drawn = self._pools[(cohort, resource)]
        return size - drawn

    def available(self, name: str, resource: str) -> int | None:
        """How much more of ``resource`` quota ``name`` may take now; None if unlimited."""
        quota = self._quotas[name]
        limits = quota.resources.get(resource)
        if limits is None:
            return None
        used = self._usage[name].get(resource, 0)
        if not quota.cohort:
            return max(0, limits.nominal - used)
        own = max(0, guaranteed(limits) - used)
        room = own + max(0, self.pool_left(quota.cohort, resource))
        if limits.borrowing_limit is not None:
            room = min(room, limits.nominal + limits.borrowing_limit - used)
        return max(0, room)

    def shortfall(self, name: str, need: Resources) -> QuotaShortfall | None:
        """The first resource (scarcest first) that ``need`` would overrun, if any."""
        for resource in sorted(need, key=scarcity_rank):
            amount = need[resource]
            if amount <= 0:
                continue
            room = self.available(name, resource)
            if room is not None and amount > room:
                used = self._usage[name].get(resource, 0)
                return QuotaShortfall(self._quotas[name], resource, amount, room, used)
        return None

    def reserve(self, name: str, need: Resources) -> None:
        quota = self._quotas[name]
        usage = self._usage[name]
        for resource, amount in need.items():
            before = usage.get(resource, 0)
            usage[resource] = before + amount
            limits = quota.resources.get(resource)
            if quota.cohort and limits is not None:
                pool = self._pools[(quota.cohort, resource)]
                pool[1] += self._drawn(limits, before + amount) - self._drawn(limits, before)
