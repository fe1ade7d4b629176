"""What a decision changes of a PodGroup's reservation fields (docs/reservation.md).

``status.reservedPlacement``, ``reservedStart`` and ``reservationMadeAt`` hold a
reservation across cycles and restarts (the core reads them back as
``Workload.reservation``); ``noFitSince`` says since when the gang has waited for room,
which is what ``spec.reservation.afterSeconds`` is counted from; ``runtimeEstimate``
says how long the gang should run and why.  Each is written only when it changes, as
a merge patch (``None`` removes a field), so a gang whose state holds costs no write.
"""

from __future__ import annotations

from queue_controller.api.v1alpha1 import PodGroup
from queue_controller.controller.status import iso, room_patch
from queue_controller.core.model import Decision, Reason, Reservation, RuntimeEstimate
from queue_controller.kube.fields import epoch_seconds

Fields = dict[str, object]
NO_FIT = frozenset({Reason.NO_NODE_FIT, Reason.RESERVED})
RESERVATION_FIELDS = ("reservedPlacement", "reservedStart", "reservationMadeAt")


def runtime_status(runtime: RuntimeEstimate) -> Fields:
    out: Fields = {"source": runtime.source.value, "detail": runtime.detail[:1024]}
    if runtime.seconds is not None:
        out["seconds"] = round(runtime.seconds, 3)
    return out


def pending_fields(
    group: PodGroup | None, decision: Decision, runtime: RuntimeEstimate, now: float
) -> Fields:
    """The reservation fields a Pending (or Invalid) decision changes."""
    status = group.status if group is not None else None
    out: Fields = {}
    held = _held(group)
    wanted = decision.reservation
    if wanted is not None:
        if held is None or _as_status(wanted) != _as_status(held):
            out.update(_as_status(wanted))
            out["reservedPlacement"] = room_patch(
                status.reservedPlacement if status else {}, wanted.placement
            )
    elif _any_reservation(group):
        out.update(dict.fromkeys(RESERVATION_FIELDS))
    waiting = decision.reason in NO_FIT
    since = status.noFitSince if status is not None else None
    was_waiting = status is not None and status.reason in {r.value for r in NO_FIT}
    # Written as the wait begins, with the reason (no write of its own); a PodGroup
    # waiting since before it was kept is read by its condition's transition.
    if waiting and not was_waiting:
        out["noFitSince"] = iso(now)
    elif not waiting and since is not None:
        out["noFitSince"] = None
    out.update(_runtime_changed(group, runtime))
    return out


def settled_fields(group: PodGroup | None, runtime: RuntimeEstimate | None = None) -> Fields:
    """What an admission or a preemption clears: the gang no longer waits for room, and
    any reservation it held ends (a preemptor holds its room as nominatedPlacement)."""
    out: Fields = {}
    if _any_reservation(group):
        out.update(dict.fromkeys(RESERVATION_FIELDS))
    if group is not None and group.status.noFitSince is not None:
        out["noFitSince"] = None
    if runtime is not None:
        out.update(_runtime_changed(group, runtime))
    return out


def is_new(group: PodGroup | None, reservation: Reservation | None) -> bool:
    """Whether ``reservation`` was made this cycle (not the one the PodGroup holds)."""
    if reservation is None:
        return False
    held = _held(group)
    return held is None or iso(held.made) != iso(reservation.made)


def _held(group: PodGroup | None) -> Reservation | None:
    if group is None:
        return None
    status = group.status
    if not status.reservedPlacement or status.reservedStart is None:
        return None
    start = epoch_seconds(status.reservedStart)
    made = status.reservationMadeAt
    return Reservation(
        placement=status.reservedPlacement,
        start=start,
        made=epoch_seconds(made) if made is not None else start,
    )


def _any_reservation(group: PodGroup | None) -> bool:
    if group is None:
        return False
    status = group.status
    return bool(status.reservedPlacement) or any(
        getattr(status, name) is not None for name in RESERVATION_FIELDS[1:]
    )


def _as_status(reservation: Reservation) -> Fields:
    return {
        "reservedPlacement": {
            name: dict(nodes) for name, nodes in sorted(reservation.placement.items())
        },
        "reservedStart": iso(reservation.start),
        "reservationMadeAt": iso(reservation.made),
    }


def _runtime_changed(group: PodGroup | None, runtime: RuntimeEstimate) -> Fields:
    wanted = runtime_status(runtime)
    held = group.status.runtimeEstimate if group is not None else None
    if held is None and not runtime.known:
        return {}  # nothing said, nothing to say: no write for it
    current = held.model_dump(mode="json", exclude_none=True) if held is not None else None
    if current == wanted:
        return {}
    return {"runtimeEstimate": wanted | {"seconds": wanted.get("seconds")}}
