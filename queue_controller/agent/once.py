"""``node-agent --once``: what NVML shows now, as JSON, touching no cluster.

Kept apart from the service so that it needs neither the Kubernetes client nor
pydantic: it runs on a bare GPU machine with only nvidia-ml-py installed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from queue_controller.gpuhealth.nvml import NvmlModule, Unavailable, open_session
from queue_controller.gpuhealth.readings import Limits
from queue_controller.gpuhealth.tracker import HealthTracker


def once(
    *,
    limits: Limits,
    nvml: NvmlModule | None = None,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """What NVML shows now, as a JSON-ready document; touches no cluster.

    XID events are only delivered from registration on, so a single look finds
    lost, hot and over-power GPUs, and XIDs only if one arrives meanwhile.
    """
    opened = open_session(nvml)
    if isinstance(opened, Unavailable):
        return {"nvml": "unavailable", "reason": opened.reason}
    try:
        reading = opened.read(limits, opened.wait(0) or [])
    finally:
        opened.close()
    now = clock()
    found = HealthTracker(clear_seconds=float("inf"))  # one look: nothing clears
    gpus = opened.inventory.by_index()
    for fault in reading.faults:
        gpu = gpus.get(fault.index)
        found.fault(
            index=fault.index,
            now=now,
            reason=fault.reason,
            uuid=gpu.uuid if gpu else "",
            xid=fault.xid,
            message=fault.message,
            mig_devices=gpu.mig_devices() if gpu else None,
        )
    unhealthy = [found.describe(i) for i in sorted(gpus)]
    document = opened.inventory.as_json()
    for entry in document["gpus"]:
        index = entry["index"]
        entry["healthy"] = found.describe(index) is None
        entry["temperatureC"] = reading.temperatures_c.get(index)
        entry["powerWatts"] = reading.power_watts.get(index)
    return {
        "nvml": "available",
        **document,
        "unhealthy": [
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "reason": gpu.reason,
                "xids": list(gpu.xids),
                "message": gpu.message,
                "migDevices": dict(gpu.mig_devices),
            }
            for gpu in unhealthy
            if gpu is not None
        ],
        "limits": {
            "maxTemperatureC": limits.max_temperature_c or None,
            "powerFraction": limits.power_fraction or None,
            "ignoredXids": sorted(limits.ignored_xids),
        },
    }
