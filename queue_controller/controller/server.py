"""``/metrics``, ``/healthz`` and ``/readyz`` on one small aiohttp server.

* ``/healthz``: the scheduling loop has turned recently (a wedged loop fails
  the liveness probe, and the kubelet restarts the pod).
* ``/readyz``: the state has been listed from the API once, and the Lease is
  not refused outright (``leaderElection`` in the body says why it is).  A
  journal that is down does not make the controller unready, since it keeps scheduling; the
  body says ``degraded`` and ``queue_controller_journal_up`` drops to 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from queue_controller.controller.metrics import Metrics


@dataclass
class Health:
    ready: bool = False
    last_turn: float = 0.0  # monotonic time of the loop's last turn
    cycles: int = 0
    stale_after: float = 60.0


class HealthServer:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        metrics: Metrics,
        health: Health,
        details: Callable[[], dict[str, object]],
    ) -> None:
        self._host, self._port = host, port
        self._metrics, self._health, self._details = metrics, health, details
        self._runner: web.AppRunner | None = None
        self.port = port

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics_page)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server  # the only way aiohttp tells which port 0 became
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics_page(self, _: web.Request) -> web.Response:
        return web.Response(body=self._metrics.exposition(), content_type="text/plain")

    async def _healthz(self, _: web.Request) -> web.Response:
        age = time.monotonic() - self._health.last_turn
        if self._health.last_turn and age > self._health.stale_after:
            return web.Response(status=503, text=f"scheduling loop stalled for {age:.0f}s\n")
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        details = self._details()
        # A replica that can never take the Lease (its namespace is missing, RBAC
        # denies it) would never admit: not ready, so the Deployment shows it.
        ready = self._health.ready and not details.get("leaderElection")
        body = {"ready": ready, "cycles": self._health.cycles, **details}
        return web.Response(
            status=200 if ready else 503,
            text=json.dumps(body) + "\n",
            content_type="application/json",
        )
