"""An in-memory fake of :class:`queue_controller.kube.gateway.Gateway`, for write-side tests.

It has the Gateway's public methods with the same signatures, and answers them the
way the API server does where the controller depends on it:

* objects are held by (kind, namespace, name); a cluster-scoped kind's namespace is "";
* every accepted change gets a new ``resourceVersion`` from one increasing counter
  (etcd's revision), a create also a ``uid`` and a ``creationTimestamp``; a patch
  that changes nothing keeps the version, as the API server does;
* a patch is a JSON merge patch (RFC 7386: ``null`` deletes a key, maps merge, lists
  replace); on the ``status`` subresource only ``status`` is changed, on the object
  itself everything but ``status`` (every kind the controller writes has a status
  subresource);
* a patch given a ``resource_version`` (or carrying ``metadata.resourceVersion``) that
  differs from the held one raises :class:`gw.Conflict`; a missing object raises
  :class:`gw.NotFound`; a create of a name that exists raises :class:`gw.Conflict`;
* a delete of a missing object is quiet, as :meth:`Gateway.delete` is.  A delete
  removes the object at once (no grace period, no finalizers, no garbage collection).

Every call is recorded, in order, as a :class:`Call` (failed ones too: they were
sent).  :meth:`FakeGateway.fail_next` makes the next call that matches a predicate
raise a given error (a 409, a :class:`gw.TransportError`) without changing anything.
Strategic merge patches are not modelled: one that holds a list raises
``NotImplementedError`` rather than answer wrongly.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import iso

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (kind, namespace, name)

# The Gateway's methods, as Call.method names them.
METHODS = ("list", "get", "create", "patch", "delete", "event")


@dataclass(frozen=True, slots=True)
class Call:
    """One request as the fake received it."""

    method: str  # one of METHODS
    resource: gw.Resource
    namespace: str
    name: str
    subresource: str = ""
    body: Obj | None = None  # what was sent (a deep copy), None for reads and deletes
    resource_version: str | None = None  # the precondition a patch carried
    failed: bool = False  # answered with a GatewayError (injected, or the fake's own)

    @property
    def verb(self) -> str:
        """The RBAC verb this request needs (an Event is created)."""
        return "create" if self.method == "event" else self.method

    @property
    def rbac_resource(self) -> str:
        """``plural`` or ``plural/subresource``, as an RBAC rule names it."""
        return (
            f"{self.resource.plural}/{self.subresource}"
            if self.subresource
            else (self.resource.plural)
        )


def merge_patch(target: object, patch: object) -> Any:
    """RFC 7386 JSON merge patch of ``target`` by ``patch``; neither is changed."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: Obj = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _has_list(value: object) -> bool:
    if isinstance(value, list):
        return True
    return isinstance(value, Mapping) and any(_has_list(v) for v in value.values())


@dataclass(frozen=True, slots=True)
class _Failure:
    when: Callable[[Call], bool]
    error: gw.GatewayError


