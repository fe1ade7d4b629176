"""GPU health and activity from DCGM: the controller-side alternative to the node agent.

Clusters that already run dcgm-exporter read it here instead of running a
second agent.  Every ``interval`` the leader reads the configured targets
and then:

* publishes each node's GPU health on the Node, in the same format the agent
  writes (condition ``GPUHealthy``, the health annotation, optionally the
  taint), so admission, ``plan`` over a dump and ``kubectl describe node``
  all see one truth;
* keeps each pod's GPU activity, from which :meth:`idle_gangs` tells the
  planner which running gangs have idled for the window.

Faults and acknowledgements already on a Node are loaded back the first time
its host is seen, so a new leader does not forget them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from queue_controller.api.v1alpha1 import PodGroupPhase
from queue_controller.controller.leader import Leadership
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.errors import InputError
from queue_controller.gpuhealth.dcgmhealth import DcgmHealth
from queue_controller.gpuhealth.idle import IdleTracker
from queue_controller.gpuhealth.scrape import Scrape, scrape
from queue_controller.kube import gateway as gw
from queue_controller.kube import nodehealth
from queue_controller.kube.gangs import GangView
from queue_controller.kube.healthwriter import NodeHealthPublisher

log = logging.getLogger(__name__)
Obj = dict[str, Any]
Reader = Callable[[tuple[str, ...]], Scrape]


class DcgmSource:
    def __init__(
        self,
        *,
        urls: tuple[str, ...],
        publisher: NodeHealthPublisher,
        health: DcgmHealth,
        idle: IdleTracker,
        metrics: Metrics,
        clock: Callable[[], float],
        interval_seconds: float,
        read: Reader | None = None,
    ) -> None:
        self.urls, self.publisher, self.health, self.idle = urls, publisher, health, idle
        self.metrics, self.clock, self.interval = metrics, clock, interval_seconds
        self._read: Reader = read or (
            lambda urls: scrape(urls, timeout=min(10.0, interval_seconds))
        )
        self._errors: tuple[str, ...] = ()
        self._unknown_hosts: set[str] = set()

    async def run(
        self, stop: asyncio.Event, *, state: ClusterState, leadership: Leadership
    ) -> None:
        while not stop.is_set():
            if leadership.leading:
                nodes = {n["metadata"]["name"]: n for n in state.of_kind("Node")}
                try:
                    await asyncio.to_thread(self.poll, nodes, self.clock())
                except Exception:  # one bad read must not end the health loop
                    log.exception("reading DCGM failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.interval)

    def poll(self, nodes: Mapping[str, Obj], now: float) -> None:
        """One read of every target, then one report per node that DCGM knows."""
        result = self._read(self.urls)
        errors = tuple(result.errors)
        if errors != self._errors:  # say it when it changes, not every interval
            for error in errors:
                log.warning("DCGM target unreadable: %s", error)
            if self._errors and not errors:
                log.info("every DCGM target answers again")
            self._errors = errors
        self.metrics.dcgm_targets_down.set(len(errors))
        # Before the first observation of a host, not after: loading replaces its state.
        for host in sorted({sample.host for sample in result.samples}):
            if not self.health.loaded(host) and host in nodes:
                self._load(host, nodes[host])
        self.health.observe(result.samples, now=now)
        self.idle.observe(result.samples, now=now)
        for host in self.health.hosts():
            node = nodes.get(host)
            if node is None:
                if host not in self._unknown_hosts:
                    log.warning("DCGM reports host %r, which is no Node: ignored", host)
                    self._unknown_hosts.add(host)
                continue
            try:
                self._report(host, node, now)
            except gw.GatewayError as error:
                log.warning("could not publish the GPU health of node %s: %s", host, error)

    def _annotation(self, host: str, node: Obj) -> nodehealth.HealthAnnotation | None:
        try:
            return nodehealth.read_annotation(node)
        except InputError as error:
            log.warning("node %s: %s (rewritten)", host, error)
            return None

    def _load(self, host: str, node: Obj) -> None:
        """Faults and acknowledgements that an earlier leader published on the Node."""
        annotation = self._annotation(host, node)
        ours = annotation is not None and annotation.source == self.publisher.source
        if annotation is not None and not ours:
            log.warning(
                "node %s: its GPU health was published by %s; DCGM now overwrites it "
                "(run the node agent or DCGM ingestion, not both)",
                host,
                annotation.source,
            )
        try:
            self.health.load(
                host,
                known=nodehealth.unhealthy_gpus(annotation) if ours else (),
                acknowledged=annotation.acknowledgedXids if ours and annotation else {},
            )
        except InputError as error:
            log.warning("node %s: %s (not loaded)", host, error)
            self.health.load(host, known=(), acknowledged={})

    def _report(self, host: str, node: Obj, now: float) -> None:
        annotation = self._annotation(host, node)
        reset = nodehealth.reset_requested(node, annotation)
        if reset is not None:
            self.health.acknowledge(host)
            log.info(
                "node %s: GPU faults reset by the %s annotation", host, nodehealth.RESET_ANNOTATION
            )
        self.publisher.publish(
            node,
            unhealthy=self.health.unhealthy(host, now=now),
            gpus=self.health.gpu_count(host),
            now=now,
            reset_seen=reset or (annotation.resetSeen if annotation else ""),
            acknowledged_xids=self.health.acknowledged(host),
        )

    def idle_gangs(self, gangs: Iterable[GangView], *, now: float) -> dict[str, float]:
        """Running gangs whose every GPU pod has idled for the window: key -> since when."""
        out: dict[str, float] = {}
        for gang in gangs:
            if gang.phase is not PodGroupPhase.RUNNING:
                continue
            pods = [p.key for p in gang.live_pods]
            since = self.idle.idle_since(pods, now=now)
            if since is not None:
                out[gang.key] = since
        return out
