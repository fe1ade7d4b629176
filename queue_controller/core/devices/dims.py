"""DRA devices as dimensions of the placer's resource vectors.

Why dimensions: the placer (:mod:`..placement.fit`) counts members per node with one
integer division per resource, over classes and buckets of nodes.  DRA devices
are not a count, but within one cycle they can be made into counts without
losing exactness:

* Every device is reduced to its *signature*: the set of the cycle's matchers
  (a DeviceClass with a request's selectors) it satisfies.  Devices with one
  signature are interchangeable for every gang of the cycle, so each signature
  is one *base* dimension: how many such devices a node has free.
* What a member asks for is said in *derived* dimensions, each a function of
  the base ones, chosen so that ``min(floor(free / asked))`` over them is the
  number of members a node takes:

  - ``request-i``: free devices that match matcher ``i`` (an ``exactly`` request
    of ``count`` devices asks ``count`` of it);
  - ``requests-i-j-...``: free devices matching any of several matchers, asked
    the sum of their counts, for a pod whose requests compete for the same
    devices.  With one per set of competing requests this is Hall's condition,
    so several requests of one pod are checked exactly, as the allocator would
    find them;
  - ``all-i``: one unit while every device matching ``i`` on the node is free
    (``allocationMode: All``: at most one member per node);
  - ``first-j``: how many members the alternatives of a ``firstAvailable``
    request serve, each taking its first alternative that fits.

Committing a member takes base devices (the least versatile first, so devices
other requests could use stay free) and the derived dimensions are computed
again from what is left.  Amounts are in milli-units, 1000 per device, like
every other extended resource.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

DEVICE_DOMAIN = "dra.queue-controller.io/"
ONE = 1000
# A firstAvailable dimension counts members one by one; no node holds more.
_MAX_MEMBERS = 256


def is_device_dimension(name: str) -> bool:
    return name.startswith(DEVICE_DOMAIN)


class DimKind(StrEnum):
    REQUEST = "request"  # devices matching one matcher
    ANY_OF = "requests"  # devices matching any of several (Hall's condition)
    ALL = "all"  # every matching device, free
    FIRST = "first"  # members served by a firstAvailable list


@dataclass(frozen=True, slots=True)
class Derived:
    name: str
    kind: DimKind
    # REQUEST, ANY_OF, ALL: the matchers; FIRST: the alternatives' matchers, in order.
    matchers: tuple[int, ...]
    counts: tuple[int, ...] = ()  # FIRST: devices each alternative takes


class DeviceDims:
    """The cycle's device dimensions: one base per signature, derived ones on demand."""

    def __init__(self, signatures: Sequence[frozenset[int]]) -> None:
        self.signatures = tuple(signatures)
        self.base_names = tuple(f"{DEVICE_DOMAIN}devices-{k}" for k in range(len(signatures)))
        # Matcher -> the signatures that satisfy it, least versatile first: taking
        # those first leaves the devices that other matchers also want.
        self._holders: dict[int, tuple[int, ...]] = {}
        self.derived: dict[str, Derived] = {}

    def holders(self, matcher: int) -> tuple[int, ...]:
        found = self._holders.get(matcher)
        if found is None:
            found = tuple(
                sorted(
                    (k for k, sig in enumerate(self.signatures) if matcher in sig),
                    key=lambda k: (len(self.signatures[k]), k),
                )
            )
            self._holders[matcher] = found
        return found

    def overlapping(self, matchers: Sequence[int]) -> bool:
        """Whether some device satisfies two of ``matchers``."""
        return any(len(sig.intersection(matchers)) > 1 for sig in self.signatures)

    # -- naming the dimensions a member asks for ------------------------------

    def dimension(
        self, kind: DimKind, matchers: tuple[int, ...], counts: tuple[int, ...] = ()
    ) -> str:
        if kind is DimKind.FIRST:
            suffix = "-".join(f"{m}x{c}" for m, c in zip(matchers, counts, strict=True))
        else:
            suffix = "-".join(map(str, matchers))
        name = f"{DEVICE_DOMAIN}{kind.value}-{suffix}"
        if name not in self.derived:
            self.derived[name] = Derived(name, kind, matchers, counts)
        return name

    # -- values ----------------------------------------------------------------

    def value(self, name: str, free: Sequence[int], total: Sequence[int]) -> int:
        """A derived dimension from the base ones (``free``, ``total``: milli per signature)."""
        derived = self.derived[name]
        if derived.kind is DimKind.REQUEST:
            return sum(free[k] for k in self.holders(derived.matchers[0]))
        if derived.kind is DimKind.ANY_OF:
            wanted = set(derived.matchers)
            return sum(free[k] for k, sig in enumerate(self.signatures) if sig & wanted)
        if derived.kind is DimKind.ALL:
            ks = self.holders(derived.matchers[0])
            have = sum(free[k] for k in ks)
            return ONE if have and have == sum(total[k] for k in ks) else 0
        left = list(free)
        members = 0
        while members < _MAX_MEMBERS and self._take_first(derived, left):
            members += 1
        return members * ONE

    def take(self, free: list[int], totals: Mapping[str, int]) -> None:
        """Take, from ``free`` (milli per signature), the devices of some members.

        ``totals`` are their derived dimensions summed over the members, as the
        placer holds them: a REQUEST total is devices, an ALL or FIRST total is
        members (one unit each).  ANY_OF ones only check.  The placer has checked
        the members fit; if the greedy choice still runs short (competing requests
        of one pod, on a node of several kinds of device), what is missing is not
        taken.
        """
        for name, amount in totals.items():
            derived = self.derived[name]
            if derived.kind is DimKind.REQUEST:
                self._take_matching(free, derived.matchers[0], amount)
            elif derived.kind is DimKind.ALL and amount > 0:
                for k in self.holders(derived.matchers[0]):
                    free[k] = 0
            elif derived.kind is DimKind.FIRST:
                for _ in range(amount // ONE):
                    self._take_first(derived, free)

    def _take_matching(self, free: list[int], matcher: int, amount: int) -> None:
        for k in self.holders(matcher):
            if amount <= 0:
                return
            taken = min(free[k], amount)
            free[k] -= taken
            amount -= taken

    def _take_first(self, derived: Derived, free: list[int]) -> bool:
        for matcher, count in zip(derived.matchers, derived.counts, strict=True):
            if sum(free[k] for k in self.holders(matcher)) >= count * ONE:
                self._take_matching(free, matcher, count * ONE)
                return True
        return False


@dataclass(slots=True)
class BoundDims:
    """Device dimensions at their positions in one placer's vectors."""

    dims: DeviceDims
    base: tuple[int, ...]  # position of each signature's dimension
    derived: tuple[tuple[int, str], ...]  # (position, name) of each derived one present

    @classmethod
    def bind(cls, dims: DeviceDims, positions: Mapping[str, int]) -> BoundDims:
        return cls(
            dims,
            tuple(positions[name] for name in dims.base_names),
            tuple((positions[n], n) for n in dims.derived if n in positions),
        )

    def positions(self) -> frozenset[int]:
        return frozenset(self.base) | {i for i, _ in self.derived}

    def refreshed(self, vector: tuple[int, ...], total: Sequence[int]) -> tuple[int, ...]:
        if not any(total[i] for i in self.base):
            return vector
        out = list(vector)
        self.refresh(out, total)
        return tuple(out)

    def refresh(self, vector: list[int], total: Sequence[int]) -> None:
        """Recompute the derived dimensions of ``vector`` from its base ones."""
        free = [vector[i] for i in self.base]
        whole = [total[i] for i in self.base]
        for i, name in self.derived:
            vector[i] = self.dims.value(name, free, whole)

    def take(self, vector: list[int], totals: Mapping[str, int]) -> list[int]:
        """Take devices for ``totals`` (see DeviceDims.take) from ``vector``; returns
        what was taken, per base."""
        free = [vector[i] for i in self.base]
        before = list(free)
        self.dims.take(free, totals)
        for i, amount in zip(self.base, free, strict=True):
            vector[i] = amount
        return [b - a for b, a in zip(before, free, strict=True)]

    def give(self, vector: list[int], taken: Sequence[int]) -> None:
        for i, amount in zip(self.base, taken, strict=False):
            vector[i] += amount
