"""A cycle's DRA devices: what each node offers and holds, and what each member asks.

Built once per cycle from the snapshot's DeviceClasses, ResourceSlices,
ResourceClaims and ResourceClaimTemplates.  Each pod template's claims are
resolved to *entries* (one per device request) over *matchers* (a DeviceClass
and a request's selectors); once every gang of the cycle has been read, every
device is given its signature (the matchers it satisfies, decided by CEL,
cached per kind of device) and the entries become dimensions of the placer's
vectors (:mod:`.devicedims`).

Which devices a node offers: those of the ResourceSlices published for it
(``spec.nodeName``), less those an allocated claim holds, less GPUs its health
report took out of service.  Slices that are not bound to one node (network
devices) are not placed on.

Quota: a request's devices are charged, one unit each, to its DeviceClass's
``quota_resource`` (the ``queue-controller.io/quota-resource`` annotation), or
to the class's own name.  A claim named by ``resourceClaimName`` may be shared
by every member; it is charged once per gang.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import combinations

from queue_controller.core.devicedims import ONE, DeviceDims, DimKind
from queue_controller.core.dra import (
    ClaimTemplate,
    Device,
    DeviceRequest,
    ResourceClaim,
)
from queue_controller.core.dracel import DEFAULT_CACHE, SelectorCache
from queue_controller.core.model import BoundPod, Node, PodTemplate, Snapshot
from queue_controller.core.prepared import Usage
from queue_controller.core.requests import InvalidSpecError

# A pod whose requests compete for devices is checked per set of them (Hall's
# condition); beyond this many requests only pairs are.
_MAX_HALL_REQUESTS = 4


@dataclass(frozen=True, slots=True)
class Matcher:
    device_class: str
    selectors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Entry:
    """One device request of a pod, resolved: what it asks of which matchers."""

    kind: DimKind  # REQUEST (count), ALL or FIRST
    matchers: tuple[int, ...]
    counts: tuple[int, ...]  # devices per matcher (REQUEST: one; FIRST: per alternative)
    label: str  # for messages: which claim and request
    # (quota resource, devices) charged per member; None for a shared claim's
    # requests, which are charged once per gang instead.
    quota: tuple[str, int] | None


@dataclass(frozen=True, slots=True)
class PodAsk:
    """What one pod of a template asks through its claims."""

    entries: tuple[Entry, ...]
    # Claims named by resourceClaimName (shared): claim key -> its quota charges.
    shared: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodDevices:
    """A pod's devices as the placer and the quota ledger see them."""

    request: Mapping[str, int]  # derived dimension -> milli, per member
    labels: Mapping[str, str]  # dimension -> what to call it in a message
    quota: Mapping[str, int]  # quota resource -> milli, per member
    shared: Mapping[str, Mapping[str, int]]  # shared claim -> quota resource -> milli, once


