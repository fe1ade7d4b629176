"""Dynamic Resource Allocation (resource.k8s.io/v1) as the core sees it: devices, classes, requests.

A driver publishes its devices in ResourceSlices; a DeviceClass and each request
of a ResourceClaim pick devices with CEL selectors (evaluated in
:mod:`queue_controller.core.devices.dracel`).  Attribute and capacity names are held
qualified, split into (domain, name): a name without a domain belongs to the
driver's, as in Kubernetes, so ``productName`` of ``gpu.nvidia.com`` and
``gpu.nvidia.com/productName`` are one attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from queue_controller.core.model.kubecel import Semver
from queue_controller.core.model.quantity import QuantityInput, parse_milli
from queue_controller.errors import InvalidSpecError, QuantityError, shown


@dataclass(frozen=True)
class Version:
    """A ``version`` attribute (semver 2.0.0), kept apart from strings: CEL sees a semver."""

    text: str

    def __post_init__(self) -> None:
        try:
            Semver.parse(self.text)
        except ValueError as error:
            raise InvalidSpecError(str(error)) from None


AttrValue = bool | int | str | Version

# The ResourceSlice's one-of keys for an attribute's value.
_ATTRIBUTE_KINDS = ("bool", "int", "string", "version")


def qualify(driver: str, name: str) -> tuple[str, str]:
    """(domain, name) of an attribute or capacity name, the driver's domain when it has none."""
    domain, slash, rest = name.partition("/")
    return (domain, rest) if slash else (driver, name)


def _freeze(
    values: Mapping[str, Mapping[str, object]],
) -> tuple[tuple[str, tuple[tuple[str, object], ...]], ...]:
    return tuple(sorted((domain, tuple(sorted(inner.items()))) for domain, inner in values.items()))


