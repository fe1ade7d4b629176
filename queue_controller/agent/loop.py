"""The node agent's loop: NVML in, the Node's GPU health out.

Each poll reads the agent's Node (one GET; it carries the operator's reset
annotation), folds what NVML shows into the :class:`HealthTracker`, and
publishes; the publisher writes only when something a reader uses changed.
Between polls the loop blocks in ``nvmlEventSetWait``, so an XID is
published at once rather than at the next poll.

Nothing here is fatal: without NVML the Node says ``GPUHealthy=Unknown``
(``NVMLUnavailable``) and NVML is tried again every retry period; an API
error is logged and the next poll tries again.  Time comes from the injected
``clock``, so tests step through the clear period without sleeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from queue_controller.agent.metrics import AgentMetrics
from queue_controller.core.model import UnhealthyGpu
from queue_controller.errors import InputError
from queue_controller.gpuhealth.nvml import Session, Unavailable
from queue_controller.gpuhealth.readings import Limits, XidEvent
from queue_controller.gpuhealth.tracker import HealthTracker
from queue_controller.kube import nodehealth
from queue_controller.kube.fields import Obj
from queue_controller.kube.gateway import GatewayError

log = logging.getLogger(__name__)

SOURCE = "node-agent"
# The longest single block in nvmlEventSetWait, so a stop request is seen quickly.
WAIT_CHUNK_SECONDS = 1.0


class Publisher(Protocol):
    """What the agent needs of :class:`~queue_controller.kube.healthwriter.NodeHealthPublisher`."""

    def read(self, node_name: str) -> Obj: ...

    def publish(
        self,
        node: Obj,
        *,
        unhealthy: Iterable[UnhealthyGpu],
        gpus: int | None,
        now: float,
        reset_seen: str = "",
        status: tuple[str, str, str] | None = None,
    ) -> bool: ...


class NodeAgent:
    def __init__(
        self,
        *,
        node_name: str,
        publisher: Publisher,
        open_nvml: Callable[[], Session | Unavailable],
        limits: Limits,
        clear_seconds: float,
        poll_seconds: float = 10.0,
        nvml_retry_seconds: float = 300.0,
        metrics: AgentMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node_name = node_name
        self.publisher = publisher
        self.open_nvml = open_nvml
        self.limits = limits
        self.clear_seconds = clear_seconds
        self.poll_seconds = poll_seconds
        self.nvml_retry_seconds = nvml_retry_seconds
        self.metrics = metrics
        self.clock = clock
        self.tracker = HealthTracker(clear_seconds=clear_seconds)
        self.session: Session | None = None
        self.unavailable: str | None = None  # why NVML cannot be used, while it cannot
        self._next_open = float("-inf")
        # Faults already published are loaded once, at the first successful read of the
        # Node; until then nothing is published, lest a restart overwrite them.
        self._loaded = False
        self._reset_seen = ""
        self._api_error = ""

    # -- one poll ----------------------------------------------------------------------

    def step(self, events: Sequence[XidEvent] = ()) -> None:
        """One poll: NVML (opened if need be), the Node, the tracker, the report."""
        now = self.clock()
        self._open(now)
        node = self._read_node()
        if node is not None:
            self._sync(node, now)
        # After a reset, not before: a fault that persists (a lost GPU) is reported
        # again at once instead of vanishing for one poll.
        self._observe(events, now)
        if node is not None:
            self._publish(node, now)

    def _open(self, now: float) -> None:
        if self.session is not None or now < self._next_open:
            return
        opened = self.open_nvml()
        if isinstance(opened, Unavailable):
            if opened.reason != self.unavailable:
                log.warning(
                    "NVML unavailable: %s; trying again every %gs",
                    opened.reason,
                    self.nvml_retry_seconds,
                )
            self.unavailable = opened.reason
            self._next_open = now + self.nvml_retry_seconds
            if self.metrics is not None:
                self.metrics.unavailable()
            return
        self.session, self.unavailable = opened, None
        inventory = opened.inventory
        polled = [g.index for g in inventory.gpus if not g.xid_events]
        log.info(
            "NVML: %d GPUs, driver %s%s",
            len(inventory.gpus),
            inventory.driver_version or "unknown",
            f"; GPUs {polled} polled only (no XID events)" if polled else "",
        )

    def _read_node(self) -> Obj | None:
        try:
            node = self.publisher.read(self.node_name)
        except GatewayError as error:
            self._api_failed(f"reading Node {self.node_name}", error)
            return None
        if self._api_error:
            log.info("the API answers again")
            self._api_error = ""
        return node

    def _api_failed(self, what: str, error: GatewayError) -> None:
        text = f"{what}: {error}"
        # One line per new error, not one per poll while the API is down.
        level = logging.DEBUG if text == self._api_error else logging.WARNING
        log.log(level, "%s; trying again next poll", text)
        self._api_error = text

    def _sync(self, node: Obj, now: float) -> None:
        """Load the faults already published (once), and act on a new reset annotation."""
        try:
            annotation = nodehealth.read_annotation(node)
        except InputError as error:
            if not self._loaded:
                log.warning(
                    "Node %s: %s; its published faults are not loaded", self.node_name, error
                )
            annotation = None
        if not self._loaded:
            known = {gpu.index: gpu for gpu in nodehealth.unhealthy_gpus(annotation)}
            known.update({gpu.index: gpu for gpu in self.tracker.unhealthy(now)})
            self.tracker = HealthTracker(clear_seconds=self.clear_seconds, known=known.values())
            self._reset_seen = annotation.resetSeen if annotation is not None else ""
            self._loaded = True
            if known:
                log.info("loaded %d GPU faults already published on the Node", len(known))
        reset = nodehealth.reset_requested(node, annotation)
        # Compared with our own memory too: if the report acknowledging it failed, the
        # same reset must not clear faults found since.
        if reset is not None and reset != self._reset_seen:
            cleared = self.tracker.reset()
            self._reset_seen = reset
            log.info("reset %r: %d GPU faults cleared", reset, cleared)

    def _observe(self, events: Sequence[XidEvent], now: float) -> None:
        if self.session is None:
            return
        reading = self.session.read(self.limits, events)
        gpus = self.session.inventory.by_index()
        for fault in reading.faults:
            gpu = gpus.get(fault.index)
            before = self.tracker.describe(fault.index)
            self.tracker.fault(
                index=fault.index,
                now=now,
                reason=fault.reason,
                uuid=gpu.uuid if gpu else "",
                xid=fault.xid,
                message=fault.message,
                mig_devices=gpu.mig_devices() if gpu else None,
            )
            if before is None or (fault.xid is not None and fault.xid not in before.xids):
                log.warning("GPU %d: %s (%s)", fault.index, fault.message, fault.reason)
        if self.metrics is not None:
            self.metrics.count_xids(events)
            self.metrics.update(self.session.inventory, reading, self.tracker.unhealthy(now))

    def _publish(self, node: Obj, now: float) -> None:
        if not self._loaded:
            return
        status = None
        gpus = None
        if self.session is not None:
            gpus = len(self.session.inventory.gpus)
        else:
            why = self.unavailable or "not opened yet"
            status = ("Unknown", nodehealth.UNAVAILABLE, f"NVML unavailable: {why}")
        try:
            self.publisher.publish(
                node,
                unhealthy=self.tracker.unhealthy(now),
                gpus=gpus,
                now=now,
                reset_seen=self._reset_seen,
                status=status,
            )
        except GatewayError as error:
            self._api_failed(f"publishing on Node {self.node_name}", error)

    # -- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set, then shut NVML down."""
        events: list[XidEvent] = []
        try:
            while not stop.is_set():
                self.step(events)  # first at once: a fresh agent reports without delay
                events = self.wait(stop)
        finally:
            self.close()

    def wait(self, stop: threading.Event) -> list[XidEvent]:
        """XID events until the poll interval ends, or until a new fault arrives.

        Real time (monotonic), not the injected clock: this is how long to block.
        Only a new XID cuts the interval short, so a flood of repeats (or of ignored
        application XIDs) does not turn into a GET per event.
        """
        events: list[XidEvent] = []
        deadline = time.monotonic() + self.poll_seconds
        while not stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            chunk = min(left, WAIT_CHUNK_SECONDS)
            got = self.session.wait(chunk) if self.session is not None else None
            if got is None:  # nothing to wait on: just sleep
                stop.wait(chunk)
                continue
            events.extend(got)
            if any(self._new(event) for event in got):
                break
        return events

    def _new(self, event: XidEvent) -> bool:
        if event.xid in self.limits.ignored_xids:
            return False
        known = self.tracker.describe(event.index)
        return known is None or event.xid not in known.xids

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
