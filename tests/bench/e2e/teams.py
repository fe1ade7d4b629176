"""What every system under test is given alike: the teams, their quotas, their queues.

queue-controller reads them as TeamQuotas and Queues; Kueue as ClusterQueues (with a
ResourceFlavor per GPU pool) and LocalQueues; "no queue" ignores them.  Quotas are in
whole units (GPUs, MIG slices), as both systems write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TeamSpec:
    name: str  # TeamQuota / ClusterQueue name
    namespace: str  # where its Jobs run; its Queue / LocalQueue is named "training" there
    cohort: str = ""
    nominal: Mapping[str, int] = field(default_factory=dict)  # resource -> whole units
    # resource -> most it may borrow from its cohort; absent: no limit.
    borrowing_limit: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """The same waiting rules for both systems (our Queue spec; Kueue's waitForPodsReady)."""

    # Both systems' own default (Kueue's waitForPodsReady.timeout, our Queue's): at 1,000
    # nodes on 2 cores the Job controller alone takes over a minute to make a burst's pods.
    pods_ready_timeout_seconds: int = 300
    backoff_base_seconds: int = 10
    backoff_max_seconds: int = 300
    # Our Queue's spec.reservation.afterSeconds (Kueue has no reservation); None: off.
    reservation_after_seconds: int | None = None


QUEUE_NAME = "training"
