"""The controller's picture of the cluster: raw objects, kept current by watch events.

Handlers only put objects in and take them out; the scheduling loop reads a
consistent copy.  Two rules keep the picture from going backwards:

* an object older than the one held (by ``resourceVersion``) is ignored, so a
  late watch event cannot undo what the controller itself just wrote and
  *assumed* (Kueue's assume-then-confirm); and
* a deleted object stays deleted until a newer version of it shows up.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# Where a held Node keeps the version of its last change a cycle reads, which the memo
# reads in place of resourceVersion: a heartbeat gives a node a new version and nothing else.
from queue_controller.kube.memo import CYCLE_VERSION

Obj = dict[str, Any]
Key = tuple[str, str, str]  # (kind, namespace, name)

# Only what admission and gang tracking read is kept of a Pod: clusters run many.
# A pod can be a gang's member (a plain pod group), so where it may run is kept too.
_POD_SPEC_FIELDS = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "containers",
    "initContainers",
    "overhead",
    "schedulingGates",
    "priorityClassName",
    "resourceClaims",
)


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", "")))


def _version(obj: Mapping[str, Any]) -> int | None:
    raw = (obj.get("metadata") or {}).get("resourceVersion")
    # etcd revisions: increasing integers.  The API does not promise that, so a
    # version that is not one is never used to order anything.
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


def _newer_or_unknown(incoming: Mapping[str, Any], held: Mapping[str, Any] | None) -> bool:
    if held is None:
        return True
    new, old = _version(incoming), _version(held)
    return new is None or old is None or new >= old


def _without_heartbeat(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """A Node as a cycle reads it: all but its version and its heartbeat times."""
    meta = {
        k: v
        for k, v in (node.get("metadata") or {}).items()
        if k not in ("resourceVersion", "managedFields")
    }
    status = dict(node.get("status") or {})
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        status["conditions"] = [
            {k: v for k, v in c.items() if k != "lastHeartbeatTime"} if isinstance(c, dict) else c
            for c in conditions
        ]
    return meta, node.get("spec"), status


def _heartbeat_only(held: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether ``node`` differs from ``held`` only by its kubelet's (kwok's) heartbeat."""
    return _without_heartbeat(held) == _without_heartbeat(node)


def slim_pod(pod: Mapping[str, Any]) -> Obj:
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = [
        {k: c[k] for k in ("name", "resources", "restartPolicy") if k in c}
        for c in spec.get("containers", [])
    ]
    init = [
        {k: c[k] for k in ("name", "resources", "restartPolicy") if k in c}
        for c in spec.get("initContainers", [])
    ]
    kept = {k: spec[k] for k in _POD_SPEC_FIELDS if k in spec}
    kept["containers"], kept["initContainers"] = containers, init
    return {
        "apiVersion": pod.get("apiVersion", "v1"),
        "kind": "Pod",
        "metadata": dict(pod.get("metadata") or {}),
        "spec": kept,
        "status": {
            k: status[k] for k in ("phase", "conditions", "resourceClaimStatuses") if k in status
        },
    }


def held_form(obj: Mapping[str, Any]) -> Obj:
    """What the state holds of a listed or watched object: a pod slimmed, anything else
    as it is.  A listing takes this page by page (Gateway.list's ``keep``)."""
    return slim_pod(obj) if obj.get("kind") == "Pod" else dict(obj)


