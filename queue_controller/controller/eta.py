"""Each pending gang's estimated start, written to its PodGroup's ``status.eta``.

The scheduling loop hands over each cycle's translation (:meth:`EtaWriter.offer`,
a reference: nothing is copied or read again); at most every ``interval_seconds``
the writer runs the forecast (``sim/forecast``) over the latest one, in a thread
of its own, and writes what changed.  The cycle never waits for it: the forecast
is off the admission cycle's critical path, and bounded in cost by its horizon
and its cycles (``max_cycles`` runs of the core at most, plus one small cycle per
gang that stalls).  Only the leader writes.

A start is written again only when it moved by at least ``interval_seconds`` (a
forecast made a minute later says the same thing a minute later), or its reason
or what it waits behind changed; a gang that is no longer pending has its
``status.eta`` removed.  Writes are merge patches of ``status.eta`` alone, made
unconditionally: they touch no field a cycle writes.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.core import WorkloadPhase
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import epoch_seconds, iso
from queue_controller.kube.gangs import GangView
from queue_controller.kube.snapshot import Translation
from queue_controller.kube.views import Ref
from queue_controller.sim.forecast import DEFAULT_HORIZON_SECONDS, DEFAULT_MAX_CYCLES, Eta, forecast

log = logging.getLogger(__name__)
DEFAULT_INTERVAL_SECONDS = 60.0
MAX_AFTER = 16  # the CRD's maxItems for status.eta.after
MAX_MESSAGE = 2048

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class EtaWrite:
    """One PodGroup's ``status.eta`` to write (None: remove it)."""

    ref: Ref
    eta: Obj | None


def status_of(eta: Eta, *, now: float) -> Obj:
    """``status.eta`` as written: absolute times only, so that it reads the same later."""
    out: Obj = {
        "reason": eta.reason.value,
        "message": eta.message[:MAX_MESSAGE],
        "after": [key.split("/", 1)[1] for key in eta.after[:MAX_AFTER]],
        "estimatedAt": iso(now),
    }
    if eta.start is not None:
        out["start"] = iso(max(eta.start, now))
    return out


def changes(
    gangs: tuple[GangView, ...], etas: dict[str, Eta], *, now: float, tolerance: float
) -> list[EtaWrite]:
    """The writes that bring each gang's ``status.eta`` to the forecast's, no more."""
    out: list[EtaWrite] = []
    for gang in gangs:
        group = gang.group
        if group is None:
            continue  # its PodGroup is made by a cycle first
        held = group.status.eta
        eta = etas.get(gang.key)
        if eta is None or gang.workload.phase is not WorkloadPhase.PENDING:
            if held is not None:
                out.append(EtaWrite(group.ref, None))
            continue
        wanted = status_of(eta, now=now)
        if held is not None and held.reason == wanted["reason"] and held.after == wanted["after"]:
            was = None if held.start is None else epoch_seconds(held.start)
            new = None if eta.start is None else max(eta.start, now)
            if was is None and new is None:
                continue
            if was is not None and new is not None and abs(was - new) < tolerance:
                continue
        out.append(EtaWrite(group.ref, wanted))
    return out


class EtaWriter:
    def __init__(
        self,
        *,
        gateway: gw.Gateway,
        state: ClusterState,
        leading: Callable[[], bool],
        clock: Callable[[], float] = time.time,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        horizon_seconds: float = DEFAULT_HORIZON_SECONDS,
        max_cycles: int = DEFAULT_MAX_CYCLES,
        creation_backlog: int | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.gateway = gateway
        self.metrics = metrics
        self.state = state
        self.leading = leading
        self.clock = clock
        self.interval = interval_seconds
        self.horizon = horizon_seconds
        self.max_cycles = max_cycles
        self.creation_backlog = creation_backlog
        self._latest: Translation | None = None
        self._lock = threading.Lock()  # offered from the cycle's worker thread
        self.refreshes = 0

    def offer(self, seen: Translation) -> None:
        """The latest cycle's translation (called by the loop; costs a reference)."""
        with self._lock:
            self._latest = seen

    def _take(self) -> Translation | None:
        with self._lock:
            latest, self._latest = self._latest, None
        return latest

    async def run(self, stop: asyncio.Event) -> None:
        if self.interval <= 0:
            return  # --eta-interval 0: off
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.interval)
                return
            except TimeoutError:
                pass
            try:
                await self.refresh()
            except Exception:  # a bug in one refresh must not end the controller
                log.exception("estimating starts failed")

    async def refresh(self) -> int:
        """One forecast over the latest translation, and its writes; how many were made."""
        seen = self._take()
        if seen is None or not self.leading():
            return 0
        now = self.clock()  # the state as of its cycle, forecast from now
        started = time.perf_counter()
        writes = await asyncio.to_thread(self.plan, seen, now)
        done = 0
        for write in writes:
            try:
                updated = await asyncio.to_thread(
                    self.gateway.patch,
                    write.ref.resource,
                    write.ref.namespace,
                    write.ref.name,
                    {"status": {"eta": write.eta}},
                    subresource="status",
                )
            except gw.GatewayError as error:  # written again at the next refresh
                log.debug("status.eta of %s not written: %s", write.ref.key, error)
                continue
            updated.setdefault("kind", write.ref.resource.kind)
            updated.setdefault("apiVersion", write.ref.resource.api_version)
            self.state.upsert(updated)
            done += 1
        self.refreshes += 1
        if self.metrics is not None:
            self.metrics.forecast.observe(time.perf_counter() - started)
        log.debug(
            "estimated starts: %d writes of %d planned in %.3fs",
            done,
            len(writes),
            time.perf_counter() - started,
        )
        return done

    def plan(self, seen: Translation, now: float) -> list[EtaWrite]:
        """The forecast over ``seen`` and the writes it calls for (in a worker thread)."""
        result = forecast(
            replace(seen.snapshot, now=now),
            horizon_seconds=self.horizon,
            max_cycles=self.max_cycles,
            creation_backlog=self.creation_backlog,
        )
        etas = {eta.workload: eta for eta in result.etas}
        if self.metrics is not None:
            queue_of = {gang.key: gang.workload.queue for gang in seen.gangs}
            counts: Counter[tuple[str, str]] = Counter(
                (f"{key.split('/')[1]}/{queue_of.get(key, '')}", eta.reason.value)
                for key, eta in etas.items()
            )
            self.metrics.set_estimated(counts)
        return changes(seen.gangs, etas, now=now, tolerance=max(self.interval, 1.0))
