"""Dynamic Resource Allocation objects (resource.k8s.io/v1, raw dicts) to the core's DRA types.

DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates are read
here and nowhere else.  A malformed object raises :class:`InputError` naming it
(``where``) and the exact field (``spec.devices.requests[0].exactly.count``).

CEL selectors are kept as text: whether one parses is the core's question
(core/devices/dracel.py), so that a gang whose template has a broken selector is
reported Invalid with its template named, instead of the template vanishing
from the cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queue_controller.core.model import (
    AllocatedDevice,
    ClaimTemplate,
    Device,
    DeviceClass,
    DeviceRequest,
    ResourceClaim,
    ResourceSlice,
)
from queue_controller.errors import InputError, InvalidSpecError, shown
from queue_controller.kube.fields import Obj, describe, get, objects, strings

__all__ = [
    "QUOTA_RESOURCE_ANNOTATION",
    "claim_template",
    "device_class",
    "device_requests",
    "resource_claim",
    "resource_slice",
]

# On a DeviceClass: the quota resource its devices count against (TeamQuota
# spec.resources); absent, the core decides (the class's own name).
QUOTA_RESOURCE_ANNOTATION = "queue-controller.io/quota-resource"

_MODES = ("ExactCount", "All")


def _named(obj: Obj) -> str:
    name = get(obj, "metadata.name", str, "")
    if not name:
        raise InputError("every object needs a name", field="metadata.name")
    return name


def _namespace(obj: Obj) -> str:
    return get(obj, "metadata.namespace", str, "") or "default"


def _required(obj: Obj, path: str) -> str:
    value = get(obj, path, str, "")
    if not value:
        raise InputError("is required", field=path)
    return value


def _selectors(obj: Obj, path: str) -> tuple[str, ...]:
    """``[{cel: {expression}}]`` at ``path``: the expressions, unparsed."""
    out: list[str] = []
    for i, item in enumerate(objects(obj, path)):
        try:
            out.append(_required(item, "cel.expression"))
        except InputError as error:
            raise error.located(field_prefix=f"{path}[{i}]") from None
    return tuple(out)


def _exact(obj: Obj, name: str) -> DeviceRequest:
    """An ``exactly`` request, or one ``firstAvailable`` alternative (same fields)."""
    device_class = _required(obj, "deviceClassName")
    mode = get(obj, "allocationMode", str, "ExactCount")
    if mode not in _MODES:
        raise InputError(f"{shown(mode)} is not one of {', '.join(_MODES)}", field="allocationMode")
    count = get(obj, "count", int, 1)
    if mode == "All" and "count" in obj and obj["count"] is not None:
        raise InputError("count is for allocationMode ExactCount only", field="count")
    if count < 1:
        raise InputError(f"must be at least 1, got {count}", field="count")
    return DeviceRequest(
        name=name,
        device_class=device_class,
        count=count,
        all_devices=mode == "All",
        selectors=_selectors(obj, "selectors"),
    )


def _request(obj: Obj) -> DeviceRequest:
    name = _required(obj, "name")
    exactly = get(obj, "exactly", dict, {})
    first = objects(obj, "firstAvailable")
    if bool(exactly) == bool(first):
        raise InputError(f"request {name!r} needs exactly one of exactly and firstAvailable")
    if exactly:
        try:
            return _exact(exactly, name)
        except InputError as error:
            raise error.located(field_prefix="exactly") from None
    alternatives: list[DeviceRequest] = []
    for i, item in enumerate(first):
        try:
            sub = _exact(item, _required(item, "name"))
            if any(a.name == sub.name for a in alternatives):
                raise InputError(f"the alternative {sub.name!r} is named twice", field="name")
        except InputError as error:
            raise error.located(field_prefix=f"firstAvailable[{i}]") from None
        alternatives.append(sub)
    return DeviceRequest(name=name, alternatives=tuple(alternatives))


def device_requests(spec: Obj, path: str) -> tuple[DeviceRequest, ...]:
    """The requests of a claim spec's ``devices.requests``; fields named from ``path``.

    ``spec`` is a ResourceClaimSpec (a claim's ``spec``, a template's
    ``spec.spec``) and ``path`` where it lies in its object.
    """
    out: list[DeviceRequest] = []
    for i, item in enumerate(objects(spec, "devices.requests")):
        where = f"devices.requests[{i}]"
        try:
            request = _request(item)
            if any(r.name == request.name for r in out):
                raise InputError(f"the request {request.name!r} is named twice", field="name")
        except InputError as error:
            raise error.located(field_prefix=f"{path}.{where}") from None
        out.append(request)
    return tuple(out)


def _located(error: InputError, obj: Obj) -> InputError:
    return error.located(where=error.where or describe(obj))


def device_class(obj: Obj) -> DeviceClass:
    """A DeviceClass: its selectors and the quota resource its devices count against."""
    try:
        return DeviceClass(
            name=_named(obj),
            selectors=_selectors(obj, "spec.selectors"),
            quota_resource=strings(obj, "metadata.annotations").get(QUOTA_RESOURCE_ANNOTATION, ""),
        )
    except InputError as error:
        raise _located(error, obj) from None


def _device(item: Obj, driver: str) -> Device:
    name = _required(item, "name")
    attributes: dict[str, Mapping[str, object]] = {}
    for key, raw in get(item, "attributes", dict, {}).items():
        if not isinstance(raw, Mapping):
            raise InputError(f"expected an object, got {shown(raw)}", field=f"attributes[{key}]")
        attributes[str(key)] = raw
    capacity: dict[str, Mapping[str, Any]] = {}
    for key, raw in get(item, "capacity", dict, {}).items():
        if not isinstance(raw, Mapping):
            raise InputError(f"expected an object, got {shown(raw)}", field=f"capacity[{key}]")
        capacity[str(key)] = raw
    shared = get(item, "allowMultipleAllocations", bool, False)
    try:
        return Device.from_slice(
            driver, name, attributes, capacity, allow_multiple_allocations=shared
        )
    except InvalidSpecError as error:
        # The core names the field "device 'gpu-0'.attributes[x]": ours is a path.
        rest = error.field.removeprefix(f"device {name!r}").lstrip(".")
        raise InputError(f"device {name!r}: {error.detail}", field=rest) from None


def resource_slice(obj: Obj) -> ResourceSlice:
    """A ResourceSlice; ``node`` is empty unless the slice is bound to one (``nodeName``)."""
    try:
        name = _named(obj)
        driver = _required(obj, "spec.driver")
        pool = _required(obj, "spec.pool.name")
        node = get(obj, "spec.nodeName", str, "")
        devices: list[Device] = []
        for i, item in enumerate(objects(obj, "spec.devices")):
            try:
                device = _device(item, driver)
                if any(d.name == device.name for d in devices):
                    raise InputError(f"the device {device.name!r} is listed twice", field="name")
            except InputError as error:
                raise error.located(field_prefix=f"spec.devices[{i}]") from None
            devices.append(device)
        return ResourceSlice(name, driver, pool, node, tuple(devices))
    except InputError as error:
        raise _located(error, obj) from None


def _allocated(obj: Obj) -> tuple[AllocatedDevice, ...]:
    path = "status.allocation.devices.results"
    out: list[AllocatedDevice] = []
    for i, item in enumerate(objects(obj, path)):
        try:
            out.append(
                AllocatedDevice(
                    request=_required(item, "request"),
                    driver=_required(item, "driver"),
                    pool=_required(item, "pool"),
                    device=_required(item, "device"),
                )
            )
        except InputError as error:
            raise error.located(field_prefix=f"{path}[{i}]") from None
    return tuple(out)


def _reserved_for(obj: Obj, namespace: str) -> tuple[str, ...]:
    """The pods (``namespace/name``) in ``status.reservedFor``; other consumers are left out."""
    path = "status.reservedFor"
    out: list[str] = []
    for i, item in enumerate(objects(obj, path)):
        try:
            resource = get(item, "resource", str, "")
            group = get(item, "apiGroup", str, "")
            if resource == "pods" and not group:
                out.append(f"{namespace}/{_required(item, 'name')}")
        except InputError as error:
            raise error.located(field_prefix=f"{path}[{i}]") from None
    return tuple(out)


def resource_claim(obj: Obj) -> ResourceClaim:
    """A ResourceClaim: its requests, the devices allocated to it, the pods it is reserved for."""
    try:
        namespace = _namespace(obj)
        return ResourceClaim(
            namespace=namespace,
            name=_named(obj),
            requests=device_requests(get(obj, "spec", dict, {}), "spec"),
            allocated=_allocated(obj),
            reserved_for=_reserved_for(obj, namespace),
        )
    except InputError as error:
        raise _located(error, obj) from None


def claim_template(obj: Obj) -> ClaimTemplate:
    """A ResourceClaimTemplate: the requests of the claim each pod naming it gets."""
    try:
        return ClaimTemplate(
            namespace=_namespace(obj),
            name=_named(obj),
            requests=device_requests(get(obj, "spec.spec", dict, {}), "spec.spec"),
        )
    except InputError as error:
        raise _located(error, obj) from None
