"""`simulate --dra`: whole GPUs asked and offered through DRA (resource.k8s.io/v1).

With it, the core sees the same hardware another way:

- each whole-GPU node offers its GPUs as the devices of one ResourceSlice of
  the driver ``gpu.nvidia.com`` (attributes ``type: gpu``, ``productName``,
  ``uuid`` and ``index``, capacity ``memory``, as NVIDIA's driver publishes
  them; :mod:`queue_controller.localcluster.devices` does the same for the
  local cluster), and no longer advertises ``nvidia.com/gpu``;
- the DeviceClass ``gpu.nvidia.com`` picks them (driver and ``type == "gpu"``)
  and charges each device to quota as one ``nvidia.com/gpu``, so the
  scenario's TeamQuotas apply unchanged;
- a job's pods ask for their GPUs through a ResourceClaimTemplate, one per
  namespace and (count, product), with a selector on ``productName`` when the
  job is bound to a product by its node selector (which it keeps);
- the GPUs a run's pods hold are allocated ResourceClaims naming devices of
  their node (:class:`DeviceBook` picks free ones at bind and frees them when
  the pods go), reserved for the pod the core knows the gang's members by.

MIG slices and time-sliced replicas stay extended resources: only nodes that
advertise whole ``nvidia.com/gpu`` without sharing (no
``nvidia.com/gpu.replicas`` label above 1, not MIG ``single``) offer devices,
and only jobs that ask ``nvidia.com/gpu`` of such a product (or of no product)
ask through a claim.  The simulator's own book keeps counting
``nvidia.com/gpu``: only what the core is shown changes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from queue_controller.core import Container, Node, PodTemplate
from queue_controller.core.model import (
    GPU,
    ONE,
    AllocatedDevice,
    ClaimTemplate,
    Device,
    DeviceClass,
    DeviceRequest,
    PodClaim,
    ResourceClaim,
    ResourceSlice,
)
from queue_controller.sim.scenario.gpus import PRODUCT_LABEL, REPLICAS_LABEL

DRIVER = "gpu.nvidia.com"
GPU_CLASS = DeviceClass(
    DRIVER,
    (f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"',),
    quota_resource=GPU,
)
CLAIM = "gpus"  # the pod's resourceClaims entry, and the template's one request
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB, as GPU Feature Discovery writes it
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"


def product_name(label: str) -> str:
    """The device's productName for a node's product label (GFD turns spaces into dashes)."""
    return label.replace("-", " ")


def offers_devices(node: Node) -> bool:
    """Whether ``node``'s whole GPUs go through DRA: unshared, not MIG single."""
    if node.allocatable.get(GPU, 0) < ONE:
        return False
    try:
        replicas = int(node.labels.get(REPLICAS_LABEL, "1"))
    except ValueError:
        replicas = 1
    return replicas <= 1 and node.labels.get(MIG_STRATEGY_LABEL, "none") != "single"


