"""The NVML reader against the real driver: skipped where NVML is unavailable (no GPU).

Needs only nvidia-ml-py of this package's dependencies, so it also runs on a bare GPU
machine: ``python -m pytest tests/agent/test_real_nvml.py``.  No fault can be injected
into a real GPU, so this checks the paths a fault would take: events registered and
waited on, handles known again by address, the sensors read, shut down and reopened.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from queue_controller.agent.once import once
from queue_controller.gpuhealth import nvml
from queue_controller.gpuhealth.readings import Limits


@pytest.fixture
def session() -> Iterator[nvml.Session]:
    opened = nvml.open_session()
    if isinstance(opened, nvml.Unavailable):
        pytest.skip(f"no real NVML here: {opened.reason}")
    try:
        yield opened
    finally:
        opened.close()


def test_inventory(session: nvml.Session) -> None:
    inventory = session.inventory
    assert inventory.driver_version
    assert inventory.gpus
    for gpu in inventory.gpus:
        assert gpu.uuid.startswith("GPU-"), gpu
        assert gpu.name
        assert gpu.memory_mib > 1024
        assert not gpu.lost
        if gpu.mig_enabled:
            assert all(m.profile != "unknown" for m in gpu.mig_instances), gpu


def test_events_wait_and_time_out(session: nvml.Session) -> None:
    registered = [gpu.xid_events for gpu in session.inventory.gpus]
    found = session.wait(0.2)
    if any(registered):
        assert found == []  # NVML_ERROR_TIMEOUT: nothing happened
    else:
        assert found is None or found == []


def test_handles_are_known_again_by_address(session: nvml.Session) -> None:
    import pynvml

    for gpu in session.inventory.gpus:
        again = pynvml.nvmlDeviceGetHandleByIndex(gpu.index)
        assert session._by_key[nvml._key(again)] == gpu.index


def test_sensors_read_without_faults(session: nvml.Session) -> None:
    reading = session.read(Limits(max_temperature_c=0, power_fraction=0))
    assert reading.faults == ()
    for gpu in session.inventory.gpus:
        assert 0 < reading.temperatures_c[gpu.index] < 120
        assert reading.power_watts.get(gpu.index, 1.0) > 0


def test_once_document(session: nvml.Session) -> None:
    # Beside the fixture's session: NVML counts nvmlInit calls, so both may be open.
    document = once(limits=Limits())
    print(json.dumps(document, indent=2))  # for whoever runs this on a GPU machine
    assert document["nvml"] == "available"
    assert len(document["gpus"]) >= 1
