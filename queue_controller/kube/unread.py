"""What a cycle makes of an object it could not read (issue 22): one bad object, never a
failed cycle, and never silence.

* A cluster object (a Node, a TeamQuota, a Queue, ...) is left out.  :func:`left_out`
  says which one and why, for the core (a gang whose TeamQuota was left out waits
  naming it), for an event on the object and for a metric.
* A gang whose kind could not read it is still a gang: :func:`broken_gang` makes it
  ``InvalidSpec`` on its own PodGroup, saying why, from only what needs no reader.

Everything here reads raw objects defensively: it runs because a reader failed, and
must not fail itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from queue_controller.core.model import LeftOut
from queue_controller.errors import InputError
from queue_controller.kube.fields import timestamp
from queue_controller.kube.kinds import WATCHED, KindFacts, KindGang, WorkloadKind, queue_name
from queue_controller.kube.resources import Resource
from queue_controller.kube.views import MemberPod, Ref, ref_of

__all__ = ["PROVISIONAL", "BrokenGang", "Unread", "broken_gang", "left_out"]

# On a PodGroup made for a gang that could not be read: its minMember is not the gang's
# (nothing said what that is), so once the gang reads again the PodGroup is made anew
# rather than let this placeholder set the gang's size (kube/gangs.py takes minMember).
PROVISIONAL = "queue-controller.io/provisional"

_BY_KIND: dict[str, Resource] = {r.kind: r for r in WATCHED}


@dataclass(frozen=True, slots=True)
class Unread:
    """An object left out of a cycle: what the core is told, and where its owner hears it."""

    model: LeftOut
    # Where its Warning event goes; None for an object that cannot be named (no name)
    # or of a kind the controller does not post events on.
    ref: Ref | None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def left_out(obj: Mapping[str, Any], error: InputError) -> Unread:
    kind, meta = _text(obj.get("kind")), _meta(obj)
    name = _text(meta.get("name"))
    resource = _BY_KIND.get(kind)
    namespace = _text(meta.get("namespace"))
    if resource is not None and resource.namespaced:
        namespace = namespace or "default"
    elif resource is not None:
        namespace = ""
    ref = ref_of(resource, {"metadata": dict(meta)}) if resource is not None and name else None
    return Unread(LeftOut(kind, namespace, name, str(error)), ref)


def _labels(raw: object) -> dict[str, str]:
    labels = _meta(raw).get("labels") if isinstance(raw, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): v for k, v in labels.items() if isinstance(v, str)}


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokenGang(KindGang):
    """A gang its kind could not read: InvalidSpec, and its PodGroup only provisional."""


def broken_gang(
    kind: WorkloadKind,
    *,
    namespace: str,
    name: str,
    head: Mapping[str, Any] | None,
    members: Sequence[MemberPod],
    error: InputError,
) -> KindGang:
    """The gang ``kind.read`` failed on, as ``InvalidSpec`` saying ``error``.

    Whether it is held is read the way every kind holds: by its gate, nothing live is
    bound and ungated; by its head (a suspended Job has no pods), nothing is live.  A
    gang that runs unadmitted is so held again, never let run for being unreadable.
    """
    labels = _labels(head) if head is not None else {}
    queue = queue_name(labels) or next(
        (queue_name(p.labels) for p in members if queue_name(p.labels)), ""
    )
    live = [p for p in members if p.live]
    held = all(p.gated and not p.node_name for p in live) if kind.held_until_bound else not live
    head_ref = ref_of(kind.head, head) if head is not None and kind.head is not None else None
    facts = KindFacts(
        queue=queue, pod_sets=(), held=held, finished=False, spec_error=str(error), gang_size=1
    )
    created = min((p.created for p in members), default=0.0)
    if head is not None:
        with contextlib.suppress(InputError):
            created = timestamp(head, "metadata.creationTimestamp") or created
    return BrokenGang(
        namespace=namespace,
        name=name,
        head=head,
        head_ref=head_ref,
        members=tuple(members),
        facts=facts,
        created=created,
        about=head_ref,
        labels=labels,
    )
