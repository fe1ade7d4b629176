"""The forecast: when each pending gang should start, from the live state run forward.

:func:`forecast` takes a core :class:`~queue_controller.core.Snapshot` (what the
controller's translation or a dump gives) and returns each pending gang's
:class:`Eta`: an estimated start, or a stable reason why there is none, what it
waits behind, and what it waits for now.  The controller writes it to PodGroup
``status.eta``; ``queue-controller eta`` and ``plan --eta`` print it.

Why a lean loop over :func:`~queue_controller.core.schedule`, not the engine's
:class:`~queue_controller.sim.engine.run.PolicyRun`: the engine replays a
:class:`~queue_controller.sim.scenario.spec.Scenario`, whose jobs are one pod
set of identical pods with a flat request (``SimJob``), whose cluster is a node
list with no pods of its own, and whose run models binding delays, kube-scheduler,
pods-ready timeouts, faults and meters.  A live snapshot holds what a scenario
cannot say: gangs of several pod sets (a PyTorchJob's master and workers), DRA
claims, topology requests written on the workload, pods that belong to no gang,
room nominated by preemptors, reservations already held, requeue backoffs.  Turning
it into a scenario would lose exactly what makes an estimate right, and would
translate the cluster a second time.  So the forecast keeps the snapshot as the
state, changes only what time changes (gangs end, gangs are admitted, statuses the
controller writes between cycles), and asks the same core at every event: the
engine's event-heap shape, without its model of the world.  Reservations and
backfill come with the core (``Reason.Reserved``, ``Decision.reservation``).

It sits beside ``engine`` and ``report`` at the top of the simulator and imports
none of its packages: only the core.  ``run`` is the loop; ``outcome`` the answers.
"""

from queue_controller.sim.forecast.outcome import Eta, EtaReason, Forecast
from queue_controller.sim.forecast.run import (
    DEFAULT_HORIZON_SECONDS,
    DEFAULT_MAX_CYCLES,
    forecast,
)

__all__ = [
    "DEFAULT_HORIZON_SECONDS",
    "DEFAULT_MAX_CYCLES",
    "Eta",
    "EtaReason",
    "Forecast",
    "forecast",
]
