"""The effective resource request of a pod, and the rules for extended resources.

The arithmetic follows KEP-753 (sidecar containers) as implemented by
component-helpers ``PodRequests``: sidecars run alongside everything started
after them, so they are added to the running sum, while ordinary init
containers run one at a time before the app containers.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache

from queue_controller.core.model.objects import Container, PodTemplate
from queue_controller.core.model.quantity import QuantityInput, exact_and_milli
from queue_controller.core.model.resources import ONE, PODS, add, is_extended
from queue_controller.errors import InvalidSpecError, QuantityError, shown


def _parse_all(
    values: Mapping[str, QuantityInput], *, field: str
) -> dict[str, tuple[Fraction, int]]:
    """Each quantity as (exact amount, milli-units)."""
    parsed: dict[str, tuple[Fraction, int]] = {}
    for name, raw in values.items():
        try:
            amount = exact_and_milli(raw)
        except QuantityError as error:
            raise InvalidSpecError(error.detail, field=f"{field}[{name}]") from None
        if amount[0] < 0:
            raise InvalidSpecError(f"{shown(raw)} is negative", field=f"{field}[{name}]")
        parsed[name] = amount
    return parsed


def container_request(container: Container, *, field: str) -> dict[str, int]:
    """The container's requests in milli-units, after defaulting and validation.

    As in the API server, a resource given only under ``limits`` is requested
    at its limit.  Extended resources (GPUs, MIG slices) can never be
    overcommitted, so they must be whole numbers with requests equal to limits.
    """
    where = f"{field}[{container.name}].resources"
    requests = _parse_all(container.requests, field=f"{where}.requests")
    limits = _parse_all(container.limits, field=f"{where}.limits")
    for name, (amount, _) in requests.items():
        if not is_extended(name):
            continue
        if name not in limits:
            raise InvalidSpecError(
                f"container {container.name!r} requests {name} without a limit; "
                "extended resources need limits equal to requests",
                field=f"{where}.limits[{name}]",
            )
        if limits[name][0] != amount:
            raise InvalidSpecError(
                f"container {container.name!r} requests {_plain(amount)} {name} "
                f"but limits it to {_plain(limits[name][0])}; extended resources "
                "cannot be overcommitted, so requests must equal limits",
                field=f"{where}.requests[{name}]",
            )
    effective = {**limits, **requests}
    for name, (amount, _) in effective.items():
        if is_extended(name) and amount.denominator != 1:
            raise InvalidSpecError(
                f"container {container.name!r} asks for {_plain(amount)} {name}; "
                "extended resources must be whole numbers",
                field=f"{where}.limits[{name}]",
            )
    return {name: milli for name, (_, milli) in effective.items() if milli}


def _plain(amount: Fraction) -> str:
    return str(amount.numerator) if amount.denominator == 1 else f"{float(amount):g}"


def _elementwise_max(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    merged = dict(a)
    for name, amount in b.items():
        if amount > merged.get(name, 0):
            merged[name] = amount
    return merged


def pod_request(template: PodTemplate) -> dict[str, int]:
    """``max(sum(containers) + sidecars, max_i init_i) + overhead``, plus one pod slot.

    Raises :class:`InvalidSpecError` naming the container and resource when
    the template breaks a rule.
    """
    try:
        return dict(_cached_request(template))
    except TypeError:  # a value that cannot be hashed; it is reported while parsing
        return _pod_request(template)


# Every cycle asks again for the request of every pending gang, and parsing
# quantities exactly is the costliest step of a cycle; templates are immutable
# values, so the answer is remembered (errors are not: they are rare).
@lru_cache(maxsize=8192)
def _cached_request(template: PodTemplate) -> tuple[tuple[str, int], ...]:
    return tuple(_pod_request(template).items())


def _pod_request(template: PodTemplate) -> dict[str, int]:
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in template.init_containers:
        own = container_request(container, field="initContainers")
        if container.restart_policy == "Always":
            sidecars = add(sidecars, own)
            running = sidecars
        else:
            running = add(own, sidecars)
        init_peak = _elementwise_max(init_peak, running)
    app = add(*(container_request(c, field="containers") for c in template.containers))
    overhead = _parse_all(template.overhead, field="overhead")
    total = add(
        _elementwise_max(add(app, sidecars), init_peak),
        {name: milli for name, (_, milli) in overhead.items()},
    )
    # kube-scheduler also counts each pod against the node's "pods" allocatable.
    total[PODS] = total.get(PODS, 0) + ONE
    return total
