"""Where a gang's members fit.

``shapes`` says what a gang asks of a node and what a placement is;
``nodeclasses`` is what a class of interchangeable nodes is, and ``classes``
builds them each cycle; ``choosing`` picks the nodes among a class's buckets;
``explain`` words why nodes refused; ``fit`` is the equivalence index that places gangs over
classes and buckets; ``podscan`` places pod by pod, as a scheduler without
gang admission would; ``gangsets`` places a gang's pod sets as one transaction,
a topology group's together.  ``topology/`` keeps a gang within racks and blocks.

Independent of :mod:`..quota`: only preemption and the cycle use both.
"""

from queue_controller.core.placement.fit import (
    EquivalenceIndex,
)
from queue_controller.core.placement.podscan import (
    PodByPodPlacer,
)
from queue_controller.core.placement.shapes import (
    Placement,
)

__all__ = [
    "EquivalenceIndex",
    "Placement",
    "PodByPodPlacer",
]
