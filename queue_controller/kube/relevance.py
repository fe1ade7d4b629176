"""Whether a watched object's change can move a decision, so whether it starts a cycle.

Most watch events at scale change nothing a cycle reads:

* a Node's heartbeat (kwok's, a kubelet's) gives it a new ``resourceVersion`` and new
  ``lastHeartbeatTime``\\ s every few minutes: a beat every few tenths of a second across
  2,000 nodes;
* the Job controller writes a Job's pod counts (``active``, ``ready``, ``succeeded``,
  ``uncountedTerminatedPods``) as each member comes and goes, while a Job is read
  only for its ``Complete`` and ``Failed`` conditions;
* a kubelet's container statuses, which the controller does not even hold of a pod;
* a PodGroup's ``status.eta``, which the forecast writes every ``--eta-interval`` and
  no cycle reads.

Such an object is still held at its new version, and the next cycle, which runs for
another reason or at the tick, reads it there (a Node whose heartbeat alone moved keeps
the piece it was read as: controller/state.py); it just does not wake a cycle early.  A
change that can move a decision wakes one at once.  Were this rule ever wrong about a
change, the change would still be read a tick later at most: nothing here drops an
object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queue_controller.kube.kinds import BY_HEAD

Obj = Mapping[str, Any]

# Metadata that changes with every write and that no reader of the cycle looks at.
_WRITE_STAMPS = ("resourceVersion", "managedFields")
# Condition fields that move with time alone (a heartbeat); the state is what counts.
_BEAT_STAMPS = ("lastHeartbeatTime",)
# PodGroup status that no cycle reads: the forecast's estimated start.
_UNREAD_PODGROUP_STATUS = frozenset({"eta"})


def as_a_cycle_reads(obj: Obj) -> tuple[Any, ...]:
    """What of ``obj`` a cycle's translation can read, as one comparable value."""
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        meta = {k: v for k, v in meta.items() if k not in _WRITE_STAMPS}
    status = obj.get("status")
    if status is None:
        status = {}  # a new object's status is often written as {} first: no change
    kind = obj.get("kind")
    head = BY_HEAD.get(kind) if isinstance(kind, str) else None
    if isinstance(status, Mapping):
        if head is not None:
            status = {k: v for k, v in status.items() if k in head.status_read}
        elif kind == "Node":
            status = _without_beats(status)
        elif kind == "PodGroup":
            status = {k: v for k, v in status.items() if k not in _UNREAD_PODGROUP_STATUS}
    # Anything else (spec, data, a CRD's top-level fields) counts whole.  Keys that begin
    # with "_" are the state's own marks (kube/memo.CYCLE_VERSION), never the API's.
    rest = {
        k: v
        for k, v in obj.items()
        if k not in ("metadata", "status") and not (isinstance(k, str) and k.startswith("_"))
    }
    return meta, status, rest


def moves_a_decision(held: Obj, incoming: Obj) -> bool:
    """Whether ``incoming``, a newer version of ``held``, differs in what a cycle reads."""
    return as_a_cycle_reads(held) != as_a_cycle_reads(incoming)


def _without_beats(status: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(status)
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        out["conditions"] = [
            {k: v for k, v in c.items() if k not in _BEAT_STAMPS} if isinstance(c, dict) else c
            for c in conditions
        ]
    return out
