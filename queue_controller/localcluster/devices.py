"""The ResourceSlices NVIDIA's DRA driver would publish for the fake GPU nodes.

No DRA driver runs on kwok nodes, and none is needed to schedule: kube-scheduler
allocates ResourceClaims from whatever ResourceSlices the API holds (see
deploy/local-cluster/DRA.md).  So the local cluster writes, for each GPU node,
the one slice the driver ``gpu.nvidia.com`` would: its node's GPUs as devices of
type ``gpu``, or, on a MIG node, the MIG devices the pool's layout cuts each GPU
into as devices of type ``mig`` (a GPU in MIG mode is not allocatable whole).

The attribute names are the driver's.  What is ours: the UUIDs (stable hashes of
the node and index, so a restarted cluster publishes the same ones), the MIG
device names (``gpu-<parent>-mig-<profile>-<n>``) and the productName, which is
GFD's product label with its dashes turned back into spaces.
"""

from __future__ import annotations

import uuid
from typing import Any

from queue_controller.nodepools import DRIVER_VERSION, Gpu, Pool, mig_slices

DRIVER = "gpu.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
API_VERSION = "resource.k8s.io/v1"
# Any fixed namespace: it only has to make the same node and index give the same UUID.
_UUID_NAMESPACE = uuid.UUID("6f1c7b0e-9a52-4d8e-b1f4-2c3d5e7a9b10")


def _driver_version() -> str:
    # DRA version attributes are semver, which forbids leading zeros ("570.124.06").
    return ".".join(str(int(part)) for part in DRIVER_VERSION.split("."))


def _product_name(gpu: Gpu) -> str:
    # GFD writes NVML's name with spaces as dashes; NVML's own dashes
    # ("A100-SXM4-80GB") cannot be told apart, so they become spaces too.
    return gpu.product.replace("-", " ")


def _architecture(gpu: Gpu) -> str:
    return " ".join(word.capitalize() for word in gpu.family.split("-"))


def _uuid(kind: str, *parts: object) -> str:
    return f"{kind}-{uuid.uuid5(_UUID_NAMESPACE, '/'.join(map(str, parts)))}"


def _common(gpu: Gpu) -> dict[str, Any]:
    return {
        "productName": {"string": _product_name(gpu)},
        "architecture": {"string": _architecture(gpu)},
        "brand": {"string": "Nvidia"},
        "cudaComputeCapability": {"version": f"{gpu.compute_capability()}.0"},
        "driverVersion": {"version": _driver_version()},
    }


def _whole_gpus(node: str, gpu: Gpu) -> list[dict[str, Any]]:
    return [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": _uuid("GPU", node, i)},
                "index": {"int": i},
                **_common(gpu),
            },
            "capacity": {"memory": {"value": f"{gpu.memoryMiB}Mi"}},
        }
        for i in range(gpu.count)
    ]


def _mig_devices(node: str, gpu: Gpu) -> list[dict[str, Any]]:
    assert gpu.mig is not None
    out: list[dict[str, Any]] = []
    for parent in range(gpu.count):
        parent_uuid = _uuid("GPU", node, parent)
        for profile, per_gpu in gpu.mig.devices.items():
            _, slices = mig_slices(profile, gpu.memoryMiB)
            for n in range(per_gpu):
                # A DNS label: "1g.10gb+me" -> "1g10gbme".
                label = profile.replace(".", "").replace("+", "")
                out.append(
                    {
                        "name": f"gpu-{parent}-mig-{label}-{n}",
                        "attributes": {
                            "type": {"string": "mig"},
                            "profile": {"string": profile},
                            "uuid": {"string": _uuid("MIG", node, parent, profile, n)},
                            "parentUUID": {"string": parent_uuid},
                            "parentIndex": {"int": parent},
                            "index": {"int": len(out)},
                            **_common(gpu),
                        },
                        "capacity": {"memory": {"value": f"{gpu.memoryMiB * slices // 8}Mi"}},
                    }
                )
    return out


def resource_slice(pool: Pool, index: int) -> dict[str, Any] | None:
    """The slice of the pool's node number ``index``; None for a node without GPUs."""
    gpu = pool.gpu
    if gpu is None:
        return None
    node = pool.node_name(index)
    devices = _whole_gpus(node, gpu) if gpu.mig is None else _mig_devices(node, gpu)
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            # One pool per node, all in one slice, as the driver publishes them.
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(name: str, device_type: str) -> dict[str, Any]:
    expression = (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{device_type}"'
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def objects(pools: list[Pool]) -> list[dict[str, Any]]:
    """The DeviceClasses and every GPU node's ResourceSlice, ready for ``kubectl create``."""
    out = [device_class(GPU_CLASS, "gpu"), device_class(MIG_CLASS, "mig")]
    for pool in pools:
        for i in range(pool.count):
            made = resource_slice(pool, i)
            if made is not None:
                out.append(made)
    return out