class DeviceCatalog:
    def __init__(self, snapshot: Snapshot, cache: SelectorCache | None = None) -> None:
        self._cache = cache if cache is not None else DEFAULT_CACHE
        self._classes = {c.name: c for c in snapshot.device_classes}
        self._templates = {(t.namespace, t.name): t for t in snapshot.claim_templates}
        self._claims = {(c.namespace, c.name): c for c in snapshot.resource_claims}
        self._matchers: dict[Matcher, int] = {}
        self._asks: dict[tuple[PodTemplate, str], PodAsk] = {}
        self.dims: DeviceDims | None = None
        self._node_devices = _offered(snapshot)
        self._held = _held(snapshot)

    @staticmethod
    def wanted(snapshot: Snapshot) -> bool:
        """Whether the cycle has any DRA to read."""
        return bool(
            snapshot.resource_slices or snapshot.claim_templates or snapshot.resource_claims
        )

    # -- reading what pods ask -------------------------------------------------

    def ask(self, template: PodTemplate, namespace: str) -> PodAsk:
        """The devices one pod of ``template`` asks for; InvalidSpecError naming the claim."""
        key = (template, namespace)
        found = self._asks.get(key)
        if found is None:
            found = self._asks[key] = self._read(template, namespace)
        return found

    def _read(self, template: PodTemplate, namespace: str) -> PodAsk:
        entries: list[Entry] = []
        shared: dict[str, tuple[tuple[str, int], ...]] = {}
        for index, pod_claim in enumerate(template.resource_claims):
            where = f"resourceClaims[{index}]"
            if pod_claim.template_name:
                claim_template = self._templates.get((namespace, pod_claim.template_name))
                if claim_template is None:
                    raise InvalidSpecError(
                        f"ResourceClaimTemplate {namespace}/{pod_claim.template_name} does "
                        "not exist",
                        field=f"{where}.resourceClaimTemplateName",
                    )
                source = f"ResourceClaimTemplate {claim_template.name}"
                entries.extend(self._entries(claim_template, source, where))
                continue
            claim = self._claims.get((namespace, pod_claim.claim_name))
            if claim is None:
                raise InvalidSpecError(
                    f"ResourceClaim {namespace}/{pod_claim.claim_name} does not exist",
                    field=f"{where}.resourceClaimName",
                )
            source = f"ResourceClaim {claim.name}"
            claimed = self._entries(claim, source, where)
            shared[f"{namespace}/{claim.name}"] = tuple(e.quota for e in claimed if e.quota)
            # An allocated claim's devices are held already.  One that is not is
            # asked of every member's node.  The allocator puts it on the node of the
            # first member scheduled, so members that share it must share that node
            # too: that is for the gang to ask (a required hostname topology); the
            # README says so.
            if not claim.allocated:
                entries.extend(replace(e, quota=None) for e in claimed)
        return PodAsk(tuple(entries), shared)

    def _entries(
        self, claim: ClaimTemplate | ResourceClaim, source: str, where: str
    ) -> list[Entry]:
        out = []
        for request in claim.requests:
            label = f"request {request.name} of {source}"
            if request.alternatives:
                matchers = tuple(self._matcher(a, source, where) for a in request.alternatives)
                counts = []
                for alternative in request.alternatives:
                    if alternative.all_devices:
                        raise InvalidSpecError(
                            f"{source}: request {request.name}/{alternative.name} asks for all "
                            "devices within firstAvailable, which queue-controller cannot place",
                            field=where,
                        )
                    counts.append(alternative.count)
                first = request.alternatives[0]
                quota = (self._quota_resource(first.device_class), first.count)
                out.append(
                    Entry(DimKind.FIRST, matchers, tuple(counts), f"devices for {label}", quota)
                )
                continue
            matcher = self._matcher(request, source, where)
            quota = (self._quota_resource(request.device_class), request.count)
            if request.all_devices:
                label = f"all {request.device_class} devices for {label}"
                out.append(Entry(DimKind.ALL, (matcher,), (0,), label, quota))
            else:
                label = f"{request.device_class} devices for {label}"
                out.append(Entry(DimKind.REQUEST, (matcher,), (request.count,), label, quota))
        return out

    def _matcher(self, request: DeviceRequest, source: str, where: str) -> int:
        device_class = self._classes.get(request.device_class)
        if device_class is None:
            raise InvalidSpecError(
                f"{source}: request {request.name} names DeviceClass "
                f"{request.device_class!r}, which does not exist",
                field=where,
            )
        for owner, expressions in (
            (f"DeviceClass {device_class.name}", device_class.selectors),
            (f"{source}: request {request.name}", request.selectors),
        ):
            for expression in expressions:
                try:
                    self._cache.selector(expression)
                except InvalidSpecError as error:
                    raise InvalidSpecError(f"{owner}: {error.detail}", field=where) from None
        matcher = Matcher(request.device_class, request.selectors)
        return self._matchers.setdefault(matcher, len(self._matchers))

    def _quota_resource(self, class_name: str) -> str:
        device_class = self._classes.get(class_name)
        return (device_class.quota_resource if device_class else "") or class_name

    # -- once every pod has been read --------------------------------------------

    def settle(self) -> DeviceDims:
        """Give every device its signature; after this, asks become dimensions."""
        matchers = sorted(self._matchers.items(), key=lambda item: item[1])
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
            if all(self._cache.verdict(e, device, kind=kind).matches for e in exprs):
                matched.append(matcher)
        return frozenset(matched)

    def devices_of(self, ask: PodAsk) -> PodDevices:
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
            out.append(_offering(node, extra))
        return out


def _offering(node: Node, extra: Mapping[str, int]) -> Node:
    return Node(
        name=node.name,
        allocatable={**node.allocatable, **extra},
        labels=node.labels,
        taints=node.taints,
        unschedulable=node.unschedulable,
        conditions=node.conditions,
        capacity={**node.capacity, **extra} if node.capacity else {},
        gpu_health=node.gpu_health,
    )


def _summed(charges: Iterable[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for resource, devices in charges:
        out[resource] = out.get(resource, 0) + devices * ONE
    return out


def _offered(snapshot: Snapshot) -> dict[str, list[tuple[tuple[str, str], Device]]]:
    """Node -> its devices ((driver, pool), device), less GPUs reported unhealthy."""
    nodes = {node.name: node for node in snapshot.nodes}
    out: dict[str, list[tuple[tuple[str, str], Device]]] = {}
    for resource_slice in snapshot.resource_slices:
        node = nodes.get(resource_slice.node)
        if node is None:
            continue  # not bound to one node, or a node that is gone
        sick = _sick(node)
        for device in resource_slice.devices:
            if sick is not None and _is_sick(device, sick):
                continue
            out.setdefault(node.name, []).append(
                ((resource_slice.driver, resource_slice.pool), device)
            )
    return out


def _sick(node: Node) -> tuple[bool, frozenset[str], frozenset[int]] | None:
    health = node.gpu_health
    if health is None:
        return None
    return (
        health.whole_node,
        frozenset(g.uuid for g in health.unhealthy if g.uuid),
        frozenset(g.index for g in health.unhealthy),
    )


def _is_sick(device: Device, sick: tuple[bool, frozenset[str], frozenset[int]]) -> bool:
    whole, uuids, indexes = sick
    attributes = device.attributes.get(device.driver, {})
    uuid = attributes.get("uuid")
    if whole or (isinstance(uuid, str) and uuid in uuids):
        return True
    # A whole GPU by its index, when the report gave no UUID (a MIG device's index
    # is its parent's, and goes with it).
    parent = attributes.get("parentUUID")
    if isinstance(parent, str) and parent in uuids:
        return True
    index = attributes.get("parentIndex", attributes.get("index"))
    return isinstance(index, int) and not isinstance(index, bool) and index in indexes


def _held(snapshot: Snapshot) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) held by an allocated claim -> the node it is on."""
    where: dict[tuple[str, str], str] = {
        (s.driver, s.pool): s.node for s in snapshot.resource_slices if s.node
    }
    held: dict[tuple[str, str, str], str] = {}
    for claim in snapshot.resource_claims:
        for device in claim.allocated:
            node = where.get((device.driver, device.pool))
            if node:
                held[(device.driver, device.pool, device.device)] = node
    return held
