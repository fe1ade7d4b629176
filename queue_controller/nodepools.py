"""Node-pool files: a declarative description of GPU node pools.

One file describes pools of identical nodes (8xH100, A100 in MIG mode,
time-sliced L4, ...).  From it come the Node objects the local cluster
creates for kwok to run, and (later) the simulator's cluster.  The GPU block
produces what the NVIDIA device plugin and GPU Feature Discovery would put on
a real node: the resource names and amounts, and the GFD labels.

    apiVersion: queue-controller.io/v1alpha1
    kind: NodePools
    pools:
    - name: h100
      count: 8
      cpu: "192"
      memory: 2Ti
      gpu: {product: NVIDIA-H100-80GB-HBM3, count: 8, memoryMiB: 81559, family: hopper}
      topology: {nodesPerRack: 2, racksPerBlock: 2}

``topology`` labels each node with its rack and block (``topology.queue-controller.io/rack``
and ``/block``, the levels a Topology object names) and, for NVLink-domain systems such
as GB200 NVL72, the clique GPU Feature Discovery reports (``nvidia.com/gpu.clique``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from queue_controller.core.model import parse_quantity
from queue_controller.errors import InputError, QuantityError

_PROFILE = re.compile(r"^(?P<compute>[1-7])g\.(?P<memory>[0-9]+)gb(?P<media>\+me)?$")
# Allowed start slices for each (compute slices, memory slices) GPU instance,
# out of 8 memory slices: the layout rules of A100/H100/H200 MIG.
_STARTS = {
    (1, 1): range(7),
    (1, 2): (0, 2, 4, 6),
    (2, 2): (0, 2, 4),
    (3, 4): (0, 4),
    (4, 4): (0,),
    (7, 8): (0,),
}
_COMPUTE_CAPABILITY = {
    "pascal": "6.0",
    "volta": "7.0",
    "turing": "7.5",
    "ampere": "8.0",
    "ada-lovelace": "8.9",
    "hopper": "9.0",
    "blackwell": "10.0",
}
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
BLOCK_LABEL = "topology.queue-controller.io/block"
RACK_LABEL = "topology.queue-controller.io/rack"
# GFD's label for the NVLink domain (an NVL72 rack's 18 trays share one) a node's GPUs
# are in; GFD writes "<cluster UUID>.<clique id>", the local cluster "<pool>-nvl-<n>.1".
CLIQUE_LABEL = "nvidia.com/gpu.clique"
DRIVER_VERSION = "570.124.06"


def _quantity(value: Any) -> str:
    try:
        if parse_quantity(value) < 0:
            raise ValueError(f"{value!r} is negative")
    except QuantityError as error:
        raise ValueError(error.detail) from None
    return str(value)


Quantity = Annotated[str, Field(json_schema_extra={"format": "quantity"})]
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def mig_slices(profile: str, gpu_memory_mib: int) -> tuple[int, int]:
    """(compute slices, memory slices) of a MIG profile such as ``3g.40gb`` on this GPU."""
    match = _PROFILE.match(profile)
    if match is None:
        raise ValueError(f"{profile!r} is not a MIG profile (examples: 1g.10gb, 3g.40gb)")
    compute = int(match["compute"])
    # A profile's memory is a whole number of eighths of the GPU's memory.
    slices = round(int(match["memory"]) * 1024 * 8 / gpu_memory_mib)
    if (compute, slices) not in _STARTS:
        raise ValueError(f"{profile!r} does not exist on a GPU with {gpu_memory_mib} MiB")
    return compute, slices


def _fits_on_one_gpu(instances: list[tuple[int, int]]) -> bool:
    """Whether the instances can take non-overlapping memory slices (and <= 7 compute)."""
    if sum(c for c, _ in instances) > 7:
        return False
    ordered = sorted(instances, key=lambda i: -i[1])  # place the big ones first

    def place(i: int, used: int) -> bool:
        if i == len(ordered):
            return True
        compute, size = ordered[i]
        for start in _STARTS[(compute, size)]:
            mask = ((1 << size) - 1) << start
            if not used & mask and place(i + 1, used | mask):
                return True
        return False

    return place(0, 0)


class Mig(_Strict):
    strategy: Literal["single", "mixed"] = "mixed"
    config: str = Field(default="custom", description="The mig-parted layout name, as a label")
    # MIG devices on each GPU: profile -> count.
    devices: dict[str, Annotated[int, Field(ge=1, le=7)]] = Field(min_length=1)


class Sharing(_Strict):
    strategy: Literal["time-slicing", "mps"] = "time-slicing"
    replicas: Annotated[int, Field(ge=2, le=64)]
    renameByDefault: bool = False


class Gpu(_Strict):
    product: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
    count: Annotated[int, Field(ge=1, le=16)]
    memoryMiB: Annotated[int, Field(ge=1024)]
    family: str = "hopper"
    mig: Mig | None = None
    sharing: Sharing | None = None

    @model_validator(mode="after")
    def _layout(self) -> Gpu:
        if self.mig is None:
            return self
        if self.sharing is not None:
            raise ValueError("MIG and sharing cannot be combined (MPS does not work with MIG)")
        instances = []
        for profile, per_gpu in self.mig.devices.items():
            compute, slices = mig_slices(profile, self.memoryMiB)
            instances += [(compute, slices)] * per_gpu
        if sum(1 for p, n in self.mig.devices.items() if p.endswith("+me") for _ in range(n)) > 1:
            raise ValueError("mig.devices: at most one +me instance fits on a GPU")
        if not _fits_on_one_gpu(instances):
            raise ValueError(
                f"mig.devices {dict(self.mig.devices)} do not fit on one GPU "
                "(8 memory slices, 7 compute slices, fixed start positions)"
            )
        if self.mig.strategy == "single" and len(self.mig.devices) != 1:
            raise ValueError("mig.strategy single needs exactly one profile on every GPU")
        return self

    def resources(self) -> dict[str, int]:
        """What the device plugin advertises for this node's GPUs."""
        if self.mig is not None:
            if self.mig.strategy == "single":
                return {"nvidia.com/gpu": self.count * sum(self.mig.devices.values())}
            return {
                f"nvidia.com/mig-{profile.replace('+', '.')}": self.count * per_gpu
                for profile, per_gpu in self.mig.devices.items()
            }
        if self.sharing is not None:
            name = "nvidia.com/gpu.shared" if self.sharing.renameByDefault else "nvidia.com/gpu"
            return {name: self.count * self.sharing.replicas}
        return {"nvidia.com/gpu": self.count}

    def compute_capability(self) -> str:
        """CUDA compute capability, such as ``9.0`` ("0.0" for a family we do not know)."""
        return _COMPUTE_CAPABILITY.get(self.family, "0.0")

    def labels(self) -> dict[str, str]:
        """GPU Feature Discovery labels, as GFD writes them."""
        major, minor = self.compute_capability().split(".")
        product = self.product
        if self.sharing is not None and not self.sharing.renameByDefault:
            product += "-SHARED"
        labels = {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(self.count),
            "nvidia.com/gpu.memory": str(self.memoryMiB),
            "nvidia.com/gpu.family": self.family,
            "nvidia.com/gpu.compute.major": major,
            "nvidia.com/gpu.compute.minor": minor,
            "nvidia.com/cuda.driver-version.full": DRIVER_VERSION,
            "nvidia.com/mig.capable": str(self.family in ("ampere", "hopper", "blackwell")).lower(),
            "nvidia.com/mig.strategy": self.mig.strategy if self.mig else "none",
        }
        if self.mig is not None:
            labels["nvidia.com/mig.config"] = self.mig.config
            labels["nvidia.com/mig.config.state"] = "success"
            if self.mig.strategy == "mixed":
                for profile, per_gpu in self.mig.devices.items():
                    _, slices = mig_slices(profile, self.memoryMiB)
                    prefix = f"nvidia.com/mig-{profile.replace('+', '.')}"
                    labels[f"{prefix}.count"] = str(self.count * per_gpu)
                    labels[f"{prefix}.memory"] = str(self.memoryMiB * slices // 8)
                    labels[f"{prefix}.slices.gi"] = str(slices)
        if self.sharing is not None:
            labels["nvidia.com/gpu.replicas"] = str(self.sharing.replicas)
            labels["nvidia.com/gpu.sharing-strategy"] = self.sharing.strategy
        return labels


class PoolTopology(_Strict):
    """Where a pool's nodes sit: racks of consecutive nodes, blocks of consecutive racks."""

    nodesPerRack: Annotated[int, Field(ge=1)]
    # Absent: all the pool's racks in one block.
    racksPerBlock: Annotated[int, Field(ge=1)] | None = None
    # NVLink domains (GB200 NVL72: 18 nodes of 4 GPUs each) of consecutive nodes.
    nodesPerClique: Annotated[int, Field(ge=1)] | None = None

    def labels(self, pool: str, index: int) -> dict[str, str]:
        """The topology labels of the pool's node number ``index``."""
        rack = index // self.nodesPerRack
        block = rack // self.racksPerBlock if self.racksPerBlock is not None else 0
        out = {BLOCK_LABEL: f"{pool}-block-{block}", RACK_LABEL: f"{pool}-rack-{rack}"}
        if self.nodesPerClique is not None:
            out[CLIQUE_LABEL] = f"{pool}-nvl-{index // self.nodesPerClique}.1"
        return out


class Taint(_Strict):
    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Pool(_Strict):
    name: Name
    count: Annotated[int, Field(ge=0, le=100_000)]
    cpu: str = "64"
    memory: str = "512Gi"
    pods: Annotated[int, Field(ge=1)] = 110
    ephemeralStorage: str = "1Ti"
    gpu: Gpu | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    topology: PoolTopology | None = None
    # False: kwok leaves these nodes alone, so they never become Ready.
    ready: bool = True

    @model_validator(mode="after")
    def _quantities(self) -> Pool:
        for field in ("cpu", "memory", "ephemeralStorage"):
            try:
                _quantity(getattr(self, field))
            except ValueError as error:
                raise ValueError(f"{field}: {error}") from None
        return self

    def node_name(self, index: int) -> str:
        """The name of the pool's node number ``index``."""
        return f"{self.name}-{index:04d}"

    def allocatable(self) -> dict[str, str]:
        out = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            "ephemeral-storage": self.ephemeralStorage,
        }
        if self.gpu is not None:
            out |= {name: str(amount) for name, amount in self.gpu.resources().items()}
        return out


