"""Requeue after eviction: exponential backoff and the limit past which a gang gives up.

Kueue's ``requeuingStrategy`` semantics, per Queue instead of globally: the
n-th requeue waits ``min(base * 2**(n-1), max)`` seconds, and a gang evicted
more than ``backoffLimit`` times is deactivated rather than requeued.
"""

from __future__ import annotations

from dataclasses import dataclass

from queue_controller.core.model.objects import RequeuePolicy


@dataclass(frozen=True, slots=True)
class Requeue:
    count: int  # requeues so far, this one included
    at: float  # when the gang may be admitted again
    deactivated: bool  # past the limit: never retried


def backoff_seconds(policy: RequeuePolicy, count: int) -> float:
    """Delay before the ``count``-th requeue (1-based)."""
    if count <= 0:
        return 0.0
    delay = policy.backoff_base_seconds * 2 ** min(count - 1, 62)
    return float(min(delay, policy.backoff_max_seconds))


def requeue(policy: RequeuePolicy, *, previous: int, now: float) -> Requeue:
    count = previous + 1
    deactivated = policy.backoff_limit is not None and count > policy.backoff_limit
    return Requeue(count, now + backoff_seconds(policy, count), deactivated)


def pods_ready_timeout(
    *, pod_group_seconds: int | None, queue_seconds: int | None, default_seconds: int
) -> int:
    """The PodGroup's timeout, else the Queue's, else the controller's default."""
    for value in (pod_group_seconds, queue_seconds):
        if value is not None:
            return value
    return default_seconds
