"""Reading the node's GPUs through NVML: the inventory, XID events, and polled faults.

The NVML module is injected: the real ``pynvml`` (package nvidia-ml-py) by
default, imported only when a session opens, or a fake with the same names in
tests.  Errors are told apart by their NVML return code (``error.value``),
which any module raising ``NVMLError(code)`` carries, rather than by the
``NVMLError_*`` classes pynvml generates at import time.

A node without a driver or without GPUs is no error here: :func:`open_session`
returns :class:`Unavailable` with the reason, and the caller reports it.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from queue_controller.gpuhealth import tracker
from queue_controller.gpuhealth.inventory import GpuInfo, Inventory, MigInstance, mig_profile
from queue_controller.gpuhealth.readings import (
    Fault,
    Limits,
    Reading,
    XidEvent,
    over_power,
    too_hot,
)

log = logging.getLogger(__name__)

# pynvml has no type information: the module (or a fake of it) is Any.
NvmlModule = Any

# NVML return codes (nvml.h); the same numbers as pynvml's NVML_ERROR_* constants.
NOT_SUPPORTED = 3
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
GPU_IS_LOST = 15

# At most this many events are taken in one wait, so a flood cannot hold the loop.
_DRAIN_LIMIT = 1000


def _code(error: BaseException) -> int | None:
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _Lost(Exception):
    """A call on a GPU answered NVML_ERROR_GPU_IS_LOST."""


@dataclass(frozen=True, slots=True)
class Unavailable:
    """NVML cannot be used on this node; ``reason`` says why, in one line."""

    reason: str


def open_session(nvml: NvmlModule | None = None) -> Session | Unavailable:
    """Initialise NVML, take the inventory and register for XID events."""
    if nvml is None:
        try:
            import pynvml  # the real library, loaded only where it is used
        except ImportError:
            return Unavailable("the nvidia-ml-py package (pynvml) is not installed")
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except (nvml.NVMLError, OSError) as error:
        return Unavailable(_init_failure(error))
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as error:
        _shutdown(nvml)
        return Unavailable(f"NVML could not count the GPUs: {error}")
    if count == 0:
        _shutdown(nvml)
        return Unavailable("NVML found no GPUs on this node")
    return Session(nvml, count)


def _init_failure(error: BaseException) -> str:
    code = _code(error)
    if code == LIBRARY_NOT_FOUND:
        return "NVML library (libnvidia-ml.so.1) not found: no NVIDIA driver on this node?"
    if code == DRIVER_NOT_LOADED:
        return "the NVIDIA driver is not loaded"
    return f"NVML failed to initialise: {error}"


def _shutdown(nvml: NvmlModule) -> None:
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError as error:
        log.debug("nvmlShutdown: %s", error)


def _key(handle: object) -> Hashable:
    """A device handle's identity: the address behind a ctypes pointer (pynvml's
    handles, which NVML hands out anew in each event), else the value itself (a fake's)."""
    if isinstance(handle, ctypes._Pointer):
        return ("address", ctypes.cast(handle, ctypes.c_void_p).value)
    return ("value", handle)


class Session:
    """An initialised NVML with the node's inventory; :meth:`close` shuts it down."""

    def __init__(self, nvml: NvmlModule, count: int) -> None:
        self._nvml = nvml
        self._handles: dict[int, object | None] = {}
        self._by_key: dict[Hashable, int] = {}
        self._by_uuid: dict[str, int] = {}
        self._events: object | None = None
        try:
            self._events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as error:
            log.warning("no NVML event set (%s): XIDs will go unseen", error)
        gpus = tuple(self._gpu(index) for index in range(count))
        self.inventory = Inventory(driver_version=self._driver_version(), gpus=gpus)

    # -- inventory ---------------------------------------------------------------------

    def _driver_version(self) -> str:
        try:
            return _text(self._nvml.nvmlSystemGetDriverVersion())
        except self._nvml.NVMLError:
            return ""

    def _call(self, function: str, *args: object) -> Any:
        """An NVML call; GPU_IS_LOST becomes :class:`_Lost`, other errors pass through."""
        try:
            return getattr(self._nvml, function)(*args)
        except self._nvml.NVMLError as error:
            if _code(error) == GPU_IS_LOST:
                raise _Lost(function) from None
            raise

    def _optional(self, function: str, *args: object, default: Any = None) -> Any:
        """An NVML call whose failure (NotSupported and the like) leaves ``default``."""
        try:
            return self._call(function, *args)
        except self._nvml.NVMLError as error:
            log.debug("%s: %s", function, error)
            return default

    def _gpu(self, index: int) -> GpuInfo:
        self._handles[index] = None
        try:
            handle = self._call("nvmlDeviceGetHandleByIndex", index)
            self._handles[index] = handle
            self._by_key[_key(handle)] = index
            uuid = _text(self._optional("nvmlDeviceGetUUID", handle, default=""))
            self._by_uuid[uuid] = index
            name = _text(self._optional("nvmlDeviceGetName", handle, default=""))
            memory = self._optional("nvmlDeviceGetMemoryInfo", handle)
            mode = self._optional("nvmlDeviceGetMigMode", handle, default=[0, 0])
            mig_on = bool(mode[0] == getattr(self._nvml, "NVML_DEVICE_MIG_ENABLE", 1))
            instances = self._mig_instances(index, handle) if mig_on else ()
            events = self._register(index, handle)
        except _Lost as lost:
            log.warning("GPU %d is lost (%s answered GPU_IS_LOST)", index, lost)
            return GpuInfo(index=index, lost=True, xid_events=False)
        except self._nvml.NVMLError as error:
            # No handle, yet not lost (no permission, say): nothing can be read from it.
            log.warning("GPU %d cannot be opened, so it is not watched: %s", index, error)
            return GpuInfo(index=index, xid_events=False)
        return GpuInfo(
            index=index,
            uuid=uuid,
            name=name,
            memory_mib=0 if memory is None else int(memory.total) // 2**20,
            mig_enabled=mig_on,
            mig_instances=instances,
            xid_events=events,
        )

    def _mig_instances(self, index: int, handle: object) -> tuple[MigInstance, ...]:
        slots = int(self._optional("nvmlDeviceGetMaxMigDeviceCount", handle, default=0))
        found = []
        for slot in range(slots):
            try:
                mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            except self._nvml.NVMLError as error:
                if _code(error) != NOT_FOUND:  # NotFound: an empty slot
                    log.debug("GPU %d MIG slot %d: %s", index, slot, error)
                continue
            uuid = _text(self._optional("nvmlDeviceGetUUID", mig, default=""))
            attributes = self._optional("nvmlDeviceGetAttributes", mig)
            profile = "unknown"
            if attributes is not None:
                profile = mig_profile(
                    gpu_slices=int(attributes.gpuInstanceSliceCount),
                    compute_slices=int(attributes.computeInstanceSliceCount),
                    memory_mb=int(attributes.memorySizeMB),
                )
            # An XID reported against the MIG device still names its physical GPU.
            self._by_key[_key(mig)] = index
            if uuid:
                self._by_uuid[uuid] = index
            found.append(MigInstance(slot=slot, uuid=uuid, profile=profile))
        return tuple(found)

    def _register(self, index: int, handle: object) -> bool:
        if self._events is None:
            return False
        kind = self._nvml.nvmlEventTypeXidCriticalError
        try:
            self._call("nvmlDeviceRegisterEvents", handle, kind, self._events)
        except self._nvml.NVMLError as error:
            if _code(error) == NOT_SUPPORTED:
                log.info("GPU %d does not report XID events: polled only", index)
            else:
                log.warning("GPU %d: XID event registration failed (%s): polled only", index, error)
            return False
        return True

    # -- events ------------------------------------------------------------------------

    def wait(self, seconds: float) -> list[XidEvent] | None:
        """XIDs that arrive within ``seconds`` (returning at the first, with any queued
        behind it); None when there is no event set to wait on, so the caller sleeps."""
        if self._events is None:
            return None
        found: list[XidEvent] = []
        timeout_ms = max(0, int(seconds * 1000))
        while len(found) < _DRAIN_LIMIT:
            try:
                data = self._nvml.nvmlEventSetWait(self._events, timeout_ms)
            except self._nvml.NVMLError as error:
                if _code(error) == TIMEOUT:
                    return found
                # A lost GPU shows in the next poll; the caller must not spin on this.
                log.debug("nvmlEventSetWait: %s", error)
                return found or None
            timeout_ms = 0  # then take what is already queued, without waiting
            event = self._event(data)
            if event is not None:
                found.append(event)
        return found

    def _event(self, data: Any) -> XidEvent | None:
        index = self._by_key.get(_key(data.device))
        if index is None:  # a handle NVML made anew: ask the device who it is
            try:
                index = self._by_uuid.get(_text(self._nvml.nvmlDeviceGetUUID(data.device)))
            except self._nvml.NVMLError:
                index = None
        if index is None:
            log.warning("XID %s on a device NVML did not identify: not attributed", data.eventData)
            return None
        return XidEvent(index=index, xid=int(data.eventData))

    # -- polling -----------------------------------------------------------------------

    def read(self, limits: Limits, events: Iterable[XidEvent] = ()) -> Reading:
        """Faults now: the given XIDs (ignored ones dropped), lost GPUs, heat and power."""
        faults = [
            Fault(index=e.index, reason=tracker.XID, xid=e.xid, message=f"XID {e.xid}")
            for e in events
            if e.xid not in limits.ignored_xids
        ]
        temperatures: dict[int, float] = {}
        power: dict[int, float] = {}
        for gpu in self.inventory.gpus:
            handle = self._handles[gpu.index]
            try:
                if handle is None:
                    if not gpu.lost:
                        continue  # could not be opened: see _gpu
                    raise _Lost("nvmlDeviceGetHandleByIndex")
                celsius = self._optional("nvmlDeviceGetTemperature", handle, self._sensor)
                usage = self._optional("nvmlDeviceGetPowerUsage", handle)
                limit = None
                if limits.power_fraction and usage is not None:
                    limit = self._optional("nvmlDeviceGetEnforcedPowerLimit", handle)
            except _Lost as lost:
                message = f"NVML reports the GPU lost ({lost})"
                faults.append(Fault(index=gpu.index, reason=tracker.LOST, message=message))
                continue
            if celsius is not None:
                temperatures[gpu.index] = float(celsius)
                faults.extend(too_hot(gpu.index, float(celsius), limits))
            if usage is not None:
                power[gpu.index] = usage / 1000
                faults.extend(over_power(gpu.index, usage, limit, limits))
        return Reading(faults=tuple(faults), temperatures_c=temperatures, power_watts=power)

    @property
    def _sensor(self) -> int:
        return int(getattr(self._nvml, "NVML_TEMPERATURE_GPU", 0))

    def close(self) -> None:
        if self._events is not None:
            try:
                self._nvml.nvmlEventSetFree(self._events)
            except self._nvml.NVMLError as error:
                log.debug("nvmlEventSetFree: %s", error)
            self._events = None
        _shutdown(self._nvml)
