"""DRA in the cycle: members' claims added to their requests, devices to nodes.

The cycle prepares every workload as if it had no claims; this reads what each
pod set's claims ask (an unknown template or class, or a selector that does not
compile, makes the gang invalid, naming the claim), gives every device its
signature once all asks are known (a selector whose result is not a bool makes
the gangs that ask for it invalid, and only them), and then:

* adds each pod's device dimensions to its request, and what its devices
  charge to the gang's quota (a shared claim once);
* offers each node's devices as dimensions (:meth:`DeviceCatalog.with_devices`);
* turns what admitted gangs hold into base dimensions: devices allocated to
  their claims, and, for members planned but not bound yet, the devices they
  will take (the plan holds them, as it holds CPUs and GPUs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from queue_controller.core.cycle.devicecatalog import DeviceCatalog
from queue_controller.core.devices.asks import PodAsk
from queue_controller.core.devices.dims import is_device_dimension
from queue_controller.core.model.objects import BoundPod
from queue_controller.core.rules.prepared import Prepared, Usage
from queue_controller.errors import InvalidSpecError


def with_devices(catalog: DeviceCatalog, prepared: list[Prepared]) -> list[Prepared]:
    """Every prepared workload, its requests and quota charge including its devices."""
    asks: dict[int, tuple[PodAsk | None, ...]] = {}
    out = list(prepared)
    for position, p in enumerate(prepared):
        if p.error or not p.requests:
            continue
        if not any(s.template.resource_claims for s in p.workload.pod_sets):
            continue
        collected: list[PodAsk | None] = []
        for pod_set in p.workload.pod_sets:
            claims = pod_set.template.resource_claims
            try:
                collected.append(catalog.ask(claims, p.workload.namespace) if claims else None)
            except InvalidSpecError as error:
                out[position] = _invalid(p, pod_set.path, error)
                break
        else:
            asks[position] = tuple(collected)
    catalog.settle()
    for position, per_set in list(asks.items()):
        pod_sets = out[position].workload.pod_sets
        for pod_set, ask in zip(pod_sets, per_set, strict=True):
            fault = catalog.fault(ask) if ask is not None else None
            if fault is not None:
                out[position] = _invalid(out[position], pod_set.path, fault)
                del asks[position]
                break
    # Gangs are many and their claims few: what a pod set's ask adds is worked out once.
    charges: dict[tuple[int, ...], tuple[dict[str, int], tuple[Mapping[str, str], ...]]] = {}
    for position, per_set in asks.items():
        p = out[position]
        counts = tuple(s.count for s in p.workload.pod_sets)
        key = (*map(id, per_set), *counts)
        found = charges.get(key)
        if found is None:
            found = charges[key] = _charges(catalog, per_set, counts)
        quota, labels = found
        requests = tuple(
            request if ask is None else {**request, **catalog.devices_of(ask).request}
            for request, ask in zip(p.requests, per_set, strict=True)
        )
        out[position] = Prepared(p.workload, p.priority, requests, "", quota, labels)
    return out


def _charges(
    catalog: DeviceCatalog, per_set: tuple[PodAsk | None, ...], counts: tuple[int, ...]
) -> tuple[dict[str, int], tuple[Mapping[str, str], ...]]:
    """What the pod sets' devices charge the quota, and the labels of their dimensions."""
    quota: dict[str, int] = {}
    shared: dict[str, Mapping[str, int]] = {}
    labels: list[Mapping[str, str]] = []
    for ask, count in zip(per_set, counts, strict=True):
        if ask is None:
            labels.append({})
            continue
        devices = catalog.devices_of(ask)
        labels.append(devices.labels)
        for resource, amount in devices.quota.items():
            quota[resource] = quota.get(resource, 0) + amount * count
        shared.update(devices.shared)
    for amounts in shared.values():  # a claim shared by members is charged once
        for resource, amount in amounts.items():
            quota[resource] = quota.get(resource, 0) + amount
    return quota, tuple(labels)


def _invalid(p: Prepared, path: str, error: InvalidSpecError) -> Prepared:
    # The field names the claim ("resourceClaims[0]..."); the path, where that list is.
    where = f"{path}.{error.field}" if path and error.field else error.field or path
    message = f"{where}: {error.detail}" if where else error.detail
    return replace(p, requests=(), error=message)


def settle_usage(
    catalog: DeviceCatalog, used: Usage, held: dict[str, Usage], pods: Iterable[BoundPod]
) -> None:
    """Turn what admitted gangs hold into devices, in ``used`` and ``held`` (in place).

    ``node_usage`` charged each planned, unbound member's request, device
    dimensions included; those become the base devices the member will take,
    chosen on the node as a commit would.  Then the devices allocated claims
    hold are added, by node and by the gang whose pods they serve.
    """
    dims = catalog.dims
    assert dims is not None
    free: dict[str, list[int]] = {}
    for key in sorted(held):
        for node, amounts in held[key].items():
            totals = {name: amount for name, amount in amounts.items() if is_device_dimension(name)}
            if not totals:
                continue
            node_free = free.get(node)
            if node_free is None:
                node_free = free[node] = catalog.node_dims(node)[0]
            before = list(node_free)
            dims.take(node_free, {n: a for n, a in totals.items() if n in dims.derived})
            node_used = used.setdefault(node, {})
            for name in totals:
                del amounts[name]
                node_used.pop(name, None)
            for k, (was, now) in enumerate(zip(before, node_free, strict=True)):
                if was != now:
                    name = dims.base_names[k]
                    amounts[name] = amounts.get(name, 0) + was - now
                    node_used[name] = node_used.get(name, 0) + was - now
    claims_used, claims_held = catalog.claim_usage(pods)
    for node, amounts in claims_used.items():
        node_used = used.setdefault(node, {})
        for name, amount in amounts.items():
            node_used[name] = node_used.get(name, 0) + amount
    for key, by_node in claims_held.items():
        mine = held.setdefault(key, {})
        for node, amounts in by_node.items():
            node_held = mine.setdefault(node, {})
            for name, amount in amounts.items():
                node_held[name] = node_held.get(name, 0) + amount
