"""``queue-controller run``: put the pieces together and run until told to stop.

Start-up order: credentials, a full listing of every watched kind (so the
first cycle sees the whole cluster, as an informer's initial list does), the
journal, leader election, the health server, then kopf's watches and the
scheduling loop.  SIGTERM or SIGINT stops it all cleanly; kopf removes the
webhook configuration it registered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import kopf
from kubernetes import client

from queue_controller.controller.adopt import Adopter
from queue_controller.controller.apply import Applier
from queue_controller.controller.binding import InFlight
from queue_controller.controller.dcgmsource import DcgmSource
from queue_controller.controller.eta import EtaWriter
from queue_controller.controller.handlers import ManagedNamespaces, build_registry
from queue_controller.controller.leader import Leadership
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.loop import SchedulingLoop
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.release import RELEASE_THREADS, Releaser
from queue_controller.controller.resync import Resync
from queue_controller.controller.runtimes import HistoryCache, journal_reader
from queue_controller.controller.server import Health, HealthServer
from queue_controller.controller.settings import Settings
from queue_controller.controller.state import ClusterState, held_form
from queue_controller.controller.writer import WRITE_THREADS
from queue_controller.errors import QueueControllerError
from queue_controller.gpuhealth.dcgmhealth import DcgmHealth
from queue_controller.gpuhealth.idle import IdleTracker
from queue_controller.journal import Journal
from queue_controller.journal.retention import Retention
from queue_controller.kube import credentials, kinds, watched
from queue_controller.kube import gateway as gw
from queue_controller.kube.healthwriter import NodeHealthPublisher
from queue_controller.tls import ServingCertificate, serving_certificate

log = logging.getLogger(__name__)


class StartupError(QueueControllerError):
    """The controller could not reach the cluster or its own ports."""


def connect(settings: Settings) -> client.ApiClient:
    """Load credentials into the client's default configuration (kopf logs in from it too)."""
    try:
        return credentials.api_client(
            settings.kubeconfig, connections=WRITE_THREADS + RELEASE_THREADS
        )
    except credentials.CredentialsError as error:
        raise StartupError(str(error)) from None


def _certificate(settings: Settings, scratch: Path) -> ServingCertificate | None:
    if settings.webhook == "off":
        return None
    if settings.webhook_cert_dir is not None:
        d = settings.webhook_cert_dir
        return ServingCertificate(d / "tls.crt", d / "tls.key", d / "ca.crt")
    return serving_certificate(scratch / "webhook", hosts=(settings.webhook_host,))


def _managed_namespaces(settings: Settings, gateway: gw.Gateway) -> ManagedNamespaces | None:
    selector = settings.managed_namespaces
    if selector is None:
        return None
    log.info("queueing enforced in namespaces matching %r", selector.text)

    def read(name: str) -> dict[str, object] | None:
        try:
            return gateway.get(gw.NAMESPACE, "", name)
        except gw.GatewayError as error:
            log.warning("could not read namespace %s to tell if it is managed: %s", name, error)
            return None

    return ManagedNamespaces(selector, read, unknown=settings.webhook == "service")


def _dcgm_source(settings: Settings, gateway: gw.Gateway, metrics: Metrics) -> DcgmSource | None:
    if not settings.dcgm_targets:
        return None
    log.info("reading GPU health from DCGM at %s", ", ".join(settings.dcgm_targets))
    return DcgmSource(
        urls=settings.dcgm_targets,
        publisher=NodeHealthPublisher(gateway=gateway, source="dcgm", taint=settings.gpu_taint),
        health=DcgmHealth(clear_seconds=settings.gpu_clear_seconds),
        idle=IdleTracker(
            threshold=settings.idle_threshold, window_seconds=settings.idle_window_seconds
        ),
        metrics=metrics,
        clock=time.time,
        interval_seconds=settings.dcgm_interval_seconds,
    )


