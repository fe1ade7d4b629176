"""Job kinds as gangs.

Like Kueue's ``GenericJob``, each job kind needs only a small adapter: which
queue it names, whether it has finished, whether it is suspended, and its
pod template and size.  ``batch/v1`` Job is the first kind; others (JobSet,
PyTorchJob) add an adapter here and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from queue_controller.api import v1alpha1
from queue_controller.core.model import PodTemplate, Workload, WorkloadPhase
from queue_controller.errors import InputError
from queue_controller.kube.fields import Obj, epoch_seconds, get, objects, timestamp
from queue_controller.kube.objects import labels_of, pod_template

QUEUE_LABEL = "queue-controller.io/queue"
# Kueue's label, accepted so teams can move over without relabelling.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
FINISHED_CONDITIONS = ("Complete", "Failed")
# Volcano users set a gang's minimum on the job itself; the PodGroup then carries it.
MIN_MEMBER_ANNOTATION = "queue-controller.io/min-member"
# A PodGroup in these phases holds its quota and planned nodes, even while its
# Job is still suspended: the controller wrote the admission and has yet to
# (or crashed before it could) unsuspend the Job.
HOLDING_PHASES = frozenset({v1alpha1.PodGroupPhase.ADMITTED, v1alpha1.PodGroupPhase.RUNNING})


def queue_name(obj: Obj) -> str:
    """The queue a job asks for: our label first, then Kueue's; ``""`` if neither."""
    labels = labels_of(obj)
    return labels.get(QUEUE_LABEL) or labels.get(KUEUE_QUEUE_LABEL) or ""


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What admission needs to know of one job, whatever its kind."""

    template: PodTemplate
    parallelism: int  # pods it runs at once when admitted
    suspended: bool
    finished: bool


class JobKind(Protocol):
    kind: str
    api_version: str

    def facts(self, obj: Obj) -> JobFacts: ...


class BatchJob:
    kind = "Job"
    api_version = "batch/v1"

    def facts(self, obj: Obj) -> JobFacts:
        parallelism = get(obj, "spec.parallelism", int, 1)
        completions = get(obj, "spec.completions", int, -1)
        if completions >= 0:
            parallelism = min(parallelism, completions)
        finished = any(
            c.get("type") in FINISHED_CONDITIONS and c.get("status") == "True"
            for c in objects(obj, "status.conditions")
        )
        try:
            template = pod_template(get(obj, "spec.template.spec", dict, {}))
        except InputError as error:
            raise error.located(field_prefix="spec.template.spec") from None
        return JobFacts(
            template=template,
            parallelism=max(parallelism, 0),
            suspended=get(obj, "spec.suspend", bool, False),
            finished=finished,
        )


JOB_KINDS: Mapping[str, JobKind] = {"Job": BatchJob()}


def _broken_template() -> PodTemplate:
    return PodTemplate(containers=())


def workload(obj: Obj, kind: JobKind, group: v1alpha1.PodGroup | None) -> Workload:
    """The gang for a queued job.

    A structurally broken job does not abort the cycle: it becomes a workload
    with ``spec_error`` set, which the core reports as ``Invalid``.
    """
    namespace = get(obj, "metadata.namespace", str, "default")
    name = get(obj, "metadata.name", str, "")
    queue = queue_name(obj)
    spec_error = ""
    try:
        facts = kind.facts(obj)
    except InputError as error:
        facts = JobFacts(_broken_template(), 0, suspended=True, finished=False)
        spec_error = str(error)
    gang_size, annotation_error = annotated_gang_size(obj, facts.parallelism)
    spec_error = spec_error or annotation_error
    requeue_at: float | None = None
    requeue_count = 0
    deactivated = False
    placement: dict[str, int] = {}
    if group is not None:
        gang_size = group.spec.minMember
        if group.spec.queue != queue and not spec_error:
            spec_error = (
                f"PodGroup {group.metadata.name} names queue {group.spec.queue!r} but the "
                f"{kind.kind} is labelled for queue {queue!r}"
            )
        status = group.status
        requeue_count = status.requeueCount
        # epoch_seconds: a time written without a zone is UTC, not this machine's zone.
        requeue_at = epoch_seconds(status.requeueAt) if status.requeueAt else None
        deactivated = status.phase is v1alpha1.PodGroupPhase.FAILED
        placement = dict(status.placement)
    group_phase = group.status.phase if group is not None else None
    if facts.finished:
        phase = WorkloadPhase.FINISHED
    elif group_phase in HOLDING_PHASES:
        phase = WorkloadPhase.ADMITTED
    elif facts.suspended:
        phase = WorkloadPhase.PENDING
    else:
        # Running: admitted, or being evicted, or started behind the queue's back.
        # Either way it uses quota until it is suspended.
        phase = WorkloadPhase.ADMITTED
    return Workload(
        namespace=namespace,
        name=name,
        queue=queue,
        template=facts.template,
        gang_size=gang_size,
        pod_count=facts.parallelism,
        phase=phase,
        created=timestamp(obj, "metadata.creationTimestamp") or 0.0,
        kind=kind.kind,
        requeue_at=requeue_at,
        requeue_count=requeue_count,
        deactivated=deactivated,
        placement=placement,
        spec_error=spec_error,
    )


def annotated_gang_size(obj: Obj, parallelism: int) -> tuple[int, str]:
    """The gang size a job asks for through its annotation, else its parallelism."""
    annotations = get(obj, "metadata.annotations", dict, {})
    raw = annotations.get(MIN_MEMBER_ANNOTATION)
    if raw is None:
        return parallelism, ""
    if not isinstance(raw, str) or not raw.isdigit():
        return parallelism, (
            f"metadata.annotations[{MIN_MEMBER_ANNOTATION}]: {raw!r} is not a whole number"
        )
    return int(raw), ""


def gang_size(obj: Obj, kind: JobKind) -> int:
    """The gang size of a job, even one whose template cannot be read."""
    try:
        parallelism = kind.facts(obj).parallelism
    except InputError:
        parallelism = 0
    return annotated_gang_size(obj, parallelism)[0]


def owned_by(group: v1alpha1.PodGroup, obj: Mapping[str, Any]) -> bool:
    """Whether ``group`` belongs to the job ``obj``: by owner reference, else by name."""
    uid = get(obj, "metadata.uid", str, "")
    name = get(obj, "metadata.name", str, "")
    kind = obj.get("kind")
    for ref in group.metadata.ownerReferences:
        if ref.get("kind") != kind:
            continue
        if ref.get("uid") == uid if uid and ref.get("uid") else ref.get("name") == name:
            return True
    return not group.metadata.ownerReferences and group.metadata.name == name
