"""One object's typed piece, as a cycle's translation (snapshot.py) reads it and the memo
(memo.py) keeps it: a pod with the gang that claims it and what it holds of its node, a
node with its GPU health, a queued head's name.  The releaser (controller/release.py)
reads arrived pods with :func:`member_of`, the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from queue_controller.core.model import GpuHealth, Node
from queue_controller.core.rules import pod_request
from queue_controller.errors import InvalidSpecError
from queue_controller.kube import kinds, nodehealth, objects
from queue_controller.kube.fields import Obj, get, timestamp
from queue_controller.kube.views import MemberPod, member_pod

__all__ = ["PodPiece", "member_of", "read_head", "read_node", "read_pod"]


@dataclass(frozen=True, slots=True)
class PodPiece:
    """A pod, read: its view (with the pod set its kind gives it), the gang that claims
    it, and, when it is bound, what it holds of its node (or why that cannot be read)."""

    pod: MemberPod
    gang: tuple[str, str, str] | None  # (kind name, namespace, gang name)
    request: dict[str, int] | InvalidSpecError | None


def read_pod(obj: Obj) -> PodPiece:
    pod = member_pod(obj)
    gang = None
    claimed = kinds.claim(pod)
    if claimed is not None:
        kind, membership = claimed
        if membership.pod_set != pod.pod_set:
            pod = replace(pod, pod_set=membership.pod_set)
        gang = (kind.name, pod.ref.namespace, membership.workload)
    request: dict[str, int] | InvalidSpecError | None = None
    if pod.node_name:
        try:
            request = pod_request(pod.template)
        except InvalidSpecError as error:
            request = error  # reported at every cycle, as if read afresh
    return PodPiece(pod, gang, request)


def member_of(obj: Obj) -> tuple[MemberPod, tuple[str, str, str] | None]:
    """A pod read as a cycle reads it, and the gang that claims it: (kind name,
    namespace, gang name), or None.  Raises :class:`InputError` for a malformed pod."""
    piece = read_pod(obj)
    return piece.pod, piece.gang


def read_head(obj: Obj) -> tuple[str, str] | None:
    """A queued head's namespace and name; None when it is in no queue."""
    if not kinds.BY_HEAD[str(obj.get("kind"))].is_queued(obj):
        return None
    namespace = get(obj, "metadata.namespace", str, "default") or "default"
    return namespace, get(obj, "metadata.name", str, "")


def read_node(obj: Obj) -> tuple[Node, tuple[GpuHealth, float] | None]:
    node = objects.node(obj)
    if node.gpu_health is None:
        return node, None
    state = nodehealth.condition(obj) or {}
    return node, (node.gpu_health, timestamp(state, "lastTransitionTime") or 0.0)
