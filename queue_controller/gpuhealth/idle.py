"""Idle gangs: pods whose GPUs have done nothing for a while, from DCGM's GR_ENGINE_ACTIVE.

GR_ENGINE_ACTIVE (the share of time the graphics/compute engine was busy) is
used rather than GPU_UTIL, which only says whether any kernel ran at all.  A
pod on several GPUs or MIG instances is busy if any of them is.  Pods the
exporter maps to no GPU, or whose GPU does not export the profiling field,
have no samples and are left out of the judgement rather than called idle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from queue_controller.errors import InputError
from queue_controller.gpuhealth.dcgm import GpuSample, pod_activity


@dataclass(slots=True, kw_only=True)
class _Pod:
    quiet_since: float | None  # None: busy at its latest sample
    last_seen: float


class IdleTracker:
    def __init__(self, *, threshold: float, window_seconds: float) -> None:
        if not 0 <= threshold <= 1:
            raise InputError(f"must be between 0 and 1, got {threshold:g}", field="threshold")
        if window_seconds < 0:
            raise InputError(
                f"must not be negative, got {window_seconds:g}", field="window_seconds"
            )
        self.threshold = threshold
        self.window_seconds = window_seconds
        self._pods: dict[str, _Pod] = {}

    def observe(self, samples: Iterable[GpuSample], *, now: float) -> None:
        """Take one scrape.  A pod missing from it keeps its state, for a window at most."""
        for pod, active in pod_activity(samples).items():
            state = self._pods.get(pod)
            if active >= self.threshold:
                quiet_since = None
            elif state is None or state.quiet_since is None:
                quiet_since = now
            else:
                quiet_since = state.quiet_since
            self._pods[pod] = _Pod(quiet_since=quiet_since, last_seen=now)
        for pod in [p for p, state in self._pods.items() if self._stale(state, now)]:
            del self._pods[pod]

    def _stale(self, state: _Pod, now: float) -> bool:
        # Gone for longer than the window: it may have moved, or finished, and
        # its old quiet stretch must not vouch for a new pod of the same name.
        return now - state.last_seen > self.window_seconds

    def idle_since(self, pods: Iterable[str], *, now: float) -> float | None:
        """Since when all of ``pods`` that have samples were quiet, if for a window already.

        None when any of them is busy, when none has samples, or when the
        quiet stretch is shorter than the window.
        """
        states = [s for p in set(pods) if (s := self._pods.get(p)) and not self._stale(s, now)]
        if not states:
            return None
        starts = [s.quiet_since for s in states]
        if any(start is None for start in starts):
            return None
        since = max(start for start in starts if start is not None)
        return since if since <= now - self.window_seconds else None
