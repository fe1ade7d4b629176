"""A cycle's DRA devices: each signed by the matchers it satisfies, and held where.

Built once per cycle from the snapshot's DeviceClasses, ResourceSlices,
ResourceClaims and ResourceClaimTemplates.  Each pod's claims are read into
entries over matchers (:mod:`..devices.asks`); once every gang of the cycle has
been read, every device a node offers (:mod:`..devices.offers`) is given its
signature (the matchers it satisfies, decided by CEL, cached per kind of
device) and the entries become dimensions of the placer's vectors
(:mod:`..devices.dims`).

Quota: a request's devices are charged, one unit each, to its DeviceClass's
``quota_resource`` (the ``queue-controller.io/quota-resource`` annotation), or
to the class's own name.  A claim named by ``resourceClaimName`` may be shared
by every member; it is charged once per gang.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations

from queue_controller.core.devices.asks import ClaimReader, PodAsk
from queue_controller.core.devices.dims import ONE, DeviceDims, DimKind
from queue_controller.core.devices.dracel import DEFAULT_CACHE, SelectorCache
from queue_controller.core.devices.offers import held, offered, offering
from queue_controller.core.model.dra import (
    Device,
)
from queue_controller.core.model.objects import BoundPod, Node, PodClaim, Snapshot
from queue_controller.core.rules.prepared import Usage
from queue_controller.errors import InvalidSpecError

# A pod whose requests compete for devices is checked per set of them (Hall's
# condition); beyond this many requests only pairs are.
_MAX_HALL_REQUESTS = 4


@dataclass(frozen=True, slots=True)
class PodDevices:
    """A pod's devices as the placer and the quota ledger see them."""

    request: Mapping[str, int]  # derived dimension -> milli, per member
    labels: Mapping[str, str]  # dimension -> what to call it in a message
    quota: Mapping[str, int]  # quota resource -> milli, per member
    shared: Mapping[str, Mapping[str, int]]  # shared claim -> quota resource -> milli, once