@dataclass(frozen=True, eq=False)
class Device:
    """One device of a ResourceSlice: attributes and capacity by domain, then by name.

    Capacity is in milli-units.  Devices compare by identity; what a selector
    can see of them is :attr:`equivalence_key`.
    """

    driver: str
    name: str
    attributes: Mapping[str, Mapping[str, AttrValue]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    allow_multiple_allocations: bool = False

    @cached_property
    def equivalence_key(self) -> tuple[object, ...]:
        """Everything a selector can read: devices with equal keys match the same selectors.

        The name is not part of it (CEL cannot read it), so the 8 GPUs of a
        node, and the same GPUs on 1,000 nodes, share one key.  ``bool`` and
        ``int`` values carry their type so ``True`` and ``1`` stay apart.
        """
        typed = {
            domain: {name: (type(value).__name__, value) for name, value in inner.items()}
            for domain, inner in self.attributes.items()
        }
        return (
            self.driver,
            self.allow_multiple_allocations,
            _freeze(typed),
            _freeze(self.capacity),
        )

    def projected(self, names: frozenset[str] | None) -> tuple[object, ...]:
        """The equivalence key, keeping only attributes and capacities named in ``names``.

        A selector that reads only those names gives devices with equal projections
        the same verdict: a node's GPUs differ in ``uuid`` and ``index``, but a
        selector on ``productName`` cannot tell them apart.  None keeps everything.
        """
        if names is None:
            return self.equivalence_key
        # Kept per set of names: a cycle projects every device on one set, and the
        # next cycle, reading the same objects, on the same set again.
        cache: dict[frozenset[str], tuple[object, ...]] = self.__dict__.setdefault(
            "_projections", {}
        )
        found = cache.get(names)
        if found is not None:
            return found
        if len(cache) > 8:
            cache.clear()
        typed = {
            domain: {n: (type(v).__name__, v) for n, v in inner.items() if n in names}
            for domain, inner in self.attributes.items()
        }
        capacity = {
            domain: {n: v for n, v in inner.items() if n in names}
            for domain, inner in self.capacity.items()
        }
        key = (self.driver, self.allow_multiple_allocations, _freeze(typed), _freeze(capacity))
        cache[names] = key
        return key

    @classmethod
    def from_slice(
        cls,
        driver: str,
        name: str,
        attributes: Mapping[str, Mapping[str, object]],
        capacity: Mapping[str, Mapping[str, QuantityInput]],
        *,
        allow_multiple_allocations: bool = False,
    ) -> Device:
        """A device as a ResourceSlice spells it.

        ``attributes``: ``{productName: {string: H100}, index: {int: 0}}``;
        ``capacity``: ``{memory: {value: 80Gi}}``.
        """
        where = f"device {name!r}"
        attrs: dict[str, dict[str, AttrValue]] = {}
        for raw_name, raw in attributes.items():
            domain, short = qualify(driver, raw_name)
            attrs.setdefault(domain, {})[short] = _attribute(raw, f"{where}.attributes[{raw_name}]")
        caps: dict[str, dict[str, int]] = {}
        for raw_name, raw in capacity.items():
            domain, short = qualify(driver, raw_name)
            try:
                caps.setdefault(domain, {})[short] = parse_milli(raw["value"])
            except (KeyError, QuantityError) as error:
                detail = error.detail if isinstance(error, QuantityError) else "needs a value"
                raise InvalidSpecError(detail, field=f"{where}.capacity[{raw_name}]") from None
        return cls(driver, name, attrs, caps, allow_multiple_allocations)


def _attribute(raw: Mapping[str, object], field_name: str) -> AttrValue:
    kinds = [kind for kind in _ATTRIBUTE_KINDS if kind in raw]
    if len(kinds) != 1:
        raise InvalidSpecError(
            f"needs exactly one of {', '.join(_ATTRIBUTE_KINDS)}", field=field_name
        )
    kind = kinds[0]
    value = raw[kind]
    # bool is an int subclass: an int attribute of `true` is still wrong.
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "version" and isinstance(value, str):
        try:
            return Version(value)
        except InvalidSpecError as error:
            raise InvalidSpecError(error.detail, field=field_name) from None
    raise InvalidSpecError(f"{shown(value)} is not a {kind}", field=field_name)


@dataclass(frozen=True)
class DeviceClass:
    """A DeviceClass: the selectors every device it hands out must pass.

    ``quota_resource`` names the quota resource a device of this class counts
    against (empty: none yet).
    """

    name: str
    selectors: tuple[str, ...] = ()
    quota_resource: str = ""


@dataclass(frozen=True)
class DeviceRequest:
    """One request of a ResourceClaim: ``exactly`` (class, count, selectors) or ``firstAvailable``.

    ``all_devices`` is ``allocationMode: All`` (every matching device, at least
    one); otherwise ``count`` devices.  A request with ``alternatives`` is a
    ``firstAvailable`` list: its own class and selectors are unused, and the
    first alternative that can be satisfied wins.
    """

    name: str
    device_class: str = ""
    count: int = 1
    all_devices: bool = False
    selectors: tuple[str, ...] = ()
    alternatives: tuple[DeviceRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """A ResourceSlice: devices of one driver's pool, on one node.

    ``node`` is ``spec.nodeName``; empty for a slice that is not bound to one node
    (``allNodes`` or a ``nodeSelector``: network-attached devices), which
    placement does not use.
    """

    name: str
    driver: str
    pool: str
    node: str
    devices: tuple[Device, ...] = ()


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One result of a claim's ``status.allocation.devices.results``."""

    request: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    """A ResourceClaim: what it asks, and what the allocator gave it.

    ``reserved_for`` names the pods (``namespace/name``) in ``status.reservedFor``:
    the devices it holds are theirs, and so their gang's.
    """

    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...] = ()
    allocated: tuple[AllocatedDevice, ...] = ()
    reserved_for: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A ResourceClaimTemplate: each pod that names it gets a claim of these requests."""

    namespace: str
    name: str
    requests: tuple[DeviceRequest, ...] = ()