class NodePools(_Strict):
    apiVersion: Literal["queue-controller.io/v1alpha1"] = "queue-controller.io/v1alpha1"
    kind: Literal["NodePools"] = "NodePools"
    pools: list[Pool] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> NodePools:
        names = [p.name for p in self.pools]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ValueError(f"pool names must be unique: {', '.join(duplicated)}")
        return self

    def resized(self, sizes: dict[str, int]) -> NodePools:
        """The same pools with some counts replaced (``--size h100=800``)."""
        unknown = sorted(set(sizes) - {p.name for p in self.pools})
        if unknown:
            known = ", ".join(p.name for p in self.pools)
            raise InputError(f"no pool named {', '.join(unknown)} (pools: {known})", field="--size")
        pools = [p.model_copy(update={"count": sizes.get(p.name, p.count)}) for p in self.pools]
        return self.model_copy(update={"pools": pools})

    def node_count(self) -> int:
        return sum(p.count for p in self.pools)

    def nodes(self) -> list[dict[str, Any]]:
        """Node objects, ready for ``kubectl apply``."""
        out = []
        for pool in self.pools:
            allocatable = pool.allocatable()
            labels = {"queue-controller.io/pool": pool.name, "type": "kwok", **pool.labels}
            if pool.gpu is not None:
                labels |= pool.gpu.labels()
            for i in range(pool.count):
                name = pool.node_name(i)
                placed = pool.topology.labels(pool.name, i) if pool.topology else {}
                node: dict[str, Any] = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": {
                            **labels,
                            **placed,
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                        },
                        "annotations": {KWOK_ANNOTATION: "fake"} if pool.ready else {},
                    },
                    "spec": {},
                    "status": {"allocatable": allocatable, "capacity": allocatable},
                }
                if pool.taints:
                    node["spec"]["taints"] = [
                        t.model_dump(exclude_defaults=True) for t in pool.taints
                    ]
                out.append(node)
        return out


def load(path: Path) -> NodePools:
    """Read and validate a node-pool file; errors name the file and the field."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such file", where=str(path)) from None
    except (yaml.YAMLError, ValueError) as error:
        # ValueError: an integer past int()'s 4,300 digits, or text that is not UTF-8.
        raise InputError(f"not valid YAML: {error}".splitlines()[0], where=str(path)) from None
    try:
        return NodePools.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise InputError(
            first["msg"].removeprefix("Value error, "), where=str(path), field=field
        ) from None
