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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# Where a held Node keeps the version of its last change a cycle reads, which the memo
# reads in place of resourceVersion: a heartbeat gives a node a new version and nothing else.
from queue_controller.kube.memo import CYCLE_VERSION
from queue_controller.kube.relevance import moves_a_decision

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


# Written by `kubectl apply`: a whole copy of the object, read by nothing here.
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _held_metadata(obj: Mapping[str, Any]) -> Any:
    """An object's metadata as held: without what no cycle reads and what can be large.

    ``managedFields`` (often half an object's bytes) goes, but for a PodGroup: whose
    field manager set its ``status.phase`` tells an admission from a hand-written one
    (kube/snapshot.phase_writer), so the entries that own it stay, cut to that field.
    """
    raw = obj.get("metadata")
    if not isinstance(raw, Mapping):
        return raw  # not the API's (a test's bad object): the cycle says what is wrong
    meta = dict(raw)
    managed = meta.pop("managedFields", None)
    if obj.get("kind") == "PodGroup" and isinstance(managed, list):
        meta["managedFields"] = [
            {"manager": entry.get("manager"), "fieldsV1": {"f:status": {"f:phase": {}}}}
            for entry in managed
            if isinstance(entry, dict) and _owns_phase(entry)
        ]
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and _LAST_APPLIED in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != _LAST_APPLIED}
    return meta


def _owns_phase(entry: Mapping[str, Any]) -> bool:
    fields = entry.get("fieldsV1")
    status = fields.get("f:status") if isinstance(fields, dict) else None
    return isinstance(status, dict) and "f:phase" in status


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
    # Of the status, what a cycle reads.  Not the conditions: no reader looks at a pod's,
    # and a kubelet (or kwok) rewrites four of them, with their timestamps, as each pod
    # starts: held, they cost a few KiB a pod and woke a cycle for each pod that started.
    return {
        "apiVersion": pod.get("apiVersion", "v1"),
        "kind": "Pod",
        "metadata": _held_metadata(pod) or {},
        "spec": kept,
        "status": {k: status[k] for k in ("phase", "resourceClaimStatuses") if k in status},
    }


def held_form(obj: Mapping[str, Any]) -> Obj:
    """What the state holds of a listed or watched object: a pod slimmed, anything else
    whole but for the metadata no cycle reads (and a Node's image list).  A listing
    takes this page by page (Gateway.list's ``keep``)."""
    if obj.get("kind") == "Pod":
        return slim_pod(obj)
    held = dict(obj)
    if "metadata" in obj:
        held["metadata"] = _held_metadata(obj)
    if obj.get("kind") == "Node" and isinstance(obj.get("status"), dict):
        # A real node lists every image it has pulled, with sizes: hundreds of entries.
        held["status"] = {k: v for k, v in obj["status"].items() if k != "images"}
    return held


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
    # Every change is made on the event loop's thread (the watch handlers are coroutines,
    # controller/handlers.py): the events above are set where their waiters wait, and
    # nothing here needs a lock.

    def upsert(self, obj: Mapping[str, Any]) -> bool:
        """Hold ``obj`` unless an equal or newer version is already held; True if taken.

        A change that cannot move a decision (kube/relevance.py) is held all the same
        but wakes no cycle early: the next one reads it.  The same version again (the
        watch's echo of a write the controller already assumed) is not a change at all.
        """
        key = key_of(obj)
        if not key[2]:
            return False
        held = self._objects.get(key)
        incoming = _version(obj)
        if held is not None and incoming is not None and incoming == _version(held):
            return False
        if not _newer_or_unknown(obj, held):
            return False
        tombstone = self._tombstones.get(key)
        if key in self._tombstones and (
            tombstone is None or incoming is None or incoming <= tombstone
        ):
            return False
        self._tombstones.pop(key, None)
        kept = held_form(obj)
        if key[0] == "Pod" and (obj.get("spec") or {}).get("schedulingGates"):
            self._gated_arrivals.add(key)
            self.gated_arrived.set()
        if held is not None and not moves_a_decision(held, kept):
            if key[0] == "Node":
                # Its heartbeat alone moved.  Marked with the version a cycle last read,
                # so it is not translated again either: every node beats every few
                # minutes, so 2,000 of them make a beat every few tenths of a second.
                # Its new version stays in its metadata: writes to the node are
                # conditional on it.
                kept[CYCLE_VERSION] = held.get(CYCLE_VERSION) or (held.get("metadata") or {}).get(
                    "resourceVersion"
                )
            self._objects[key] = kept
            return True
        self._objects[key] = kept
        self._touch()
        return True

    def take_gated_arrivals(self) -> set[Key]:
        """The gated pods taken since the last call (each may have changed since)."""
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
            self._objects.pop(key, None)
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
        # The items are copied at once: the generator is read lazily, and a watch event
        # taken meanwhile would make iterating the live dict raise.
        return (obj for key, obj in list(self._objects.items()) if key[0] == kind)

    def all(self) -> list[Obj]:
        return list(self._objects.values())

    def __len__(self) -> int:
        return len(self._objects)
