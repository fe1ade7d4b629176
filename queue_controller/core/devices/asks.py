"""What pods ask of DRA: each pod's claims read once into entries over matchers.

A *matcher* is a DeviceClass with one request's selectors: devices that pass
both.  Every distinct one the cycle meets gets a number, and each of a pod's
device requests becomes an *entry* over them (see :mod:`.dims` for what
an entry asks of a node).  A claim that cannot be read (an unknown template,
claim or class; a selector that does not compile) is an InvalidSpecError
naming the claim and the expression.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from queue_controller.core.devices.dims import DimKind
from queue_controller.core.devices.dracel import SelectorCache
from queue_controller.core.model.dra import ClaimTemplate, DeviceClass, DeviceRequest, ResourceClaim
from queue_controller.core.model.objects import PodClaim
from queue_controller.errors import InvalidSpecError


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
    where: str  # the pod's field that names the claim: resourceClaims[i]
    # (quota resource, devices) charged per member; None for a shared claim's
    # requests, which are charged once per gang instead.
    quota: tuple[str, int] | None


@dataclass(frozen=True, slots=True)
class PodAsk:
    """What one pod of a template asks through its claims."""

    entries: tuple[Entry, ...]
    # Claims named by resourceClaimName (shared): claim key -> its quota charges.
    shared: Mapping[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)


class ClaimReader:
    """Reads pods' claims against the cycle's classes, templates and claims."""

    def __init__(
        self,
        classes: Mapping[str, DeviceClass],
        templates: Mapping[tuple[str, str], ClaimTemplate],
        claims: Mapping[tuple[str, str], ResourceClaim],
        cache: SelectorCache,
    ) -> None:
        self._classes = classes
        self._templates = templates
        self._claims = claims
        self._cache = cache
        self.matchers: dict[Matcher, int] = {}
        self._asks: dict[tuple[tuple[PodClaim, ...], str], PodAsk] = {}

    def ask(self, claims: tuple[PodClaim, ...], namespace: str) -> PodAsk:
        """The devices one pod with ``claims`` (its spec.resourceClaims) asks for.

        InvalidSpecError, naming the claim, when one cannot be read.
        """
        key = (claims, namespace)
        found = self._asks.get(key)
        if found is None:
            found = self._asks[key] = self._read(claims, namespace)
        return found

    def _read(self, claims: tuple[PodClaim, ...], namespace: str) -> PodAsk:
        entries: list[Entry] = []
        shared: dict[str, tuple[tuple[str, int], ...]] = {}
        for index, pod_claim in enumerate(claims):
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
            # DRA page of the docs (docs/dra.md) says so.
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
                quota = (self.quota_resource(first.device_class), first.count)
                out.append(
                    Entry(
                        DimKind.FIRST, matchers, tuple(counts), f"devices for {label}", where, quota
                    )
                )
                continue
            matcher = self._matcher(request, source, where)
            quota = (self.quota_resource(request.device_class), request.count)
            if request.all_devices:
                label = f"all {request.device_class} devices for {label}"
                out.append(Entry(DimKind.ALL, (matcher,), (0,), label, where, quota))
            else:
                label = f"{request.device_class} devices for {label}"
                out.append(
                    Entry(DimKind.REQUEST, (matcher,), (request.count,), label, where, quota)
                )
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
        return self.matchers.setdefault(matcher, len(self.matchers))

    def quota_resource(self, class_name: str) -> str:
        device_class = self._classes.get(class_name)
        return (device_class.quota_resource if device_class else "") or class_name