async def run(settings: Settings, *, stop: asyncio.Event | None = None) -> None:
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)

    api = connect(settings)
    gateway = gw.Gateway(api)
    state = ClusterState()
    try:
        # Each pod slimmed as its page comes: the listing never holds them all in full.
        listed = await asyncio.to_thread(watched.list_all, gateway, held_form)
    except gw.GatewayError as error:
        raise StartupError(f"could not list the cluster: {error}") from None
    state.replace_all(listed)
    log.info("listed %d objects", len(state))

    metrics = Metrics()
    journal = Journal(
        settings.journal_url,
        retention=Retention.of(
            max_age_days=settings.journal_retention_days, max_rows=settings.journal_max_rows
        ),
    )
    journal.start()
    health = Health(ready=True, stale_after=max(60.0, settings.tick_seconds * 6))
    leadership = Leadership(settings, metrics)
    leadership.start()

    def details() -> dict[str, object]:
        metrics.journal_up.set(1 if journal.healthy else 0)
        return {
            "leader": leadership.leading,
            **({"leaderElection": leadership.blocked} if leadership.blocked else {}),
            "journal": "ok" if journal.healthy else f"degraded: {journal.last_error}",
            "objects": len(state),
        }

    server = HealthServer(
        host=settings.metrics_host,
        port=settings.metrics_port,
        metrics=metrics,
        health=health,
        details=details,
    )
    await server.start()
    log.info("metrics and health on %s:%d", settings.metrics_host, server.port)

    dcgm = _dcgm_source(settings, gateway, metrics)
    if settings.fault_skip_evictions:
        log.warning("TEST-ONLY FAULT: evictions are turned off (QC_FAULT_SKIP_EVICTIONS)")
    in_flight = InFlight()  # members being released, by cycles or by the releaser

    def applier(threads: ThreadPoolExecutor) -> Applier:
        # One for the loop, one for the releaser: each keeps its own record of the
        # writes it made in a batch, and its own threads; they share the slots in flight.
        return Applier(
            gateway, state, journal, metrics, clock=time.time, in_flight=in_flight, threads=threads
        )

    scheduling = SchedulingLoop(
        state=state,
        planner=Planner(
            settings.pods_ready_timeout_seconds, skip_evictions=settings.fault_skip_evictions
        ),
        applier=applier(ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="write")),
        leadership=leadership,
        metrics=metrics,
        health=health,
        clock=time.time,
        tick_seconds=settings.tick_seconds,
        batch_seconds=settings.batch_seconds,
        period_seconds=settings.cycle_period_seconds,
        status_writes_per_cycle=settings.status_writes_per_cycle,
        creation_backlog=settings.creation_backlog_pods or None,
        idle=None if dcgm is None else (lambda gangs, now: dcgm.idle_gangs(gangs, now=now)),
        history=HistoryCache(
            read=journal_reader(settings.journal_url),
            refresh_seconds=settings.history_refresh_seconds,
        ),
        min_history=settings.history_min_gangs,
        reservation_limit=settings.max_reservations,
    )
    releaser = Releaser(
        state=state,
        applier=applier(ThreadPoolExecutor(RELEASE_THREADS, thread_name_prefix="release")),
        leadership=leadership,
        members=lambda: scheduling.members,
        planning=scheduling.planning,
        clock=time.time,
    )
    with tempfile.TemporaryDirectory(prefix="queue-controller-") as scratch:
        resync = Resync(gateway, state, kinds.WATCHED)
        namespaces = _managed_namespaces(settings, gateway)
        adopter = (
            None
            if namespaces is None
            else Adopter(gateway=gateway, leadership=leadership, managed=namespaces.managed)
        )
        registry = build_registry(
            state,
            settings,
            certificate=_certificate(settings, Path(scratch)),
            relisted=resync.request,
            namespaces=namespaces,
            adopter=adopter,
        )
        operator = asyncio.create_task(
            kopf.operator(registry=registry, standalone=True, clusterwide=True, stop_flag=stop)
        )
        loop_task = asyncio.create_task(scheduling.run(stop))
        release_task = asyncio.create_task(releaser.run(stop))
        resync_task = asyncio.create_task(resync.run(stop))
        tasks = [operator, loop_task, release_task, resync_task, asyncio.create_task(stop.wait())]
        if dcgm is not None:
            tasks.append(asyncio.create_task(dcgm.run(stop, state=state, leadership=leadership)))
        if adopter is not None:
            tasks.append(asyncio.create_task(adopter.run(stop)))
        if settings.eta_interval_seconds > 0:
            # Each pending gang's estimated start, forecast off the cycle (controller/eta.py).
            etas = EtaWriter(
                gateway=gateway,
                state=state,
                leading=lambda: leadership.leading,
                interval_seconds=settings.eta_interval_seconds,
                creation_backlog=settings.creation_backlog_pods or None,
                metrics=metrics,
            )
            scheduling.translated = etas.offer
            tasks.append(asyncio.create_task(etas.run(stop)))
        try:
            done, _ = await asyncio.wait(
                tasks,
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in done:
                if task is not operator and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            stop.set()
            loop_task.cancel()
            release_task.cancel()
            resync_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(operator, timeout=15)
            leadership.stop()
            journal.close()
            await server.stop()
            api.close()  # type: ignore[no-untyped-call]
