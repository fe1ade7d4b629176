"""The admission cycle: one pass over the queue, admitting what fits.

``admission`` is the cycle (:func:`schedule`); ``gangshapes`` turns prepared
gangs into the placer's shapes; ``devicecycle`` gives prepared gangs their
DRA devices from ``devicecatalog``, the cycle's catalog of devices (built
once per cycle, from the snapshot's DRA objects and the usage that
:mod:`..rules.prepared` counts, which is why it is here rather than in
:mod:`..devices`); ``pacing`` limits admission to what the Job controller can
create; ``replacement`` swaps a lost node of an admitted topology gang's plan for
one of its domain, before any pending gang is tried.
"""

from queue_controller.core.cycle.admission import (
    CycleResult,
    schedule,
)
from queue_controller.core.cycle.pacing import (
    DEFAULT_CREATION_BACKLOG,
)
from queue_controller.core.cycle.replacement import NOT_REPLACED, lost_reason, policy, replaces

__all__ = [
    "DEFAULT_CREATION_BACKLOG",
    "NOT_REPLACED",
    "CycleResult",
    "lost_reason",
    "policy",
    "replaces",
    "schedule",
]
