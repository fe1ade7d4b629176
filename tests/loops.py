"""A scheduling loop over a state and a fake gateway, as the controller builds one.

The tests that run whole cycles (or the loop itself) build it here, so that a new
argument of :class:`SchedulingLoop` is given in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queue_controller.controller.apply import Applier
from queue_controller.controller.leader import Leadership
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.loop import SchedulingLoop
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.server import Health
from queue_controller.controller.settings import Settings
from queue_controller.controller.state import ClusterState
from tests.fakes.gateway import FakeGateway


def scheduling_loop(
    state: ClusterState,
    *,
    now: float,
    gateway: FakeGateway | None = None,
    applier: Applier | None = None,
    metrics: Metrics | None = None,
    clock: Callable[[], float] | None = None,
    **settings: Any,
) -> SchedulingLoop:
    """A leading loop, one cycle a second at most by default; ``settings`` override the
    loop's own (``tick_seconds``, ``period_seconds``, ``creation_backlog``, ...)."""
    metrics = metrics if metrics is not None else Metrics()
    clock = clock if clock is not None else (lambda: now)
    if applier is None:
        gateway = gateway if gateway is not None else FakeGateway()
        applier = Applier(gateway, state, None, metrics, clock=clock)
    options: dict[str, Any] = {
        "tick_seconds": 1,
        "batch_seconds": 0,
        "status_writes_per_cycle": 100,
        **settings,
    }
    return SchedulingLoop(
        state=state,
        planner=Planner(300),
        applier=applier,
        leadership=Leadership(Settings(leader_election=False), metrics),
        metrics=metrics,
        health=Health(),
        clock=clock,
        **options,
    )
