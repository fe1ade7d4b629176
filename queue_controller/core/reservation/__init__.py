"""Reservation with backfill: a starving head gets named nodes and a start time.

Slurm's backfill scheduler, for gangs.  A Queue's head that has waited
``NoNodeFit`` longer than its ``spec.reservation.afterSeconds`` is given the
nodes where room frees soonest by the running gangs' runtime estimates, and
the time it should free.  Those nodes are withheld from every other gang,
except one whose own estimated end comes a margin before that start
(backfill).

* :mod:`.estimates`: how long a gang runs, and where that estimate came from;
* :mod:`.choose`: which nodes, and from when, for one gang;
* :mod:`.book`: the reservations a cycle holds, withheld from others, and what
  each gang may backfill onto.
"""

from queue_controller.core.reservation.book import ReservationBook
from queue_controller.core.reservation.estimates import (
    DEFAULT_MIN_HISTORY,
    base_name,
    runtime_estimate,
)

__all__ = ["DEFAULT_MIN_HISTORY", "ReservationBook", "base_name", "runtime_estimate"]
