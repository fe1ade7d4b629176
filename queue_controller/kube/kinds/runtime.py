"""What a gang says of how long it runs: the runtime annotation, its deadline, its class.

Reservation with backfill (core/reservation) rests on runtime estimates.  A kind reads
what its objects say here, once per object version, as :class:`RuntimeAsk` on its
facts; the estimate itself (annotation, then the journal's history, then the deadline
as an upper bound) is the core's :func:`~queue_controller.core.reservation.runtime_estimate`.

* ``queue-controller.io/expected-runtime-seconds`` on a pod template's annotations
  (the first pod set that has it), else on the object's own;
* ``activeDeadlineSeconds``, the object's or a template's: the earliest of them;
* the label ``queue-controller.io/runtime-class``: like gangs share their history.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from queue_controller.core.model import RuntimeEstimate
from queue_controller.core.reservation import base_name, runtime_estimate
from queue_controller.errors import InputError, shown

RUNTIME_ANNOTATION = "queue-controller.io/expected-runtime-seconds"
RUNTIME_CLASS_LABEL = "queue-controller.io/runtime-class"
# Ten years: beyond it an estimate says nothing a reservation could use.
MAX_RUNTIME_SECONDS = 10 * 365 * 86400
_SECONDS = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,9})?$")

# Finished runtimes of like gangs: (namespace, queue, key) -> seconds, where the key is
# :func:`history_key`'s.  Read from the journal by the controller (controller/runtimes.py).
RuntimeHistory = Mapping[tuple[str, str, str], tuple[float, ...]]


@dataclass(frozen=True, slots=True)
class RuntimeAsk:
    """What one gang's objects say of its runtime."""

    seconds: float | None = None  # the annotation; None: not written
    deadline: float | None = None  # activeDeadlineSeconds; None: none
    runtime_class: str = ""  # the queue-controller.io/runtime-class label


NO_ASK = RuntimeAsk()


def expected_runtime(sources: Iterable[tuple[str, Mapping[str, str]]]) -> float | None:
    """The annotation from the first of ``sources`` ((annotations' field path, annotations))
    that has it; None if none does.  InputError naming the annotation if it is no number
    of seconds."""
    for path, written in sources:
        raw = written.get(RUNTIME_ANNOTATION)
        if raw is None:
            continue
        field = f"{path}[{RUNTIME_ANNOTATION}]"
        if not _SECONDS.match(raw.strip()):
            raise InputError(
                f"{shown(raw)} is not a number of seconds (such as 3600 or 90.5)", field=field
            )
        seconds = float(raw)
        if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_RUNTIME_SECONDS:
            raise InputError(
                f"{shown(raw)}: a runtime is more than 0 and at most {MAX_RUNTIME_SECONDS}s",
                field=field,
            )
        return seconds
    return None


def earliest_deadline(values: Iterable[tuple[str, object]]) -> float | None:
    """The smallest ``activeDeadlineSeconds`` of ``values`` ((field path, raw value));
    None when none is set.  InputError naming the field if one is not a positive integer."""
    found: float | None = None
    for field, raw in values:
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise InputError(
                f"{shown(raw)}: a deadline is a whole number of seconds, 1 or more", field=field
            )
        found = float(raw) if found is None else min(found, float(raw))
    return found


def history_key(runtime_class: str, name: str) -> str:
    """What like gangs share in the journal's history: their runtime class, else their
    owner's name without its generated suffix (``sweep-7f9c2`` and ``sweep-x2k4p``)."""
    return f"class:{runtime_class}" if runtime_class else f"name:{base_name(name)}"


def estimate(
    ask: RuntimeAsk,
    *,
    namespace: str,
    queue: str,
    name: str,
    history: RuntimeHistory,
    min_history: int,
) -> RuntimeEstimate:
    """One gang's runtime estimate, from what it asks and like gangs' history."""
    key = history_key(ask.runtime_class, name)
    like = history.get((namespace, queue, key), ()) if ask.seconds is None else ()
    what = f"runtime class {ask.runtime_class}" if ask.runtime_class else f"{base_name(name)}-*"
    return runtime_estimate(
        annotated=ask.seconds,
        history=like,
        history_of=f"{what} in queue {namespace}/{queue}",
        min_history=min_history,
        deadline_seconds=ask.deadline,
    )


def runtime_ask(
    *,
    annotations: Iterable[tuple[str, Mapping[str, str]]],
    deadlines: Iterable[tuple[str, object]] = (),
    labels: Mapping[str, str],
) -> RuntimeAsk:
    """A kind's :class:`RuntimeAsk`: ``annotations`` in the order they are tried (pod
    templates first, then the object's own), ``deadlines`` every activeDeadlineSeconds
    that bounds it; InputError naming the field that cannot be read."""
    return RuntimeAsk(
        seconds=expected_runtime(annotations),
        deadline=earliest_deadline(deadlines),
        runtime_class=labels.get(RUNTIME_CLASS_LABEL, ""),
    )
