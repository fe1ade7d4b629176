"""How long a gang runs once started, and where that estimate came from.

The sources are tried in order: what the user wrote, what like gangs took
before, the deadline the gang will be killed at, and otherwise nothing.  An
unknown runtime is honest: such a gang never backfills onto reserved nodes,
and the room it holds is never promised to anyone.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from queue_controller.core.model.reservations import RuntimeEstimate, RuntimeSource

# Finished gangs needed before their median is trusted.
DEFAULT_MIN_HISTORY = 3

# The random tail Kubernetes and the operators add to generated names ("-x7k2p",
# "-1733312345", "-5f6d8c9b7"): a last dash-separated part that holds a digit.
_GENERATED_TAIL = re.compile(r"-(?=[a-z0-9]{0,15}[0-9])[a-z0-9]{4,16}$")


def base_name(name: str) -> str:
    """An owner's name with its generated suffix removed: like gangs share it."""
    stripped = _GENERATED_TAIL.sub("", name)
    return stripped or name


def runtime_estimate(
    *,
    annotated: float | None,
    history: Sequence[float],
    history_of: str = "",
    min_history: int = DEFAULT_MIN_HISTORY,
    deadline_seconds: float | None = None,
) -> RuntimeEstimate:
    """The estimate for one gang.

    ``annotated`` is its template's ``queue-controller.io/expected-runtime-seconds``;
    ``history`` the runtimes of like gangs that finished (``history_of`` says which);
    ``deadline_seconds`` its ``activeDeadlineSeconds``, an upper bound that also caps
    the others: a gang never runs longer than its deadline.
    """
    estimate: RuntimeEstimate | None = None
    if annotated is not None:
        estimate = RuntimeEstimate(
            float(annotated),
            RuntimeSource.ANNOTATION,
            "queue-controller.io/expected-runtime-seconds",
        )
    elif len(history) >= min_history:
        median = float(statistics.median(history))
        detail = f"median of {len(history)} finished gangs"
        estimate = RuntimeEstimate(
            median, RuntimeSource.HISTORY, f"{detail} of {history_of}" if history_of else detail
        )
    if deadline_seconds is not None:
        if estimate is None:
            return RuntimeEstimate(
                float(deadline_seconds), RuntimeSource.DEADLINE, "activeDeadlineSeconds"
            )
        if estimate.seconds is not None and estimate.seconds > deadline_seconds:
            return RuntimeEstimate(
                float(deadline_seconds),
                RuntimeSource.DEADLINE,
                f"activeDeadlineSeconds, below the {estimate.source.value.lower()} estimate",
            )
    return estimate if estimate is not None else RuntimeEstimate()
