"""The one module that talks to the Kubernetes API.

Objects go in and come out as raw camelCase dicts, the same shape kopf
delivers and dumps hold, so the rest of the code has one reader for them.
A patch is a JSON merge patch (strategic, for lists that other writers share)
and carries the ``resourceVersion`` it was computed from when the caller gives
one, so a stale write fails with :class:`Conflict` instead of overwriting
someone else's change; the caller recomputes next cycle.  Creates and deletes
carry no version.  A request that gets no usable answer raises
:class:`TransportError`, so every failure is a :class:`GatewayError`.

The API client is injected (as httpx injects a transport): tests point it at
the real local cluster, and nothing is patched.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from queue_controller.errors import QueueControllerError
from queue_controller.kube.resources import (
    CONFIG_MAP,
    EVENT,
    FIELD_MANAGER,
    JOB,
    NAMESPACE,
    NODE,
    POD,
    POD_GROUP,
    PRIORITY_CLASS,
    QUEUE,
    TEAM_QUOTA,
    Resource,
)

__all__ = [
    "CONFIG_MAP",
    "EVENT",
    "JOB",
    "LIST_PAGE_SIZE",
    "NAMESPACE",
    "NODE",
    "POD",
    "POD_GROUP",
    "PRIORITY_CLASS",
    "QUEUE",
    "TEAM_QUOTA",
    "Conflict",
    "Gateway",
    "GatewayError",
    "Invalid",
    "NotFound",
    "Resource",
]

MERGE_PATCH = "application/merge-patch+json"
# For lists that other writers share, merged by key (a Node's conditions by type).
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# Every create and patch names the controller's field manager, which the API server records
# in metadata.managedFields: how a PodGroup's status is told from a hand-written one.
MANAGED = {"fieldManager": FIELD_MANAGER}
Obj = dict[str, Any]
Listing = tuple[list[Obj], str]  # the objects, and the resourceVersion listed at
Keep = Callable[[Obj], Obj]  # what a listing holds of each object it reads

# Objects a listing asks for a page: a whole listing decoded at once held the 20,000 pods
# of `make bench-scale` in full, hundreds of MiB, and set the controller's peak memory.
LIST_PAGE_SIZE = 500


class GatewayError(QueueControllerError):
    """The API refused or failed a request."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"{status}: {message}")


class TransportError(GatewayError):
    """No usable HTTP answer: the connection was refused, reset or timed out, TLS
    failed, or the body broke off.  ``status`` is 0 (no status to type it by)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)
        self.detail = message

    def __str__(self) -> str:
        return f"no answer: {self.detail}"


def _typed(status: int) -> type[GatewayError]:
    return {404: NotFound, 409: Conflict, 422: Invalid}.get(status, GatewayError)


def _describe(cause: BaseException) -> str:
    """The innermost reason (urllib3 wraps a refused connection in MaxRetryError)."""
    reason = getattr(cause, "reason", None)
    inner = reason if isinstance(reason, BaseException) else cause
    return f"{type(inner).__name__}: {inner}"


class NotFound(GatewayError):
    """404: the object is gone; treat it as deleted."""


class Conflict(GatewayError):
    """409: someone changed the object first; recompute and try again next cycle."""


class Invalid(GatewayError):
    """422: the API server's validation refused the write."""