class FakeGateway(gw.Gateway):
    """Holds objects in memory and answers as the API server would (see the module).

    A subclass only so that it can be injected where a Gateway is asked for, and so
    that a type checker holds its methods to the Gateway's signatures: it overrides
    every public method and never calls the real ones (it has no API client).
    """

    def __init__(
        self, *objects: Mapping[str, Any], clock: Callable[[], float] | None = None
    ) -> None:
        self._objects: dict[Key, Obj] = {}
        self._versions = itertools.count(1)
        self._uids = itertools.count(1)
        self._clock = clock or (lambda: 1_800_000_000.0)
        self._failures: list[_Failure] = []
        # The applier calls through asyncio.to_thread: one request at a time, as a server.
        self._lock = threading.Lock()
        self.calls: list[Call] = []
        self.events: list[Obj] = []
        self.seed(*objects)

    # -- test controls ------------------------------------------------------------

    def seed(self, *objects: Mapping[str, Any]) -> None:
        """Hold ``objects`` as they are (no call recorded); missing versions are assigned.

        Versions given are kept, and later versions are above all of them.
        """
        given = [
            int(v)
            for o in objects
            if isinstance(v := (o.get("metadata") or {}).get("resourceVersion"), str)
            and v.isdigit()
        ]
        start = max([next(self._versions), *(g + 1 for g in given)])
        self._versions = itertools.count(start)
        for obj in objects:
            held = copy.deepcopy(dict(obj))
            meta = held.setdefault("metadata", {})
            meta.setdefault("resourceVersion", self._next_version())
            self._objects[self._key_of(held)] = held

    def update(self, obj: Mapping[str, Any]) -> Obj:
        """Hold ``obj`` as another client wrote it (the kubelet, the Job controller): at a
        new version, as the API server would give it, and with no call recorded."""
        held = copy.deepcopy(dict(obj))
        held.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        self._objects[self._key_of(held)] = held
        return copy.deepcopy(held)

    def fail_next(
        self, error: gw.GatewayError, when: Callable[[Call], bool] = lambda call: True
    ) -> None:
        """The next call for which ``when`` is true raises ``error`` and changes nothing."""
        self._failures.append(_Failure(when, error))

    def held(self, kind: str, namespace: str, name: str) -> Obj | None:
        """The object as the fake holds it now (a copy), or None."""
        obj = self._objects.get((kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def all(self) -> list[Obj]:
        """Every held object (copies), for filling a ClusterState as a relist would."""
        return [copy.deepcopy(o) for o in self._objects.values()]

    def writes(self) -> list[Call]:
        """The calls that change something (or would have): creates, patches, deletes, events."""
        return [c for c in self.calls if c.method in ("create", "patch", "delete", "event")]

    # -- the Gateway's methods ----------------------------------------------------------

    def list(
        self,
        kind: gw.Resource,
        *,
        namespace: str = "",
        label_selector: str = "",
        keep: gw.Keep | None = None,
    ) -> list[Obj]:
        # Selectors are equality only (key=value, comma-separated), as the callers use them.
        wanted = dict(p.split("=", 1) for p in label_selector.split(",") if p)
        held = keep or (lambda obj: obj)
        with self._serve(Call("list", kind, namespace, "")):
            return [
                held({**copy.deepcopy(o), "kind": kind.kind, "apiVersion": kind.api_version})
                for key, o in sorted(self._objects.items())
                if key[0] == kind.kind
                and (not namespace or o.get("metadata", {}).get("namespace") == namespace)
                and all(
                    o.get("metadata", {}).get("labels", {}).get(k) == v for k, v in wanted.items()
                )
            ]

    def list_at(self, kind: gw.Resource, keep: gw.Keep | None = None) -> gw.Listing:
        with self._lock:
            # The latest version handed out: every held object is at or below it.
            version = next(self._versions)
            self._versions = itertools.count(version)
        return self.list(kind, keep=keep), str(version - 1)

    def get(self, kind: gw.Resource, namespace: str, name: str) -> Obj:
        namespace = self._namespace(kind, namespace)
        with self._serve(Call("get", kind, namespace, name)):
            return copy.deepcopy(self._existing(kind, namespace, name))

    def create(self, kind: gw.Resource, namespace: str, body: Obj) -> Obj:
        namespace = self._namespace(kind, namespace)
        name = str((body.get("metadata") or {}).get("name", ""))
        with self._serve(Call("create", kind, namespace, name, body=copy.deepcopy(body))):
            if not name:
                raise gw.Invalid(422, f"create {kind.kind}: metadata.name is required")
            key = (kind.kind, namespace, name)
            if key in self._objects:
                raise gw.Conflict(409, f"{kind.kind} {namespace}/{name} already exists")
            # A create sets no status: that is the status subresource's.
            obj = {k: copy.deepcopy(v) for k, v in body.items() if k != "status"}
            obj["kind"], obj["apiVersion"] = kind.kind, kind.api_version
            meta = obj.setdefault("metadata", {})
            if kind.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            meta["uid"] = f"fake-uid-{next(self._uids)}"
            meta["creationTimestamp"] = iso(self._clock())
            meta["resourceVersion"] = self._next_version()
            self._objects[key] = obj
            return copy.deepcopy(obj)

    def patch(
        self,
        kind: gw.Resource,
        namespace: str,
        name: str,
        patch: Obj,
        *,
        resource_version: str | None = None,
        subresource: str = "",
        strategic: bool = False,
    ) -> Obj:
        namespace = self._namespace(kind, namespace)
        call = Call(
            "patch", kind, namespace, name, subresource, copy.deepcopy(patch), resource_version
        )
        with self._serve(call):
            if strategic and _has_list(patch):
                raise NotImplementedError("the fake does not merge lists by key")
            if subresource not in ("", "status"):
                raise gw.GatewayError(404, f"{kind.kind} has no subresource {subresource!r}")
            held = self._existing(kind, namespace, name)
            wanted = resource_version
            if wanted is None:
                wanted = (patch.get("metadata") or {}).get("resourceVersion")
            current = held["metadata"].get("resourceVersion")
            if wanted is not None and wanted != current:
                raise gw.Conflict(
                    409,
                    f"{kind.kind} {namespace}/{name}: the object has been modified "
                    f"(version {wanted} given, {current} held)",
                )
            if subresource == "status":
                part = {"status": patch["status"]} if "status" in patch else {}
            else:
                part = {k: v for k, v in patch.items() if k != "status"}
            if isinstance(part.get("metadata"), Mapping):
                # The version is a precondition, not a change; these never change.
                fixed = ("resourceVersion", "name", "namespace", "uid")
                part["metadata"] = {k: v for k, v in part["metadata"].items() if k not in fixed}
            updated: Obj = merge_patch(held, part)
            if updated != held:  # the API server keeps the version of a no-op patch
                updated["metadata"]["resourceVersion"] = self._next_version()
                self._objects[(kind.kind, namespace, name)] = updated
            return copy.deepcopy(self._objects[(kind.kind, namespace, name)])

    def delete(self, kind: gw.Resource, namespace: str, name: str) -> None:
        namespace = self._namespace(kind, namespace)
        with self._serve(Call("delete", kind, namespace, name)):
            # Already gone is what was wanted: Gateway.delete swallows the 404 too.
            self._objects.pop((kind.kind, namespace, name), None)

    def event(
        self, about: Mapping[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> None:
        meta = about.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        body: Obj = {
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
        }
        with self._serve(Call("event", gw.EVENT, namespace, str(meta.get("name", "")), body=body)):
            self.events.append(body)

    # -- plumbing -----------------------------------------------------------------

    @contextlib.contextmanager
    def _serve(self, call: Call) -> Iterator[None]:
        """Record ``call`` and answer it: an injected failure first, else the body of the
        ``with``.  A call answered with a GatewayError is recorded as failed."""
        with self._lock:
            index = len(self.calls)
            self.calls.append(call)
            failure = next((f for f in self._failures if f.when(call)), None)
            try:
                if failure is not None:
                    self._failures.remove(failure)
                    raise failure.error
                yield
            except gw.GatewayError:
                self.calls[index] = dataclasses.replace(call, failed=True)
                raise

    def _next_version(self) -> str:
        return str(next(self._versions))

    @staticmethod
    def _namespace(kind: gw.Resource, namespace: str) -> str:
        return namespace if kind.namespaced else ""

    @staticmethod
    def _key_of(obj: Mapping[str, Any]) -> Key:
        meta = obj.get("metadata") or {}
        return (str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name")))

    def _existing(self, kind: gw.Resource, namespace: str, name: str) -> Obj:
        held = self._objects.get((kind.kind, namespace, name))
        if held is None:
            raise gw.NotFound(404, f"{kind.kind} {namespace}/{name} not found")
        return held
