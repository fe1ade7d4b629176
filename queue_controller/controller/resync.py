"""Relist: bring the picture back in line after a watch broke.

kopf resumes a broken watch (the API server restarted, the connection dropped,
410 Gone once its resourceVersion is too old) by listing the kind again and
sending each listed object as an event of type None.  It sends nothing for an
object deleted while the watch was down, so without more such an object would
stay in the controller's state for good: a ghost gang holding quota, a ghost pod
holding GPUs.  kopf's relist events ask for a resync here; after a quiet moment
(so kopf's own listing is done, and one resync answers a burst) every watched
kind is listed through the Gateway and what the listing lacks is pruned
(``ClusterState.prune``).  A resync also runs every ``period_seconds``, as an
informer's resync would, in case a relist came with no event at all.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence

from queue_controller.controller.handlers import feed
from queue_controller.controller.state import ClusterState, Key, held_form, key_of
from queue_controller.kube import gateway as gw
from queue_controller.kube import kinds
from queue_controller.kube.resources import Resource

log = logging.getLogger(__name__)


class Resync:
    def __init__(
        self,
        gateway: gw.Gateway,
        state: ClusterState,
        resources: Sequence[Resource],
        *,
        quiet_seconds: float = 2.0,
        period_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gateway, self.state, self.resources = gateway, state, tuple(resources)
        self.quiet_seconds, self.period_seconds = quiet_seconds, period_seconds
        self.clock = clock
        self.runs = 0
        self._wanted = threading.Event()
        self._asked_at = 0.0

    def request(self) -> None:
        """Ask for a resync soon; cheap to repeat."""
        self._asked_at = self.clock()
        self._wanted.set()

    async def run(self, stop: asyncio.Event, *, poll_seconds: float = 0.5) -> None:
        last = self.clock()
        while not stop.is_set():
            with_timeout = asyncio.wait_for(stop.wait(), timeout=poll_seconds)
            try:
                await with_timeout
                return
            except TimeoutError:
                pass
            now = self.clock()
            asked = self._wanted.is_set() and now - self._asked_at >= self.quiet_seconds
            if asked or now - last >= self.period_seconds:
                self._wanted.clear()
                last = now
                await self.once()

    async def once(self) -> list[Key]:
        """List every kind and prune what is gone; the keys pruned (none if a list failed)."""
        pruned: list[Key] = []
        # Only kinds the watches hold: what the ClusterRole grants lists of (the chart's
        # tests read this loop), and of those the ones it was given.
        for resource in kinds.WATCHED:
            if resource not in self.resources:
                continue
            try:
                items, listed_at = await asyncio.to_thread(
                    self.gateway.list_at, resource, held_form
                )
            except gw.NotFound:
                if resource in kinds.OPTIONAL:
                    continue  # an operator's kind whose CRD is not installed: nothing of it
                log.warning("resync: %s is not served; again later", resource.kind)
                self.request()
                return pruned
            except gw.GatewayError as error:
                log.warning("resync: could not list %s (%s); again later", resource.kind, error)
                self.request()
                return pruned
            for obj in items:
                feed(self.state, resource, None, obj)
            gone = self.state.prune(resource.kind, (key_of(o) for o in items), listed_at)
            for kind, namespace, name in gone:
                log.warning(
                    "resync: %s %s is gone, deleted while a watch was down; forgotten",
                    kind,
                    f"{namespace}/{name}" if namespace else name,
                )
            pruned.extend(gone)
        self.runs += 1
        return pruned
