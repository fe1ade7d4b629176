"""What one look at the GPUs found: XIDs, faults and sensor values, and the limits applied.

Values only; :mod:`queue_controller.gpuhealth.nvml` makes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from queue_controller.gpuhealth import tracker


@dataclass(frozen=True, slots=True)
class Limits:
    """What counts as a fault besides XIDs and lost GPUs."""

    max_temperature_c: float = 90.0  # 0: never a fault
    power_fraction: float = 1.05  # of the enforced power limit; 0: never a fault
    ignored_xids: frozenset[int] = tracker.APPLICATION_XIDS


@dataclass(frozen=True, slots=True)
class XidEvent:
    index: int
    xid: int


@dataclass(frozen=True, slots=True)
class Fault:
    """One sighting of a fault, for :meth:`HealthTracker.fault`."""

    index: int
    reason: str  # tracker.XID | LOST | THERMAL | POWER
    xid: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Reading:
    faults: tuple[Fault, ...] = ()
    temperatures_c: dict[int, float] = field(default_factory=dict)
    power_watts: dict[int, float] = field(default_factory=dict)


def too_hot(index: int, celsius: float, limits: Limits) -> list[Fault]:
    if not limits.max_temperature_c or celsius <= limits.max_temperature_c:
        return []
    message = f"{celsius:g} C, above the limit of {limits.max_temperature_c:g} C"
    return [Fault(index=index, reason=tracker.THERMAL, message=message)]


def over_power(index: int, usage_mw: float, limit_mw: float | None, limits: Limits) -> list[Fault]:
    if not limits.power_fraction or not limit_mw or usage_mw <= limits.power_fraction * limit_mw:
        return []
    message = (
        f"{usage_mw / 1000:.0f} W, above {limits.power_fraction:g} x "
        f"the enforced limit of {limit_mw / 1000:.0f} W"
    )
    return [Fault(index=index, reason=tracker.POWER, message=message)]
