"""What NVML says a node has: its GPUs, their MIG instances, the driver.

Plain values, built by :mod:`queue_controller.gpuhealth.nvml` and shown by
the node agent (``--once``) and its metrics.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MigInstance:
    slot: int  # the index nvmlDeviceGetMigDeviceHandleByIndex answered to
    uuid: str
    profile: str  # "1g.10gb", "1c.3g.40gb": the name the device plugin's resources use


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    uuid: str = ""
    name: str = ""
    memory_mib: int = 0
    mig_enabled: bool = False
    mig_instances: tuple[MigInstance, ...] = ()
    # False: the GPU refused XID event registration (NotSupported), so its XIDs
    # go unseen; only its temperature, power and presence are polled.
    xid_events: bool = True
    # NVML said the GPU is lost while it was being inventoried.
    lost: bool = False

    def mig_devices(self) -> dict[str, int]:
        """Profile -> count of its MIG instances (empty when MIG is off)."""
        if not self.mig_enabled:
            return {}
        return dict(sorted(Counter(m.profile for m in self.mig_instances).items()))

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memoryMiB": self.memory_mib,
            "mig": {
                "enabled": self.mig_enabled,
                "instances": [
                    {"slot": m.slot, "uuid": m.uuid, "profile": m.profile}
                    for m in self.mig_instances
                ],
            },
            "xidEvents": "registered" if self.xid_events else "not supported: polled only",
            "lost": self.lost,
        }


@dataclass(frozen=True, slots=True)
class Inventory:
    driver_version: str
    gpus: tuple[GpuInfo, ...]

    def by_index(self) -> dict[int, GpuInfo]:
        return {gpu.index: gpu for gpu in self.gpus}

    def as_json(self) -> dict[str, Any]:
        return {"driverVersion": self.driver_version, "gpus": [g.as_json() for g in self.gpus]}


def mig_profile(*, gpu_slices: int, compute_slices: int, memory_mb: int) -> str:
    """The profile name of a MIG instance from nvmlDeviceGetAttributes' fields.

    Memory is rounded up to whole GB as NVIDIA's names do: an A100-40GB's
    smallest instance has 4864 MB and is called ``1g.5gb``.  A compute
    instance smaller than its GPU instance is named ``<c>c.<g>g.<m>gb``.
    """
    memory = f"{gpu_slices}g.{math.ceil(memory_mb / 1024)}gb"
    if compute_slices and compute_slices != gpu_slices:
        return f"{compute_slices}c.{memory}"
    return memory
