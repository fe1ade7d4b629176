"""A fake of the parts of pynvml (nvidia-ml-py) the node agent calls, with scripted GPUs.

No Python NVML mock exists, so this mirrors pynvml's names.  Its errors are the real
pynvml classes, raised the way pynvml raises them (``pynvml.NVMLError(code)``, which
returns the matching ``NVMLError_*`` subclass): importing pynvml loads no library, and
code that handles this fake's errors handles the real ones.

Scenarios are scripted on the fake: :meth:`FakeNvml.xid` queues an XID event,
:meth:`FakeNvml.lose` makes every call on a GPU answer GPU_IS_LOST, and each
:class:`FakeGpu`'s ``temperature_c`` and ``power_mw`` can be changed at any time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import pynvml

NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of an event on a whole GPU


@dataclass(frozen=True)
class FakeHandle:
    """A device handle: a GPU (``mig`` None) or one of its MIG devices."""

    index: int
    mig: int | None = None


@dataclass
class FakeMig:
    """A MIG device: ``gpu_slices`` and ``memory_mb`` as nvmlDeviceGetAttributes gives them."""

    gpu_slices: int
    memory_mb: int
    compute_slices: int | None = None  # None: the same as gpu_slices
    uuid: str = ""


# nvmlDeviceGetAttributes memorySizeMB of an H100 80GB's MIG profiles.
H100_PROFILES = {"1g.10gb": (1, 9856), "2g.20gb": (2, 19968), "3g.40gb": (3, 40192)}


def mig(profile: str, uuid: str = "") -> FakeMig:
    slices, memory = H100_PROFILES[profile]
    return FakeMig(gpu_slices=slices, memory_mb=memory, uuid=uuid)


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = ""
    memory_mib: int = 81559
    temperature_c: int = 40
    power_mw: int = 300_000
    power_limit_mw: int = 700_000
    # None: MIG disabled. A list: MIG enabled, one entry per slot (None: an empty slot).
    mig: list[FakeMig | None] | None = None
    mig_supported: bool = True
    events_supported: bool = True
    power_supported: bool = True
    lost: bool = False


@dataclass
class FakeEventData:
    """pynvml's c_nvmlEventData_t, as nvmlEventSetWait returns it."""

    device: FakeHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = NO_INSTANCE
    computeInstanceId: int = NO_INSTANCE


@dataclass
class FakeMemory:
    total: int
    used: int = 0
    free: int = 0


@dataclass
class FakeAttributes:
    gpuInstanceSliceCount: int
    computeInstanceSliceCount: int
    memorySizeMB: int


def _raise(code: int) -> NoReturn:
    raise pynvml.NVMLError(code)  # the NVMLError_* subclass, as pynvml raises it


class FakeNvml:
    """Module-like: pass an instance where the agent takes the ``pynvml`` module."""

    NVMLError = pynvml.NVMLError
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_DEVICE_MIG_DISABLE = pynvml.NVML_DEVICE_MIG_DISABLE
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(
        self,
        gpus: int | list[FakeGpu] = 8,
        *,
        init_error: int | None = None,
        driver_version: str = "550.54.15",
        on_wait: Callable[[float], None] | None = None,
    ) -> None:
        """``init_error``: the NVML_ERROR_* code nvmlInit fails with (no driver, ...).
        ``on_wait``: called with the seconds an nvmlEventSetWait would have blocked
        when no event is queued (a test advances its clock there instead of sleeping)."""
        self.gpus = [FakeGpu() for _ in range(gpus)] if isinstance(gpus, int) else list(gpus)
        for i, gpu in enumerate(self.gpus):
            gpu.uuid = gpu.uuid or f"GPU-{i:08x}-fake-0000-0000-{i:012x}"
            for slot, device in enumerate(gpu.mig or []):
                if device is not None and not device.uuid:
                    device.uuid = f"MIG-{i:04x}{slot:04x}-fake"
        self.init_error = init_error
        self.driver_version = driver_version
        self.on_wait = on_wait
        self.initialised = False
        self.registered: set[int] = set()
        self.event_sets_open = 0
        self.queue: deque[FakeEventData] = deque()
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        # Every NVML_* constant and NVMLError_* class, as pynvml has them; no function.
        if name.startswith(("NVML_", "NVMLError_")):
            return getattr(pynvml, name)
        raise AttributeError(f"the fake NVML has no {name}")

    # -- scripting -------------------------------------------------------------------

    def xid(self, index: int, xid: int, *, mig_slot: int | None = None) -> None:
        """An XID event on GPU ``index`` (delivered only if it was registered)."""
        if index in self.registered:
            device = FakeHandle(index, mig_slot)
            kind = pynvml.nvmlEventTypeXidCriticalError
            self.queue.append(FakeEventData(device=device, eventType=kind, eventData=xid))

    def lose(self, index: int) -> None:
        self.gpus[index].lost = True

    # -- helpers ---------------------------------------------------------------------

    def _ready(self, name: str) -> None:
        self.calls.append(name)
        if not self.initialised:
            _raise(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, name: str, handle: FakeHandle) -> FakeGpu:
        self._ready(name)
        if not 0 <= handle.index < len(self.gpus):
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            _raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def _mig(self, name: str, handle: FakeHandle) -> FakeMig:
        gpu = self._gpu(name, handle)
        if handle.mig is None or gpu.mig is None:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        device = gpu.mig[handle.mig]
        if device is None:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return device

    # -- the pynvml API --------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            _raise(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._ready("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._ready("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._ready("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        handle = FakeHandle(index)
        self._gpu("nvmlDeviceGetHandleByIndex", handle)
        return handle

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        if handle.mig is not None:
            return self._mig("nvmlDeviceGetUUID", handle).uuid
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return FakeMemory(total=gpu.memory_mib * 2**20)

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", handle)
        if not gpu.mig_supported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig is not None else 0
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7 if gpu.mig is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, slot: int) -> FakeHandle:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if gpu.mig is None or slot >= len(gpu.mig) or gpu.mig[slot] is None:
            _raise(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeHandle(handle.index, slot)

    def nvmlDeviceGetAttributes(self, handle: FakeHandle) -> FakeAttributes:
        device = self._mig("nvmlDeviceGetAttributes", handle)
        compute = device.gpu_slices if device.compute_slices is None else device.compute_slices
        return FakeAttributes(
            gpuInstanceSliceCount=device.gpu_slices,
            computeInstanceSliceCount=compute,
            memorySizeMB=device.memory_mb,
        )

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            _raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetPowerUsage", handle)
        if not gpu.power_supported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        gpu = self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle)
        if not gpu.power_supported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_limit_mw

    def nvmlEventSetCreate(self) -> object:
        self._ready("nvmlEventSetCreate")
        self.event_sets_open += 1
        return object()

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, kinds: int, event_set: object) -> None:
        gpu = self._gpu("nvmlDeviceRegisterEvents", handle)
        if not gpu.events_supported:
            _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if kinds & pynvml.nvmlEventTypeXidCriticalError:
            self.registered.add(handle.index)

    def nvmlEventSetWait(self, event_set: object, timeout_ms: int) -> FakeEventData:
        self._ready("nvmlEventSetWait")
        if self.queue:
            return self.queue.popleft()
        if self.on_wait is not None and timeout_ms:
            self.on_wait(timeout_ms / 1000)
        _raise(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: object) -> None:
        self._ready("nvmlEventSetFree")
        self.event_sets_open -= 1