@dataclass
class ClusterState:
    _objects: dict[Key, Obj] = field(default_factory=dict)
    # Deleted keys and the version they were deleted at: a stale event must not revive them.
    _tombstones: dict[Key, int | None] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    generation: int = 0  # bumps on every accepted change
    # Gated pods taken since the releaser last looked (controller/release.py): members
    # of admitted gangs it can send to their nodes without waiting for a cycle.
    _gated_arrivals: set[Key] = field(default_factory=set)
    gated_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    # kopf runs our (sync) handlers on its worker threads: the arrivals are taken on the
    # event loop's, so adding and taking hold this lock.
    _arrivals_lock: threading.Lock = field(default_factory=threading.Lock)

    def upsert(self, obj: Mapping[str, Any]) -> bool:
        """Hold ``obj`` unless an equal or newer version is already held; True if taken."""
        key = key_of(obj)
        if not key[2]:
            return False
        held = self._objects.get(key)
        if not _newer_or_unknown(obj, held):
            return False
        tombstone = self._tombstones.get(key)
        incoming = _version(obj)
        if key in self._tombstones and (
            tombstone is None or incoming is None or incoming <= tombstone
        ):
            return False
        self._tombstones.pop(key, None)
        if key[0] == "Node" and held is not None and _heartbeat_only(held, obj):
            # Its new version is kept (writes to the node are conditional on it), marked
            # with the version a cycle last read, so it is not translated again; and it
            # wakes no cycle early (the next tick's cycle comes all the same).
            beat = dict(obj)
            beat[CYCLE_VERSION] = held.get(CYCLE_VERSION) or (held.get("metadata") or {}).get(
                "resourceVersion"
            )
            self._objects[key] = beat
            return True
        self._objects[key] = held_form(obj)
        if key[0] == "Pod" and (obj.get("spec") or {}).get("schedulingGates"):
            with self._arrivals_lock:
                self._gated_arrivals.add(key)
            self.gated_arrived.set()
        self._touch()
        return True

    def take_gated_arrivals(self) -> set[Key]:
        """The gated pods taken since the last call (each may have changed since)."""
        with self._arrivals_lock:
            taken, self._gated_arrivals = self._gated_arrivals, set()
            self.gated_arrived.clear()
        return taken

    def delete(self, obj: Mapping[str, Any]) -> None:
        key = key_of(obj)
        if self._objects.pop(key, None) is not None or key not in self._tombstones:
            self._tombstones[key] = _version(obj)
            self._touch()

    def replace_all(self, objects: Iterable[Mapping[str, Any]]) -> None:
        """Start over from a full listing (start-up, or a relist after a lost watch)."""
        self._objects.clear()
        self._tombstones.clear()
        for obj in objects:
            self.upsert(obj)
        self._touch()

    def prune(self, kind: str, listed: Iterable[Key], listed_at: str) -> list[Key]:
        """Forget what a fresh listing of ``kind`` (taken at ``listed_at``) no longer has.

        A watch that broke and resumed with a relist (410 Gone, an API server restart)
        sends no DELETED for what went meanwhile; this is how such an object leaves.
        An object held at a version newer than the listing arrived after it and stays.
        Each removed key is tombstoned at the listing's version.  The keys removed.
        """
        at = int(listed_at) if listed_at.isdigit() else None
        present = set(listed)
        gone = []
        for key in [k for k in list(self._objects) if k[0] == kind and k not in present]:
            held = self._objects.get(key)
            version = None if held is None else _version(held)
            if held is None or (at is not None and version is not None and version > at):
                continue
            self._objects.pop(key, None)  # a handler thread may have taken it meanwhile
            self._tombstones[key] = at
            gone.append(key)
        if gone:
            self._touch()
        return gone

    def _touch(self) -> None:
        self.generation += 1
        self.changed.set()

    def copy(self) -> ClusterState:
        """A frozen view for a worker thread: the same objects, its own index."""
        return ClusterState(_objects=dict(self._objects))

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get((kind, namespace, name))

    def of_kind(self, kind: str) -> Iterator[Obj]:
        # The items are copied at once (one C call, under the GIL): a handler thread may
        # add an object meanwhile, and iterating the live dict would then raise.
        return (obj for key, obj in list(self._objects.items()) if key[0] == kind)

    def all(self) -> list[Obj]:
        return list(self._objects.values())

    def __len__(self) -> int:
        return len(self._objects)
