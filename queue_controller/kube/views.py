"""Typed views of the raw objects, made once per cycle, and the writes made on them.

The controller keeps raw dicts (what watches deliver) only until a cycle
starts; :mod:`queue_controller.kube.snapshot` translates each of them once
into these views, and every later step (the core, the planner, the metrics,
the applier) reads the views.  A :class:`Ref` carries what a conditional
write and an event need, so actions never hold raw objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_controller.core.model import PodTemplate
from queue_controller.core.rules import is_gpu_resource
from queue_controller.errors import InputError
from queue_controller.kube.fields import Obj, get, objects, strings, timestamp
from queue_controller.kube.objects import pod_template
from queue_controller.kube.resources import ADMISSION_GATE, HOSTNAME_LABEL, POD, Resource

TERMINATED = frozenset({"Succeeded", "Failed"})
# An Indexed Job's pod's completion index: the label since Kubernetes 1.28, the
# annotation before (and still).  Slices of a topology-aware gang are filled by it.
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True, slots=True)
class Ref:
    """One object as a write or an event names it."""

    resource: Resource
    namespace: str
    name: str
    uid: str = ""
    # The version a write is conditional on; None writes unconditionally.
    resource_version: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def about(self) -> Obj:
        """The object as ``Gateway.event`` reads it (involvedObject)."""
        return {
            "apiVersion": self.resource.api_version,
            "kind": self.resource.kind,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "resourceVersion": self.resource_version,
            },
        }


def ref_of(resource: Resource, obj: Mapping[str, Any]) -> Ref:
    meta = obj.get("metadata") or {}
    version = meta.get("resourceVersion")
    return Ref(
        resource,
        str(meta.get("namespace") or ""),
        str(meta.get("name", "")),
        str(meta.get("uid") or ""),
        str(version) if version is not None else None,
    )


@dataclass(frozen=True, slots=True)
class Owner:
    """A pod's controlling owner reference (the Job, ReplicaSet... that made it)."""

    kind: str
    name: str
    uid: str
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class MemberPod:
    """A Pod, read once: what gang tracking, binding and admission need of it."""

    ref: Ref
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    owner: Owner | None
    template: PodTemplate
    node_name: str  # spec.nodeName: bound
    node_selector: Mapping[str, str]
    gates: tuple[str, ...]  # spec.schedulingGates names
    phase: str
    deleting: bool
    created: float
    uses_gpus: bool
    # Set when the kind places it in a pod set (kube/snapshot fills it in).
    pod_set: str = ""
    raw_gates: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)
    # Its completion index (an Indexed Job's pod); None for any other pod.
    index: int | None = None

    @property
    def key(self) -> str:
        return self.ref.key

    @property
    def live(self) -> bool:
        return self.phase not in TERMINATED and not self.deleting

    @property
    def made(self) -> bool:
        """Counts as made by its owner: live, or succeeded (never made again; a failed or
        deleted member is made again)."""
        return self.live or self.phase == "Succeeded"

    @property
    def gated(self) -> bool:
        """Held by our scheduling gate: not yet released onto its planned node."""
        return ADMISSION_GATE in self.gates

    @property
    def node(self) -> str | None:
        """Where it is, or where it was sent: its node, else its hostname selector."""
        return self.node_name or self.node_selector.get(HOSTNAME_LABEL)


def _owner(obj: Obj) -> Owner | None:
    for ref in objects(obj, "metadata.ownerReferences"):
        if ref.get("controller", False):
            return Owner(
                str(ref.get("kind", "")),
                str(ref.get("name", "")),
                str(ref.get("uid", "")),
                str(ref.get("apiVersion", "")),
            )
    return None


def _index(labels: Mapping[str, str], annotations: Mapping[str, str]) -> int | None:
    raw = labels.get(COMPLETION_INDEX, annotations.get(COMPLETION_INDEX))
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None


def member_pod(obj: Obj) -> MemberPod:
    """Translate a Pod; :class:`InputError` names the field of a malformed one."""
    try:
        template = pod_template(get(obj, "spec", dict, {}))
    except InputError as error:
        raise error.located(field_prefix="spec") from None
    gates = tuple(objects(obj, "spec.schedulingGates"))
    # A pod with DRA claims may hold GPUs through them: it counts as a GPU user, so a
    # failed GPU on its node marks its gang as one on nvidia.com/gpu would.
    uses_gpus = bool(template.resource_claims) or any(
        is_gpu_resource(name)
        for container in template.containers
        for resources in (container.requests, container.limits)
        for name in resources
    )
    labels = strings(obj, "metadata.labels")
    annotations = strings(obj, "metadata.annotations")
    return MemberPod(
        ref=ref_of(POD, obj),
        labels=labels,
        annotations=annotations,
        owner=_owner(obj),
        template=template,
        node_name=get(obj, "spec.nodeName", str, ""),
        node_selector=strings(obj, "spec.nodeSelector"),
        gates=tuple(str(g.get("name", "")) for g in gates),
        phase=get(obj, "status.phase", str, "Pending"),
        deleting=bool(get(obj, "metadata.deletionTimestamp", str, "")),
        created=timestamp(obj, "metadata.creationTimestamp") or 0.0,
        uses_gpus=uses_gpus,
        raw_gates=tuple(dict(g) for g in gates),
        index=_index(labels, annotations),
    )


# -- writes ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Patch:
    """A JSON merge patch, conditional on the ref's resourceVersion when it has one."""

    ref: Ref
    body: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete:
    ref: Ref


Write = Patch | Delete
