"""The gateway turns a connection that gives no usable answer into TransportError.

No mock of the API: the gateway's real kubernetes ApiClient talks over real
sockets to a localhost port that is closed, or to a small server that
misbehaves in one way (resets, never answers, breaks off the body).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from queue_controller.controller import actions as act
from queue_controller.controller.apply import Applier
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.kube import gateway as gw
from queue_controller.kube.views import Ref


def _gateway(port: int, *, timeout: float = 5.0) -> gw.Gateway:
    config = client.Configuration(host=f"http://127.0.0.1:{port}")
    return gw.Gateway(client.ApiClient(config), timeout=timeout)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed, and nothing listens on it


class _Server:
    """Accepts on a localhost port and hands each connection to ``behave``."""

    def __init__(self, behave: Callable[[socket.socket], None]) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._behave = behave
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            self._open.append(conn)
            self._behave(conn)

    def close(self) -> None:
        # shutdown() wakes the thread blocked in accept(); close() alone would not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for conn in self._open:
            conn.close()
        self._thread.join(timeout=5)


def _read_request(conn: socket.socket) -> None:
    """Read the request head (and whatever body came with it) before misbehaving."""
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk


def _reset(conn: socket.socket) -> None:
    _read_request(conn)
    # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def _silent(conn: socket.socket) -> None:
    _read_request(conn)  # and never answer; close() at the end of the test frees it


def _broken_body(conn: socket.socket) -> None:
    _read_request(conn)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    conn.sendall(head + b'{"items": [')
    conn.close()


def _not_json(conn: socket.socket) -> None:
    _read_request(conn)
    body = b"<html>502 Bad Gateway</html>"
    head = f"HTTP/1.1 502 Bad Gateway\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    conn.sendall(head + body)
    conn.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], _Server]]:
    servers: list[_Server] = []

    def start(behave: Callable[[socket.socket], None]) -> _Server:
        servers.append(_Server(behave))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


CALLS: dict[str, tuple[str, Callable[[gw.Gateway], object]]] = {
    "list": ("GET /api/v1/nodes", lambda g: g.list(gw.NODE)),
    "get": (
        "GET /apis/batch/v1/namespaces/team/jobs/train",
        lambda g: g.get(gw.JOB, "team", "train"),
    ),
    "patch": (
        "PATCH /apis/queue-controller.io/v1alpha1/namespaces/team/podgroups/train/status",
        lambda g: g.patch(
            gw.POD_GROUP,
            "team",
            "train",
            {"status": {"phase": "Admitted"}},
            resource_version="7",
            subresource="status",
        ),
    ),
}


def _raises_transport(call: Callable[[gw.Gateway], object], gateway: gw.Gateway) -> str:
    with pytest.raises(gw.TransportError) as caught:
        call(gateway)
    error = caught.value
    assert isinstance(error, gw.GatewayError)
    assert error.status == 0
    assert error.__cause__ is not None
    return str(error)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_closed_port_is_a_transport_error_naming_the_request(name: str) -> None:
    where, call = CALLS[name]
    message = _raises_transport(call, _gateway(_closed_port()))
    assert where in message
    assert "refused" in message.lower()


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_reset_connection_is_a_transport_error(
    name: str, serve: Callable[[Callable[[socket.socket], None]], _Server]
) -> None:
    where, call = CALLS[name]
    server = serve(_reset)
    assert where in _raises_transport(call, _gateway(server.port))


@pytest.mark.parametrize("name", ["get", "patch"])
def test_no_answer_within_the_timeout_is_a_transport_error(
    name: str, serve: Callable[[Callable[[socket.socket], None]], _Server]
) -> None:
    where, call = CALLS[name]
    server = serve(_silent)
    started = time.monotonic()
    message = _raises_transport(call, _gateway(server.port, timeout=0.3))
    assert where in message
    assert "timed out" in message.lower()
    assert time.monotonic() - started < 5  # urllib3 retries a GET a few times, no more


def test_a_body_that_breaks_off_is_a_transport_error(
    serve: Callable[[Callable[[socket.socket], None]], _Server],
) -> None:
    where, call = CALLS["list"]
    server = serve(_broken_body)
    assert where in _raises_transport(call, _gateway(server.port))


def test_an_answer_that_is_not_json_keeps_its_status(
    serve: Callable[[Callable[[socket.socket], None]], _Server],
) -> None:
    server = serve(_not_json)
    with pytest.raises(gw.GatewayError) as caught:
        _gateway(server.port).get(gw.JOB, "team", "train")
    assert not isinstance(caught.value, gw.TransportError)
    assert caught.value.status == 502
    assert "GET /apis/batch/v1/namespaces/team/jobs/train" in str(caught.value)


def test_a_delete_on_a_closed_port_is_not_taken_for_already_gone() -> None:
    with pytest.raises(gw.TransportError):
        _gateway(_closed_port()).delete(gw.JOB, "team", "train")


def test_the_applier_counts_a_transport_error_as_a_failed_action() -> None:
    """What the error is for: a cycle's apply_all logs it and goes on."""
    applier = Applier(_gateway(_closed_port()), ClusterState(), None, Metrics(), clock=time.time)
    queue = Ref(gw.QUEUE, "team", "batch", "uid", "3")
    actions: list[act.Action] = [
        act.QueueStatus(queue=queue, current={}, counts={"pending": 1}),
        act.QueueStatus(queue=queue, current={}, counts={"pending": 2}),
    ]
    assert asyncio.run(applier.apply_all(actions)) == 2
