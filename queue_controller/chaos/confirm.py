"""Whether a run's fault took hold, and which way of injecting it can take hold at all.

A run judges the controller only on a fault that really happened: a member the run
means to stop that starts all the same (it tolerates the taint, say) is no failure of
the controller, and the run says "could not inject" instead of blaming it.  Both the
choice of method and the reading of the gang here are pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from queue_controller.chaos.observe import GangSeen

# How long the stopped members must stay unstarted, while the others run, for the fault
# to count as in place when the scheduler has not said so itself (and the gang is not
# evicted yet).  Short of any gang's timeout a run is worth making with.
HOLD_SECONDS = 10.0

MethodName = Literal["taint", "placeholder"]
METHODS: tuple[MethodName, ...] = ("taint", "placeholder")


class NotInjected(Exception):
    """The fault could not be put in place, or did not take hold: why (for the report)."""


@dataclass(frozen=True, slots=True)
class Method:
    """How a run stops members: a NoSchedule taint, or a placeholder pod on their GPUs."""

    name: MethodName
    why: str


def tolerates(toleration: Mapping[str, object], taint: Mapping[str, object]) -> bool:
    """Kubernetes' own rule (``Toleration.ToleratesTaint`` in k8s.io/api/core/v1)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def describe_toleration(toleration: Mapping[str, object]) -> str:
    shown = ", ".join(f"{k}: {toleration[k]}" for k in sorted(toleration))
    return "{" + shown + "}"


def choose_method(
    tolerations: Iterable[Mapping[str, object]],
    taint: Mapping[str, object],
    *,
    forced: MethodName | None = None,
) -> Method:
    """The taint when nothing the stopped members (or their replacements) carry tolerates
    it; otherwise a placeholder pod on their GPUs, which no toleration gets past.

    ``forced`` (``--method``) is taken as given, with the reason it would not have been
    chosen: the confirmation then says whether it took hold.
    """
    tolerating = next((t for t in tolerations if tolerates(t, taint)), None)
    key = f"{taint.get('key')}:{taint.get('effect')}"
    if tolerating is None:
        why = f"the members do not tolerate the taint {key}"
        if forced == "placeholder":
            return Method("placeholder", f"asked for (--method placeholder); {why}")
        return Method("taint", why)
    why = (
        f"the members tolerate the taint {key} (toleration "
        f"{describe_toleration(tolerating)}), so it cannot keep them off their nodes"
    )
    if forced == "taint":
        return Method("taint", f"asked for (--method taint), although {why}")
    return Method("placeholder", why)


State = Literal["confirmed", "failed", "pending"]


@dataclass
class Confirmation:
    """Whether the fault holds, look by look at the gang (``seconds`` since injection).

    ``kept`` names the live members the run leaves alone; every other live member (a
    replacement of one it deleted, or one it stopped before binding) must not start.

    * failed: one of them is bound to a node before the gang is evicted;
    * confirmed: the scheduler found one unschedulable; or one released by the
      controller (ungated) has stayed unbound for ``hold`` seconds; or the gang was
      evicted with none of them started.

    A member not made yet (a Job makes its replacements after a backoff) or still held
    by the admission gate shows nothing either way: the run waits for it.
    """

    kept: frozenset[str]
    hold: float = HOLD_SECONDS
    waiting_since: dict[str, float] = field(default_factory=dict)  # released, unbound

    def observe(self, gang: GangSeen, *, seconds: float, evicted: bool) -> tuple[State, str]:
        stopped = [m for m in gang.live if m.name not in self.kept]
        started = [m for m in stopped if m.node]
        if started and not evicted:
            first = started[0]
            return (
                "failed",
                f"Pod {gang.namespace}/{first.name} started on {first.node} all the same",
            )
        blocked = [m for m in stopped if m.unschedulable]
        if blocked:
            first = blocked[0]
            return (
                "confirmed",
                f"Pod {gang.namespace}/{first.name} cannot start: {first.unschedulable}",
            )
        if evicted:
            return "confirmed", "evicted with none of the stopped members started"
        for member in stopped:
            if not member.gated:
                self.waiting_since.setdefault(member.name, seconds)
        running = sum(1 for m in gang.live if m.name in self.kept and m.phase == "Running")
        for name, since in sorted(self.waiting_since.items()):
            if seconds - since >= self.hold and any(m.name == name for m in stopped):
                return (
                    "confirmed",
                    f"Pod {gang.namespace}/{name} released and still not started after "
                    f"{self.hold:.0f}s, while {running} others run",
                )
        return "pending", ""