class DeviceCatalog:
    """One cycle's DRA: read the asks, then :meth:`settle`, then turn them into dimensions."""

    def __init__(self, snapshot: Snapshot, cache: SelectorCache | None = None) -> None:
        self._cache = cache if cache is not None else DEFAULT_CACHE
        self._classes = {c.name: c for c in snapshot.device_classes}
        self._claims = {(c.namespace, c.name): c for c in snapshot.resource_claims}
        templates = {(t.namespace, t.name): t for t in snapshot.claim_templates}
        self._reader = ClaimReader(self._classes, templates, self._claims, self._cache)
        # By the identity of an ask (the reader's memo keeps each alive).
        self._devices_of: dict[int, PodDevices] = {}
        self.dims: DeviceDims | None = None
        # matcher -> (the selector, why it cannot be run): one whose result is not
        # a bool.  Only running it shows that; the gangs that ask for it are
        # invalid, and the rest of the cycle goes on (:meth:`fault`).
        self.broken: dict[int, tuple[str, str]] = {}
        self._node_devices = offered(snapshot)
        self._held = held(snapshot)

    @staticmethod
    def wanted(snapshot: Snapshot) -> bool:
        """Whether the cycle has any DRA to read."""
        return bool(
            snapshot.resource_slices or snapshot.claim_templates or snapshot.resource_claims
        )

    # -- reading what pods ask -------------------------------------------------

    def ask(self, claims: tuple[PodClaim, ...], namespace: str) -> PodAsk:
        """The devices one pod with ``claims`` (its spec.resourceClaims) asks for.

        InvalidSpecError, naming the claim, when one cannot be read.
        """
        return self._reader.ask(claims, namespace)

    # -- once every pod has been read --------------------------------------------

    def settle(self) -> DeviceDims:
        """Give every device its signature; after this, asks become dimensions."""
        matchers = sorted(self._reader.matchers.items(), key=lambda item: item[1])
        self._matchers = [m for m, _ in matchers]
        expressions = [
            (*self._classes[m.device_class].selectors, *m.selectors) for m, _ in matchers
        ]
        reads: set[str] | None = set()
        for exprs in expressions:
            for expression in exprs:
                names = self._cache.selector(expression).reads
                if names is None or reads is None:
                    reads = None
                else:
                    reads.update(names)
        names = frozenset(reads) if reads is not None else None
        by_kind: dict[tuple[object, ...], frozenset[int]] = {}
        signatures: dict[frozenset[int], int] = {}
        # node -> signature -> devices offered
        self._total: dict[str, dict[int, int]] = {}
        self._signature_of: dict[tuple[str, str, str], int] = {}
        k: int | None
        for node, devices in self._node_devices.items():
            for (driver, pool), device in devices:
                kind = device.projected(names)
                signature = by_kind.get(kind)
                if signature is None:
                    signature = by_kind[kind] = self._signature(device, kind, expressions)
                if not signature:
                    continue
                k = signatures.setdefault(signature, len(signatures))
                self._signature_of[(driver, pool, device.name)] = k
                self._total.setdefault(node, {}).setdefault(k, 0)
                self._total[node][k] += ONE
        # node -> signature -> devices allocated claims hold there
        self._claimed: dict[str, dict[int, int]] = {}
        for key, node in self._held.items():
            k = self._signature_of.get(key)
            if k is not None:
                on_node = self._claimed.setdefault(node, {})
                on_node[k] = on_node.get(k, 0) + ONE
        self.dims = DeviceDims(sorted(signatures, key=signatures.__getitem__))
        return self.dims

    def _signature(
        self, device: Device, kind: tuple[object, ...], expressions: list[tuple[str, ...]]
    ) -> frozenset[int]:
        matched = []
        for matcher, exprs in enumerate(expressions):
            if matcher in self.broken:
                continue
            for expression in exprs:  # Kubernetes' order; the first refusal ends it
                try:
                    verdict = self._cache.verdict(expression, device, kind=kind)
                except InvalidSpecError as error:
                    self.broken[matcher] = (expression, error.detail)
                    break
                if not verdict.matches:
                    break
            else:
                matched.append(matcher)
        return frozenset(matched)

    def fault(self, ask: PodAsk) -> InvalidSpecError | None:
        """Why the ask cannot be placed at all (a selector of it is broken), naming the claim."""
        for entry in ask.entries:
            for matcher in entry.matchers:
                if matcher not in self.broken:
                    continue
                expression, detail = self.broken[matcher]
                owner = self._matchers[matcher]
                if expression not in owner.selectors:
                    detail = f"DeviceClass {owner.device_class}: {detail}"
                return InvalidSpecError(f"{entry.label}: {detail}", field=entry.where)
        return None

    def devices_of(self, ask: PodAsk) -> PodDevices:
        """The ask as dimensions and quota charges; asks are few, gangs many."""
        found = self._devices_of.get(id(ask))
        if found is None:
            found = self._devices_of[id(ask)] = self._dimensions(ask)
        return found

    def _dimensions(self, ask: PodAsk) -> PodDevices:
        dims = self.dims
        assert dims is not None, "settle() first"
        request: dict[str, int] = {}
        labels: dict[str, str] = {}
        quota: dict[str, int] = {}
        counted: list[tuple[int, int, str]] = []
        for entry in ask.entries:
            if entry.quota is not None:
                resource, devices = entry.quota
                if entry.kind is DimKind.ALL:
                    devices = self._most_matching(entry.matchers[0])
                quota[resource] = quota.get(resource, 0) + devices * ONE
            if entry.kind is DimKind.REQUEST:
                counted.append((entry.matchers[0], entry.counts[0], entry.label))
                continue
            counts = entry.counts if entry.kind is DimKind.FIRST else ()
            name = dims.dimension(entry.kind, entry.matchers, counts)
            request[name] = request.get(name, 0) + ONE
            labels.setdefault(name, entry.label)
        for matcher, count, label in counted:
            name = dims.dimension(DimKind.REQUEST, (matcher,))
            request[name] = request.get(name, 0) + count * ONE
            labels.setdefault(name, label)
        self._competing(dims, counted, request, labels)
        shared = {key: _summed(charges) for key, charges in ask.shared.items() if charges}
        return PodDevices(request, labels, quota, shared)

    @staticmethod
    def _competing(
        dims: DeviceDims,
        counted: list[tuple[int, int, str]],
        request: dict[str, int],
        labels: dict[str, str],
    ) -> None:
        """Hall's condition for a pod's requests that want the same devices."""
        amounts: dict[int, int] = {}
        names: dict[int, str] = {}
        for matcher, count, label in counted:
            amounts[matcher] = amounts.get(matcher, 0) + count * ONE
            names.setdefault(matcher, label)
        matchers = sorted(amounts)
        if len(matchers) < 2:
            return
        largest = len(matchers) if len(matchers) <= _MAX_HALL_REQUESTS else 2
        for size in range(2, largest + 1):
            for group in combinations(matchers, size):
                if not dims.overlapping(group):
                    continue
                name = dims.dimension(DimKind.ANY_OF, group)
                request[name] = sum(amounts[m] for m in group)
                labels[name] = "devices wanted by both " + " and ".join(names[m] for m in group)

    def _most_matching(self, matcher: int) -> int:
        dims = self.dims
        assert dims is not None
        holders = dims.holders(matcher)
        return max(
            (sum(total.get(k, 0) for k in holders) // ONE for total in self._total.values()),
            default=0,
        )

    # -- what nodes offer and hold ---------------------------------------------

    def node_dims(self, node: str) -> tuple[list[int], list[int]]:
        """(free, offered) milli per signature on ``node``, before this cycle's plans."""
        dims = self.dims
        assert dims is not None
        total = [0] * len(dims.signatures)
        for k, amount in self._total.get(node, {}).items():
            total[k] = amount
        free = list(total)
        for k, amount in self._claimed.get(node, {}).items():
            free[k] -= amount
        return free, total

    def claim_usage(self, pods: Iterable[BoundPod]) -> tuple[Usage, dict[str, Usage]]:
        """Devices allocated claims hold: by node, and by the workload of the pods they serve."""
        dims = self.dims
        assert dims is not None
        owner = {f"{p.namespace}/{p.name}": p.workload for p in pods if p.workload}
        used: Usage = {}
        held: dict[str, Usage] = {}
        for claim in self._claims.values():
            workload = next((owner[pod] for pod in claim.reserved_for if pod in owner), "")
            for device in claim.allocated:
                key = (device.driver, device.pool, device.device)
                k = self._signature_of.get(key)
                node = self._held.get(key)
                if k is None or node is None:
                    continue
                name = dims.base_names[k]
                node_used = used.setdefault(node, {})
                node_used[name] = node_used.get(name, 0) + ONE
                if workload:
                    mine = held.setdefault(workload, {}).setdefault(node, {})
                    mine[name] = mine.get(name, 0) + ONE
        return used, held

    def with_devices(self, nodes: Iterable[Node]) -> list[Node]:
        """The nodes, each offering its devices as base and derived dimensions."""
        dims = self.dims
        assert dims is not None
        out = []
        for node in nodes:
            offered = self._total.get(node.name)
            if not offered:
                out.append(node)
                continue
            _, total = self.node_dims(node.name)
            extra = {name: total[k] for k, name in enumerate(dims.base_names) if total[k]}
            for name in dims.derived:
                extra[name] = dims.value(name, total, total)
            out.append(offering(node, extra))
        return out


def _summed(charges: Iterable[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for resource, devices in charges:
        out[resource] = out.get(resource, 0) + devices * ONE
    return out
