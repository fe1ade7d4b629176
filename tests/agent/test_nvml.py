"""Reading GPUs through NVML (gpuhealth/nvml.py), against the fake and the real pynvml."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from queue_controller.gpuhealth import nvml
from queue_controller.gpuhealth.inventory import mig_profile
from queue_controller.gpuhealth.readings import Limits, XidEvent
from queue_controller.gpuhealth.tracker import APPLICATION_XIDS, LOST, POWER, THERMAL, XID
from tests.fakes.fake_pynvml import FakeGpu, FakeHandle, FakeNvml, mig


def opened(fake: FakeNvml) -> nvml.Session:
    session = nvml.open_session(fake)
    assert isinstance(session, nvml.Session), session
    return session


# -- the fake is faithful to pynvml --------------------------------------------------


def test_pynvml_maps_an_error_code_to_its_class() -> None:
    # What the agent relies on: pynvml raises NVMLError(code), which is the subclass.
    error = pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
    assert type(error) is pynvml.NVMLError_Timeout
    assert error.value == nvml.TIMEOUT
    assert isinstance(error, pynvml.NVMLError)


def test_return_codes_are_pynvmls() -> None:
    assert nvml.NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml.NOT_FOUND == pynvml.NVML_ERROR_NOT_FOUND
    assert nvml.DRIVER_NOT_LOADED == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert nvml.TIMEOUT == pynvml.NVML_ERROR_TIMEOUT
    assert nvml.LIBRARY_NOT_FOUND == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    assert nvml.GPU_IS_LOST == pynvml.NVML_ERROR_GPU_IS_LOST


def test_the_fake_only_has_names_pynvml_has() -> None:
    names = [n for n in vars(FakeNvml) if n.startswith(("nvml", "NVML"))]
    assert "nvmlEventSetWait" in names
    missing = [n for n in names if not hasattr(pynvml, n)]
    assert not missing, f"the fake invents {missing}"
    assert FakeNvml().NVMLError_GpuIsLost is pynvml.NVMLError_GpuIsLost


def test_the_fake_raises_pynvmls_error_classes() -> None:
    fake = FakeNvml(1)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    fake.nvmlInit()
    fake.lose(0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetTemperature(FakeHandle(0), pynvml.NVML_TEMPERATURE_GPU)


def test_real_pynvml_opens_or_says_why_not() -> None:
    # On a machine without the driver: Unavailable, never an exception. With one: a session.
    result = nvml.open_session()
    if isinstance(result, nvml.Session):
        assert result.inventory.gpus
        result.close()
    else:
        assert result.reason


def test_ctypes_handles_are_known_by_address() -> None:
    # NVML hands out a new pointer object per event; the address names the device.
    first = ctypes.cast(ctypes.c_void_p(0x5000), pynvml.c_nvmlDevice_t)
    again = ctypes.cast(ctypes.c_void_p(0x5000), pynvml.c_nvmlDevice_t)
    other = ctypes.cast(ctypes.c_void_p(0x6000), pynvml.c_nvmlDevice_t)
    assert first is not again
    assert nvml._key(first) == nvml._key(again) != nvml._key(other)
    assert nvml._key(FakeHandle(1)) == nvml._key(FakeHandle(1))


# -- no driver, no GPUs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"),
    ],
)
def test_no_driver_is_unavailable_not_an_error(code: int, says: str) -> None:
    result = nvml.open_session(FakeNvml(init_error=code))
    assert isinstance(result, nvml.Unavailable)
    assert says in result.reason
    assert "\n" not in result.reason


def test_no_gpus_is_unavailable_and_shuts_nvml_down() -> None:
    fake = FakeNvml(0)
    result = nvml.open_session(fake)
    assert result == nvml.Unavailable("NVML found no GPUs on this node")
    assert not fake.initialised


# -- inventory -------------------------------------------------------------------------


def test_inventory_of_eight_gpus() -> None:
    session = opened(FakeNvml(8))
    inventory = session.inventory
    assert inventory.driver_version == "550.54.15"
    assert [g.index for g in inventory.gpus] == list(range(8))
    assert len({g.uuid for g in inventory.gpus}) == 8
    gpu = inventory.gpus[0]
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.memory_mib == 81559
    assert not gpu.mig_enabled
    assert gpu.mig_devices() == {}
    assert all(g.xid_events for g in inventory.gpus)


def test_mig_instances_and_their_profiles() -> None:
    layout = [mig("1g.10gb"), None, mig("1g.10gb"), mig("3g.40gb"), mig("1g.10gb")]
    fake = FakeNvml([FakeGpu(mig=layout), FakeGpu()])
    gpu, plain = opened(fake).inventory.gpus
    assert gpu.mig_enabled
    assert [(m.slot, m.profile) for m in gpu.mig_instances] == [
        (0, "1g.10gb"),
        (2, "1g.10gb"),
        (3, "3g.40gb"),
        (4, "1g.10gb"),
    ]
    assert all(m.uuid.startswith("MIG-") for m in gpu.mig_instances)
    assert gpu.mig_devices() == {"1g.10gb": 3, "3g.40gb": 1}
    assert not plain.mig_enabled


@pytest.mark.parametrize(
    ("gpu_slices", "compute_slices", "memory_mb", "profile"),
    [
        (1, 1, 4864, "1g.5gb"),  # A100 40GB
        (1, 1, 9728, "1g.10gb"),  # A100 80GB
        (7, 7, 81050, "7g.80gb"),
        (3, 1, 40192, "1c.3g.40gb"),  # a compute instance within a GPU instance
    ],
)
def test_mig_profile_names(
    gpu_slices: int, compute_slices: int, memory_mb: int, profile: str
) -> None:
    assert (
        mig_profile(gpu_slices=gpu_slices, compute_slices=compute_slices, memory_mb=memory_mb)
        == profile
    )


def test_mig_mode_not_supported_means_no_mig() -> None:
    gpu = opened(FakeNvml([FakeGpu(mig_supported=False)])).inventory.gpus[0]
    assert not gpu.mig_enabled
    assert gpu.xid_events


def test_gpu_without_xid_events_is_polled_only() -> None:
    fake = FakeNvml([FakeGpu(), FakeGpu(events_supported=False)])
    session = opened(fake)
    assert [g.xid_events for g in session.inventory.gpus] == [True, False]
    assert session.inventory.gpus[1].as_json()["xidEvents"] == "not supported: polled only"
    fake.gpus[1].temperature_c = 99
    assert [f.reason for f in session.read(Limits()).faults] == [THERMAL]


# -- events and faults -------------------------------------------------------------------


def test_xid_event_maps_back_to_its_gpu() -> None:
    fake = FakeNvml(8)
    session = opened(fake)
    assert session.wait(1.0) == []
    fake.xid(3, 79)
    fake.xid(5, 13)
    events = session.wait(1.0)
    assert events == [XidEvent(3, 79), XidEvent(5, 13)]
    faults = session.read(Limits(), events).faults
    assert [(f.index, f.reason, f.xid) for f in faults] == [(3, XID, 79)]  # 13 is ignored
    assert 13 in APPLICATION_XIDS


def test_xid_from_a_mig_device_names_the_physical_gpu() -> None:
    fake = FakeNvml([FakeGpu(), FakeGpu(mig=[mig("1g.10gb"), mig("1g.10gb")])])
    session = opened(fake)
    fake.xid(1, 94, mig_slot=1)
    assert session.wait(0) == [XidEvent(1, 94)]


def test_ignore_set_is_configurable() -> None:
    session = opened(FakeNvml(2))
    events = [XidEvent(0, 13), XidEvent(1, 79)]
    everything = session.read(Limits(ignored_xids=frozenset()), events).faults
    assert [f.xid for f in everything] == [13, 79]
    assert session.read(Limits(ignored_xids=frozenset({79, 13})), events).faults == ()


def test_lost_gpu() -> None:
    fake = FakeNvml(4)
    session = opened(fake)
    fake.lose(2)
    faults = session.read(Limits()).faults
    assert [(f.index, f.reason) for f in faults] == [(2, LOST)]
    assert "lost" in faults[0].message


def test_gpu_lost_before_the_inventory() -> None:
    fake = FakeNvml(2)
    fake.lose(1)
    session = opened(fake)
    assert session.inventory.gpus[1].lost
    assert [(f.index, f.reason) for f in session.read(Limits()).faults] == [(1, LOST)]


def test_temperature_limit() -> None:
    fake = FakeNvml(2)
    session = opened(fake)
    fake.gpus[1].temperature_c = 91
    reading = session.read(Limits(max_temperature_c=90))
    assert reading.temperatures_c == {0: 40.0, 1: 91.0}
    assert [(f.index, f.reason, f.message) for f in reading.faults] == [
        (1, THERMAL, "91 C, above the limit of 90 C")
    ]
    assert session.read(Limits(max_temperature_c=0)).faults == ()  # 0: no limit


def test_power_limit() -> None:
    fake = FakeNvml(2)
    session = opened(fake)
    fake.gpus[0].power_mw = 740_000  # 1.057 x the 700 W limit
    reading = session.read(Limits(power_fraction=1.05))
    assert reading.power_watts == {0: 740.0, 1: 300.0}
    assert [(f.index, f.reason) for f in reading.faults] == [(0, POWER)]
    assert "700 W" in reading.faults[0].message
    assert session.read(Limits(power_fraction=1.1)).faults == ()
    assert session.read(Limits(power_fraction=0)).faults == ()


def test_power_not_supported_is_no_reading_and_no_fault() -> None:
    session = opened(FakeNvml([FakeGpu(power_supported=False)]))
    reading = session.read(Limits())
    assert reading.power_watts == {}
    assert reading.faults == ()


def test_close_frees_the_event_set_and_shuts_down() -> None:
    fake = FakeNvml(2)
    session = opened(fake)
    assert fake.event_sets_open == 1
    session.close()
    assert fake.event_sets_open == 0
    assert not fake.initialised
