"""Node GPU health from dcgm-exporter's XID gauge.

``DCGM_FI_DEV_XID_ERRORS`` holds the *last* XID a GPU raised and keeps it until
the GPU or its driver is reset.  So, per GPU:

* a gauge showing an XID that counts (not an application's, not acknowledged)
  is a fault, sighted again at every scrape for as long as it shows;
* the clear period starts running only once a scrape shows the gauge clear
  (0, an ignored XID, or the acknowledged value).  A GPU the scrape did not
  show (its exporter is down, or it fell off the bus, XID 79, and DCGM lists
  it no more) keeps its fault: no news is not good news;
* an operator's reset (:meth:`DcgmHealth.acknowledge`) clears the node's faults
  and remembers each gauge's value as acknowledged.  That value no longer
  counts; a different one counts again, and the acknowledgement is dropped as
  soon as the gauge changes.  The same XID raised twice in a row leaves the
  gauge unchanged and cannot be told apart: that is the gauge's limit.

Faults and acknowledgements are loaded back from what was published on the
Node, so a restarted controller neither forgets an XID nor re-raises an
acknowledged one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from queue_controller.core.model import UnhealthyGpu
from queue_controller.errors import InputError
from queue_controller.gpuhealth.dcgm import GpuSample
from queue_controller.gpuhealth.tracker import APPLICATION_XIDS, XID, HealthTracker


class DcgmHealth:
    """Per node: the DCGM faults, the acknowledged gauge values and the GPUs last seen."""

    def __init__(
        self, *, clear_seconds: float, ignored_xids: frozenset[int] = APPLICATION_XIDS
    ) -> None:
        if clear_seconds < 0:
            raise InputError(f"must not be negative, got {clear_seconds:g}", field="clear_seconds")
        self.clear_seconds = clear_seconds
        self.ignored_xids = frozenset(ignored_xids)
        self._trackers: dict[str, HealthTracker] = {}
        # GPU indices with a fault in the node's tracker (it cannot list them
        # without pruning the expired ones, which holding must avoid).
        self._faulted: dict[str, set[int]] = {}
        self._acknowledged: dict[str, dict[int, int]] = {}
        self._gauges: dict[str, dict[int, int]] = {}  # the last XID gauge value seen per GPU
        self._gpu_counts: dict[str, int] = {}
        self._loaded: set[str] = set()

    def load(
        self, node: str, *, known: Iterable[UnhealthyGpu], acknowledged: Mapping[str, int]
    ) -> None:
        """Start ``node`` from what was published on it; call before its first :meth:`observe`."""
        acks: dict[int, int] = {}
        for key, value in acknowledged.items():
            index = int(key) if key.isascii() and key.isdigit() else -1
            if index < 0:
                raise InputError(
                    f"{key!r} is not a GPU index (a whole number from 0)",
                    where=f"Node/{node}",
                    field=f"acknowledgedXids[{key}]",
                )
            acks[index] = value
        known = list(known)
        self._trackers[node] = HealthTracker(clear_seconds=self.clear_seconds, known=known)
        self._faulted[node] = {gpu.index for gpu in known}
        self._acknowledged[node] = acks
        self._loaded.add(node)

    def loaded(self, node: str) -> bool:
        return node in self._loaded

    def _tracker(self, node: str) -> HealthTracker:
        if node not in self._trackers:
            self._trackers[node] = HealthTracker(clear_seconds=self.clear_seconds)
            self._faulted[node] = set()
        return self._trackers[node]

    def _counts(self, node: str, gpu: int, xid: int) -> bool:
        return (
            xid != 0 and xid not in self.ignored_xids and self._acknowledged_xid(node, gpu) != xid
        )

    def _acknowledged_xid(self, node: str, gpu: int) -> int | None:
        return self._acknowledged.get(node, {}).get(gpu)

    def observe(self, samples: Iterable[GpuSample], *, now: float) -> None:
        """Take one scrape's samples (every host at once)."""
        seen: dict[str, set[int]] = {}
        clear: dict[str, set[int]] = {}
        faulty: dict[str, list[GpuSample]] = {}
        for sample in samples:
            node, gpu, xid = sample.host, sample.gpu, sample.xid
            seen.setdefault(node, set()).add(gpu)
            if xid is None:
                continue  # the exporter does not export the gauge: nothing to say either way
            self._gauges.setdefault(node, {})[gpu] = xid
            acks = self._acknowledged.setdefault(node, {})
            if gpu in acks and acks[gpu] != xid:
                del acks[gpu]  # the gauge moved: a new event, or the GPU was reset
            if self._counts(node, gpu, xid):
                faulty.setdefault(node, []).append(sample)
            else:
                clear.setdefault(node, set()).add(gpu)
        for node, gpus in seen.items():
            self._gpu_counts[node] = len(gpus)
        for node in sorted(set(self._trackers) | set(faulty)):
            # Holding first: a fault past its clear period (the controller was
            # down a while) would otherwise restart with a new since and no history.
            self._hold(node, keep_ageing=clear.get(node, set()), now=now)
            for sample in faulty.get(node, []):
                self._trackers[node].fault(
                    index=sample.gpu,
                    now=now,
                    reason=XID,
                    uuid=sample.uuid,
                    xid=sample.xid,
                    message=f"dcgm-exporter reports XID {sample.xid}",
                    pods=sample.pods,
                )
                self._faulted[node].add(sample.gpu)

    def _hold(self, node: str, *, keep_ageing: set[int], now: float) -> None:
        # Every fault not shown clear counts as sighted now.  Rebuilding the
        # tracker (rather than calling fault()) keeps each one's since and
        # XIDs even when it would already have expired.
        tracker = self._tracker(node)
        faults = [f for i in sorted(self._faulted[node]) if (f := tracker.describe(i))]
        if all(f.index in keep_ageing or f.last_seen >= now for f in faults):
            return
        held = [
            f if f.index in keep_ageing else replace(f, last_seen=max(f.last_seen, now))
            for f in faults
        ]
        self._trackers[node] = HealthTracker(clear_seconds=self.clear_seconds, known=held)

    def acknowledge(self, node: str) -> None:
        """An operator's reset: clear the node's faults and acknowledge what its gauges show."""
        tracker = self._tracker(node)
        gauges = self._gauges.get(node, {})
        acks = self._acknowledged.setdefault(node, {})
        acks.update((gpu, xid) for gpu, xid in gauges.items() if self._counts(node, gpu, xid))
        for index in self._faulted[node]:
            fault = tracker.describe(index)
            # A fault loaded back but not seen since: its last XID is what the gauge shows.
            if fault is not None and fault.xids and index not in gauges:
                acks[index] = fault.xids[-1]
        tracker.reset()
        self._faulted[node].clear()

    def unhealthy(self, node: str, *, now: float) -> tuple[UnhealthyGpu, ...]:
        if node not in self._trackers:
            return ()
        faults = self._trackers[node].unhealthy(now)
        self._faulted[node] = {gpu.index for gpu in faults}
        return faults

    def acknowledged(self, node: str) -> dict[str, int]:
        """The acknowledged gauge values, keyed by str(GPU index) as published."""
        return {str(gpu): xid for gpu, xid in sorted(self._acknowledged.get(node, {}).items())}

    def gpu_count(self, node: str) -> int | None:
        """GPUs of ``node`` in the latest :meth:`observe` that included it; None: never seen."""
        return self._gpu_counts.get(node)

    def hosts(self) -> list[str]:
        """Every host some :meth:`observe` included, sorted."""
        return sorted(self._gpu_counts)
