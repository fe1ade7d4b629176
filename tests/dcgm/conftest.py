"""A real local HTTP server for the scrape tests, serving the recorded exporter outputs.

Each test registers the paths it needs; a path may answer with a status,
a content type and a body, or wait before answering (a hung exporter).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
TEXT = "text/plain; version=0.0.4; charset=utf-8"


def recorded(name: str) -> str:
    return (DATA / name).read_text()


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    body: bytes
    status: int = 200
    content_type: str = TEXT
    delay: float = 0.0


@dataclass(slots=True, kw_only=True)
class Exporters:
    base: str
    routes: dict[str, Route] = field(default_factory=dict)

    def serve(
        self,
        path: str,
        body: str | bytes,
        *,
        status: int = 200,
        content_type: str = TEXT,
        delay: float = 0.0,
    ) -> str:
        """Answer ``path`` with ``body``; returns its full URL."""
        raw = body.encode() if isinstance(body, str) else body
        route = Route(body=raw, status=status, content_type=content_type, delay=delay)
        self.routes[path] = route
        return self.base + path


@pytest.fixture
def exporters() -> Iterator[Exporters]:
    state = Exporters(base="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = state.routes.get(self.path.split("?")[0])
            if route is None:
                route = Route(body=b"404 page not found\n", status=404)
            time.sleep(route.delay)
            self.send_response(route.status)
            self.send_header("Content-Type", route.content_type)
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            self.wfile.write(route.body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep the test output quiet

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def dead_url() -> str:
    """A URL on a port that was just free and is closed: connection refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"
