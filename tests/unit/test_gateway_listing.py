"""A listing is taken page by page, and what it holds of each object is kept as each page
comes (issue 26, item 3): the controller's start-up listing and every resync slim each
pod at once (controller/state.py held_form), so 20,000 pods are never held in full all
together.  Served by a small real HTTP server, through the gateway's real ApiClient."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client

from queue_controller.controller.state import held_form
from queue_controller.kube import gateway as gw
from queue_controller.kube.resources import POD


def pod(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p{i}", "namespace": "ns", "resourceVersion": str(100 + i)},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "big/image:1", "env": [{"name": "X"}] * 50}],
            "volumes": [{"name": f"v{j}", "emptyDir": {}} for j in range(20)],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }


PODS = [pod(i) for i in range(7)]
PAGE = 3


class _Pages(BaseHTTPRequestHandler):
    asked: ClassVar[list[dict[str, list[str]]]] = []

    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query)
        _Pages.asked.append(query)
        start = int(query.get("continue", ["0"])[0])
        limit = min(int(query.get("limit", ["500"])[0]), PAGE)
        items = PODS[start : start + limit]
        more = start + limit < len(PODS)
        body = json.dumps(
            {
                "kind": "PodList",
                "metadata": {
                    "resourceVersion": "200",
                    **({"continue": str(start + limit)} if more else {}),
                },
                "items": items,
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Pages.asked = []
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_listing_keeps_what_it_holds_of_each_object_page_by_page(server: int) -> None:
    config = client.Configuration(host=f"http://127.0.0.1:{server}")
    gateway = gw.Gateway(client.ApiClient(config))
    seen_pages: list[int] = []

    def keep(obj: gw.Obj) -> gw.Obj:
        seen_pages.append(len(_Pages.asked))  # the page being read when it was kept
        return held_form(obj)

    items, version = gateway.list_at(POD, keep)
    assert version == "200"
    assert [o["metadata"]["name"] for o in items] == [f"p{i}" for i in range(7)]
    # Kept as each page came: three requests, the first page's pods kept after the first.
    assert len(_Pages.asked) == 3
    assert seen_pages == [1, 1, 1, 2, 2, 2, 3]
    for obj in items:
        assert obj["kind"] == "Pod"
        assert "volumes" not in obj["spec"]  # slimmed: what admission reads, no more
        assert obj["spec"]["containers"] == [{"name": "c"}]
        assert obj["spec"]["nodeName"] == "n1"
        assert obj["status"] == {"phase": "Running"}
    # Without keep, the objects come whole.
    whole = gateway.list(POD)
    assert whole[0]["spec"]["volumes"] == PODS[0]["spec"]["volumes"]
