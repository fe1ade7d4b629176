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

Nominal quota is a guarantee: when a gang that fits within its quota's nominal
is refused because the cohort has lent that nominal out, what is still idle of
the quota's lendable nominal, up to what the gang needs, is *held* for it for
the rest of the cycle, and is not lent again (Kueue's
``reserveCapacityForUnreclaimablePreempt``).  Without
it, small borrowers would take every GPU the lender gets back, one at a time,
and the lender's gang could wait for good.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from queue_controller.core.model.objects import ResourceQuota, TeamQuota
from queue_controller.core.model.quantity import format_milli
from queue_controller.core.model.resources import Resources, scarcity_rank


@dataclass(frozen=True, slots=True)
class QuotaShortfall:
    quota: TeamQuota
    resource: str
    needed: int
    available: int
    used: int
    # Cohort members that borrow this resource, and how much: where its nominal went.
    lent_to: tuple[tuple[str, int], ...] = ()
    # Cohort members whose idle nominal is held this cycle for a gang of theirs.
    held_for: tuple[str, ...] = ()

    def describe(self) -> str:
        limits = self.quota.resources[self.resource]

        def q(milli: int) -> str:
            return format_milli(milli, self.resource)

        terms = [f"nominal {q(limits.nominal)}", f"{q(self.used)} in use"]
        if self.quota.cohort:
            borrow = "unlimited" if limits.borrowing_limit is None else q(limits.borrowing_limit)
            terms.append(f"borrowing limit {borrow} from cohort {self.quota.cohort}")
        message = (
            f"TeamQuota {self.quota.name}: {self.resource} needs {q(self.needed)}, "
            f"only {q(self.available)} available ({', '.join(terms)})"
        )
        idle = limits.nominal - self.used
        if self.lent_to and idle > self.available:
            borrowers = ", ".join(f"{name} ({q(amount)})" for name, amount in self.lent_to)
            message += f"; {q(idle - self.available)} of its nominal is lent to {borrowers}"
        if self.held_for:
            names = ", ".join(self.held_for)
            message += f"; idle nominal held this cycle for a gang of {names}, which fits it"
        return message


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
        # (cohort, resource) -> quota -> its idle lendable nominal, held for it this cycle
        self._held: dict[tuple[str, str], dict[str, int]] = {}
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

    def members(self, cohort: str) -> list[str]:
        """The quotas of ``cohort``, by name."""
        return sorted(name for name, quota in self._quotas.items() if quota.cohort == cohort)

    def quota(self, name: str) -> TeamQuota:
        return self._quotas[name]

    def used(self, name: str) -> Mapping[str, int]:
        return self._usage[name]

    def pool_size(self, cohort: str, resource: str) -> int:
        """All the cohort lends of ``resource``: its members' lendable nominal, summed."""
        pool = self._pools.get((cohort, resource))
        return 0 if pool is None else pool[0]

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
        pool = self.pool_left(quota.cohort, resource) - self._held_from(
            name, quota.cohort, resource
        )
        room = own + max(0, pool)
        if limits.borrowing_limit is not None:
            room = min(room, limits.nominal + limits.borrowing_limit - used)
        return max(0, room)

    def _held_from(self, name: str, cohort: str, resource: str) -> int:
        """What other members hold of the pool this cycle: not for ``name`` to take."""
        held = self._held.get((cohort, resource), {})
        return sum(amount for holder, amount in held.items() if holder != name)

    def within_nominal(self, name: str, need: Resources) -> bool:
        """Whether ``need`` fits in what is left of the quota's own nominal."""
        quota = self._quotas[name]
        usage = self._usage[name]
        return all(
            usage.get(resource, 0) + amount <= quota.resources[resource].nominal
            for resource, amount in need.items()
            if amount > 0 and resource in quota.resources
        )

    def hold_idle_nominal(self, name: str, need: Resources) -> None:
        """Keep idle nominal of ``name``, up to what ``need`` asks, from being lent this cycle.

        As Kueue reserves a blocked head's request: only what the gang needs is held
        (never more than what is idle of the quota's lendable nominal, nor than the
        pool has left), so the rest of the pool stays lendable.
        """
        quota = self._quotas[name]
        if not quota.cohort:
            return
        for resource, amount in need.items():
            limits = quota.resources.get(resource)
            if limits is None or amount <= 0:
                continue
            used = self._usage[name].get(resource, 0)
            idle = lendable(limits) - self._drawn(limits, used)
            free = min(amount, idle, self.pool_left(quota.cohort, resource))
            held = self._held.setdefault((quota.cohort, resource), {})
            if free > held.get(name, 0):
                held[name] = free

    def holders(self, name: str, resource: str) -> tuple[str, ...]:
        """Other members holding idle nominal of ``resource`` this cycle."""
        cohort = self._quotas[name].cohort
        held = self._held.get((cohort, resource), {})
        return tuple(sorted(holder for holder, amount in held.items() if holder != name and amount))

    def borrowers(self, name: str, resource: str) -> tuple[tuple[str, int], ...]:
        """Cohort members using more of ``resource`` than their nominal, with how much."""
        cohort = self._quotas[name].cohort
        if not cohort:
            return ()
        out = []
        for other in sorted(self._quotas.values(), key=lambda q: q.name):
            limits = other.resources.get(resource)
            if other.name == name or other.cohort != cohort or limits is None:
                continue
            over = self._usage[other.name].get(resource, 0) - limits.nominal
            if over > 0:
                out.append((other.name, over))
        return tuple(out)

    def shortfall(self, name: str, need: Resources) -> QuotaShortfall | None:
        """The first resource (scarcest first) that ``need`` would overrun, if any."""
        for resource in sorted(need, key=scarcity_rank):
            amount = need[resource]
            if amount <= 0:
                continue
            room = self.available(name, resource)
            if room is not None and amount > room:
                used = self._usage[name].get(resource, 0)
                return QuotaShortfall(
                    self._quotas[name],
                    resource,
                    amount,
                    room,
                    used,
                    lent_to=self.borrowers(name, resource),
                    held_for=self.holders(name, resource),
                )
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
                drawn = self._drawn(limits, before + amount) - self._drawn(limits, before)
                pool[1] += drawn
                held = self._held.get((quota.cohort, resource), {})
                if name in held:  # what it holds for itself it now uses
                    held[name] = max(0, held[name] - drawn)