class Gateway:
    def __init__(self, api: client.ApiClient, *, timeout: float = 30.0) -> None:
        self._api = api
        self._timeout = timeout

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        serialized = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._api.call_api(*serialized, _request_timeout=self._timeout)
            response.read()  # type: ignore[no-untyped-call]
        except (urllib3.exceptions.HTTPError, OSError) as cause:
            # Refused, reset, timed out, a broken read: no status to type the error by.
            raise TransportError(f"{method} {path}: {_describe(cause)}") from cause
        except ApiException as cause:
            # The client's own wrapping: status 0 for TLS errors, else a status it gave up on
            # (a Retry-After answer when client-go retries are on).
            if not cause.status:
                raise TransportError(f"{method} {path}: {cause.reason}") from cause
            raise _typed(cause.status)(cause.status, f"{method} {path}: {cause.reason}") from cause
        raw = response.data or b"{}"
        try:
            data: Obj = json.loads(raw) if raw else {}
        except ValueError:  # a proxy's HTML page, say: the status still tells what happened
            data = {}
            if 200 <= response.status < 300:
                message = f"{method} {path}: the answer is not JSON"
                raise GatewayError(response.status, message) from None
        if 200 <= response.status < 300:
            return data
        message = data.get("message") or response.reason or "request failed"
        raise _typed(response.status)(response.status, f"{method} {path}: {message}")

    # -- reading ------------------------------------------------------------------

    def list(
        self,
        kind: Resource,
        *,
        namespace: str = "",
        label_selector: str = "",
        keep: Keep | None = None,
    ) -> list[Obj]:
        """Every object of a kind, in all namespaces (or one), each with its kind and
        apiVersion; only those that match ``label_selector`` when one is given.
        ``keep``: what to hold of each object, taken page by page (a pod's slim form),
        so that a listing of 20,000 pods never holds them all in full at once."""
        return self._list(kind, namespace=namespace, label_selector=label_selector, keep=keep)[0]

    def list_at(self, kind: Resource, keep: Keep | None = None) -> Listing:
        """Every object of a kind, and the resourceVersion the listing was taken at
        (a consistent snapshot across pages): what a relist compares its picture with."""
        return self._list(kind, keep=keep)

    def _list(
        self,
        kind: Resource,
        *,
        namespace: str = "",
        label_selector: str = "",
        keep: Keep | None = None,
    ) -> Listing:
        items: list[Obj] = []
        query: dict[str, str] = {"limit": str(LIST_PAGE_SIZE)}
        if label_selector:
            query["labelSelector"] = label_selector
        version = ""
        while True:
            page = self._request("GET", kind.path(namespace), query=query)
            for item in page.get("items", []):
                item["kind"], item["apiVersion"] = kind.kind, kind.api_version
                items.append(keep(item) if keep is not None else item)
            metadata = page.get("metadata", {})
            version = version or str(metadata.get("resourceVersion", ""))
            token = metadata.get("continue")
            if not token:
                return items, version
            query["continue"] = token

    def get(self, kind: Resource, namespace: str, name: str) -> Obj:
        return self._request("GET", kind.path(namespace, name))

    # -- writing ------------------------------------------------------------------

    def create(self, kind: Resource, namespace: str, body: Obj) -> Obj:
        return self._request("POST", kind.path(namespace), body=body, query=MANAGED)

    def patch(
        self,
        kind: Resource,
        namespace: str,
        name: str,
        patch: Obj,
        *,
        resource_version: str | None = None,
        subresource: str = "",
        strategic: bool = False,
    ) -> Obj:
        """A JSON merge patch, made conditional on ``resource_version`` when given.

        ``strategic``: a strategic merge patch (core kinds only), which merges
        list items by their key instead of replacing the list.
        """
        if resource_version is not None:
            patch = {
                **patch,
                "metadata": {**patch.get("metadata", {}), "resourceVersion": resource_version},
            }
        return self._request(
            "PATCH",
            kind.path(namespace, name, subresource),
            body=patch,
            query=MANAGED,
            content_type=STRATEGIC_MERGE_PATCH if strategic else MERGE_PATCH,
        )

    def delete(self, kind: Resource, namespace: str, name: str) -> None:
        with contextlib.suppress(NotFound):  # already gone: what we wanted
            body = {"propagationPolicy": "Background"}
            self._request("DELETE", kind.path(namespace, name), body=body)

    def event(
        self, about: Mapping[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> None:
        """A core/v1 Event on ``about``, as ``kubectl describe`` and ``get events`` show."""
        meta = about.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": about.get("apiVersion"),
                "kind": about.get("kind"),
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "queue-controller"},
            "reportingComponent": "queue-controller.io/controller",
            "reportingInstance": "queue-controller",
            "action": reason,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._request("POST", EVENT.path(namespace), body=body)
