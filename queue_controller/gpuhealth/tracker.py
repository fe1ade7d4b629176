"""When a GPU counts as unhealthy, and when it is trusted again.

Both reporters (the node agent over NVML, the controller over DCGM) feed
faults in and publish :meth:`HealthTracker.unhealthy`.  The clock is passed
in, never read, so the rules are tested without waiting:

* a fault makes its GPU unhealthy at once;
* a condition that persists (a lost GPU, a hot GPU) is reported again at
  every poll, which keeps refreshing ``last_seen``;
* a GPU is healthy again only after ``clear_seconds`` with no new sighting,
  or after an operator's reset.

Faults already published on the Node are loaded back at start-up, so a
restarted reporter does not forget an XID it saw before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from queue_controller.core.model import UnhealthyGpu

# Stable reasons, as they appear in the Node's GPUHealthy condition.
XID = "XidCriticalError"
LOST = "GPULost"
THERMAL = "TemperatureExceeded"
POWER = "PowerExceeded"

# XIDs that an application causes (illegal address, a killed context, ...):
# the NVIDIA device plugin skips the same ones by default, as they say nothing
# about the hardware.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


class HealthTracker:
    def __init__(self, *, clear_seconds: float, known: Iterable[UnhealthyGpu] = ()) -> None:
        if clear_seconds < 0:
            raise ValueError("clear_seconds must not be negative")
        self.clear_seconds = clear_seconds
        self._faults: dict[int, UnhealthyGpu] = {gpu.index: gpu for gpu in known}

    def fault(
        self,
        *,
        index: int,
        now: float,
        reason: str,
        uuid: str = "",
        xid: int | None = None,
        message: str = "",
        mig_devices: Mapping[str, int] | None = None,
        pods: Iterable[str] = (),
    ) -> None:
        """Record a sighting of a fault on GPU ``index``."""
        previous = self._faults.get(index)
        if previous is not None and self._cleared(previous, now):
            previous = None  # that fault ran out its clear period: this is a new one
        xids = () if previous is None else previous.xids
        if xid is not None and xid not in xids:
            xids = (*xids, xid)
        since = now if previous is None else previous.since
        self._faults[index] = UnhealthyGpu(
            index=index,
            uuid=uuid or (previous.uuid if previous else ""),
            # A lost GPU stays reported as lost even if an XID comes after.
            reason=previous.reason if previous and previous.reason == LOST else reason,
            xids=xids,
            since=since,
            last_seen=now,
            message=message or (previous.message if previous else ""),
            mig_devices=dict(mig_devices or (previous.mig_devices if previous else {})),
            pods=tuple(sorted(set(pods) | set(previous.pods if previous else ()))),
        )

    def reset(self) -> int:
        """An operator says the GPUs were repaired: forget every fault.  Returns how many."""
        count = len(self._faults)
        self._faults.clear()
        return count

    def _cleared(self, gpu: UnhealthyGpu, now: float) -> bool:
        return now - gpu.last_seen >= self.clear_seconds

    def unhealthy(self, now: float) -> tuple[UnhealthyGpu, ...]:
        """The GPUs still unhealthy at ``now``, by index; cleared ones are forgotten."""
        for index in [i for i, gpu in self._faults.items() if self._cleared(gpu, now)]:
            del self._faults[index]
        return tuple(self._faults[i] for i in sorted(self._faults))

    def describe(self, index: int) -> UnhealthyGpu | None:
        return self._faults.get(index)
