"""Starting the node agent as a service on its Node (``--once`` is :mod:`.once`).

It takes the NVML module (the real ``pynvml`` when None), the publisher and
the clock as arguments, so tests and the CLI's hidden hook hand in fakes.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator

from queue_controller.agent.loop import SOURCE, NodeAgent, Publisher
from queue_controller.agent.metrics import AgentMetrics
from queue_controller.agent.settings import AgentSettings
from queue_controller.errors import InputError, QueueControllerError
from queue_controller.gpuhealth.nvml import NvmlModule, open_session

log = logging.getLogger(__name__)


class AgentStartupError(QueueControllerError):
    """The agent could not start its metrics server."""


def run_agent(
    settings: AgentSettings,
    *,
    nvml: NvmlModule | None = None,
    publisher: Publisher | None = None,
    clock: Callable[[], float] = time.time,
    stop: threading.Event | None = None,
) -> None:
    """Serve /metrics and publish the Node's GPU health until ``stop`` (or SIGTERM/SIGINT)."""
    if not settings.node_name:
        raise InputError(
            "required: the Node to publish on (the DaemonSet sets NODE_NAME from "
            "spec.nodeName; or --node-name, or --once to only print what NVML shows)",
            where="settings",
            field="node_name (NODE_NAME)",
        )
    stop = stop or threading.Event()
    metrics = AgentMetrics()
    try:
        server = metrics.serve(settings.metrics_host, settings.metrics_port)
    except OSError as error:
        raise AgentStartupError(
            f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port}: {error}"
        ) from None
    log.info("metrics on %s:%d/metrics", settings.metrics_host, server.server_port)
    try:
        with _cluster(settings, publisher) as chosen, _signals(stop):
            NodeAgent(
                node_name=settings.node_name,
                publisher=chosen,
                open_nvml=lambda: open_session(nvml),
                limits=settings.limits,
                clear_seconds=settings.clear_seconds,
                poll_seconds=settings.poll_seconds,
                nvml_retry_seconds=settings.nvml_retry_seconds,
                metrics=metrics,
                clock=clock,
            ).run(stop)
    finally:
        server.shutdown()
        server.server_close()
    log.info("stopped")


@contextlib.contextmanager
def _cluster(settings: AgentSettings, publisher: Publisher | None) -> Iterator[Publisher]:
    if publisher is not None:
        yield publisher
        return
    # Imported here: --once and the tests need no Kubernetes client.
    from queue_controller.kube.credentials import api_client
    from queue_controller.kube.gateway import Gateway
    from queue_controller.kube.healthwriter import NodeHealthPublisher

    api = api_client(settings.kubeconfig)
    try:
        yield NodeHealthPublisher(gateway=Gateway(api), source=SOURCE, taint=settings.taint)
    finally:
        api.close()  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def _signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop`` (only the main thread may install handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for signum in previous:
        signal.signal(signum, lambda *_: stop.set())
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