def node_devices(node: Node) -> tuple[Device, ...]:
    product = product_name(node.labels.get(PRODUCT_LABEL, "unknown"))
    memory = node.labels.get(MEMORY_LABEL, "")
    capacity = {"memory": {"value": f"{memory}Mi"}} if memory.isdigit() else {}
    return tuple(
        Device.from_slice(
            DRIVER,
            device_name(i),
            {
                "type": {"string": "gpu"},
                "productName": {"string": product},
                "uuid": {"string": f"GPU-{node.name}-{i}"},
                "index": {"int": i},
            },
            capacity,
        )
        for i in range(node.allocatable[GPU] // ONE)
    )


def device_name(index: int) -> str:
    return f"gpu-{index}"


def template_name(count: int, product: str) -> str:
    slug = product.lower().replace(".", "-").replace("_", "-") if product else "any"
    return f"gpu-{count}-{slug}"


@dataclass(frozen=True, slots=True)
class DraCluster:
    """What `--dra` shows the core besides nodes and workloads: built once per scenario."""

    device_classes: tuple[DeviceClass, ...]
    resource_slices: tuple[ResourceSlice, ...]
    claim_templates: tuple[ClaimTemplate, ...]
    devices: Mapping[str, int]  # node -> the whole GPUs it offers as devices
    products: frozenset[str]  # the product labels of those nodes
    _templates: dict[tuple[object, ...], PodTemplate] = field(
        default_factory=dict, compare=False, repr=False
    )

    def asks_devices(self, request: Mapping[str, str], node_selector: Mapping[str, str]) -> bool:
        """Whether a job of this request and node selector asks its GPUs through a claim."""
        if GPU not in request or not self.devices:
            return False
        product = node_selector.get(PRODUCT_LABEL)
        return product is None or product in self.products

    def template(self, original: PodTemplate, gpus: int) -> PodTemplate:
        """``original``, whose pod asks ``gpus`` whole GPUs, asking them through the
        claim template instead of ``nvidia.com/gpu``."""
        key = (original, gpus)
        found = self._templates.get(key)
        if found is None:
            found = self._templates[key] = _claiming(original, gpus)
        return found


def _claiming(original: PodTemplate, gpus: int) -> PodTemplate:
    containers: list[Container] = []
    for container in original.containers:
        containers.append(
            replace(
                container,
                requests={r: q for r, q in container.requests.items() if r != GPU},
                limits={r: q for r, q in container.limits.items() if r != GPU},
            )
        )
    product = original.node_selector.get(PRODUCT_LABEL, "")
    return replace(
        original,
        containers=tuple(containers),
        resource_claims=(PodClaim(CLAIM, template_name=template_name(gpus, product)),),
    )


def build(nodes: Sequence[Node], jobs: Iterable[tuple[str, int, str]]) -> DraCluster:
    """The DRA objects for ``nodes`` and jobs given as (namespace, GPUs per pod, product)."""
    offering = [node for node in nodes if offers_devices(node)]
    slices = tuple(
        ResourceSlice(f"{node.name}-{DRIVER}", DRIVER, node.name, node.name, node_devices(node))
        for node in offering
    )
    products = frozenset(node.labels.get(PRODUCT_LABEL, "") for node in offering)
    templates: dict[tuple[str, str], ClaimTemplate] = {}
    for namespace, count, product in jobs:
        name = template_name(count, product)
        if (namespace, name) in templates or (product and product not in products):
            continue  # known, or its GPUs stay nvidia.com/gpu (MIG, time-sliced)
        selectors = (
            (f'device.attributes["{DRIVER}"].productName == "{product_name(product)}"',)
            if product
            else ()
        )
        request = DeviceRequest(CLAIM, DRIVER, count, selectors=selectors)
        templates[(namespace, name)] = ClaimTemplate(namespace, name, (request,))
    return DraCluster(
        device_classes=(GPU_CLASS,),
        resource_slices=slices,
        claim_templates=tuple(templates[key] for key in sorted(templates)),
        devices={node.name: node.allocatable[GPU] // ONE for node in offering},
        products=products,
    )


# Names the claim of what ``owner`` holds on a node: (namespace, claim name, the pod
# (namespace/name) it is reserved for, empty for none).
Describe = Callable[[Hashable, str], tuple[str, str, str]]


class DeviceBook:
    """Which devices of each node are free, and who holds the rest.

    Devices are taken lowest index first; an owner (a job's current attempt, a
    preempted attempt's terminating pods, a foreign pod) gives back what it took
    on that node, and a failed node loses everything.
    """

    def __init__(self, devices: Mapping[str, int]) -> None:
        self.offered = dict(devices)
        self.free: dict[str, list[int]] = {n: list(range(c)) for n, c in devices.items()}
        self.held: dict[str, dict[Hashable, list[int]]] = {n: {} for n in devices}
        self._claims: tuple[ResourceClaim, ...] | None = ()

    def take(self, node: str, owner: Hashable, count: int) -> None:
        free = self.free.get(node)
        if free is None or count <= 0:
            return
        if len(free) < count:
            raise AssertionError(f"{node}: {count} devices asked, {len(free)} free")
        free.sort()
        taken, free[:] = free[:count], free[count:]
        self.held[node].setdefault(owner, []).extend(taken)
        self._claims = None

    def give(self, node: str, owner: Hashable, count: int) -> None:
        held = self.held.get(node)
        if held is None or count <= 0:
            return
        mine = held.get(owner, [])
        if len(mine) < count:
            raise AssertionError(f"{node}: {owner!r} gives {count} devices, holds {len(mine)}")
        given, mine[:] = mine[-count:], mine[:-count]
        if not mine:
            del held[owner]
        self.free[node].extend(given)
        self._claims = None

    def rehome(self, node: str, owner: Hashable, to: Hashable) -> None:
        """What ``owner`` holds on ``node`` is ``to``'s now (a preempted attempt's pods)."""
        held = self.held.get(node)
        if held is None or owner not in held:
            return
        held.setdefault(to, []).extend(held.pop(owner))
        self._claims = None

    def clear(self, node: str) -> None:
        if node in self.held:
            self.free[node] = list(range(self.offered[node]))
            self.held[node] = {}
            self._claims = None

    def allocated(self, node: str) -> int:
        return self.offered.get(node, 0) - len(self.free.get(node, ()))

    def claims(self, describe: Describe) -> tuple[ResourceClaim, ...]:
        """One allocated claim per owner and node; rebuilt only after a change."""
        if self._claims is None:
            out: list[ResourceClaim] = []
            for node in sorted(self.held):
                for owner, indices in self.held[node].items():
                    namespace, name, pod = describe(owner, node)
                    out.append(
                        ResourceClaim(
                            namespace,
                            name,
                            (DeviceRequest(CLAIM, DRIVER, len(indices)),),
                            tuple(
                                AllocatedDevice(CLAIM, DRIVER, node, device_name(i))
                                for i in sorted(indices)
                            ),
                            (pod,) if pod else (),
                        )
                    )
            self._claims = tuple(out)
        return self._claims
