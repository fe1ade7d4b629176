"""The typed views of a cycle, from plain objects, as the controller makes them."""

from __future__ import annotations

from queue_controller.controller.state import ClusterState
from queue_controller.errors import InputError
from queue_controller.kube.fields import describe
from queue_controller.kube.snapshot import Located, Translation, translate


def seen(state: ClusterState, now: float) -> Translation:
    """Translate a state once, as SchedulingLoop._plan does; a bad object fails the test."""

    def skip(error: InputError) -> None:
        raise AssertionError(f"a test object was left out: {error}")

    return translate((Located(describe(o), o) for o in state.all()), now=now, skip=skip)
