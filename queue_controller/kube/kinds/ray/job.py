"""KubeRay's ``RayJob`` (``ray.io/v1``): a Ray cluster made for one job, and its submitter.

The gang is the cluster of ``spec.rayClusterSpec`` (the head and each worker group, as
for a RayCluster) and, in the default ``K8sJobMode``, the submitter: the one pod of the
Job that KubeRay makes to run ``ray job submit`` once the cluster is up.  It is a pod
set (``submitter``) of its own, from ``spec.submitterPodTemplate`` or, when there is
none, KubeRay's default (the head's image; 500m CPU and 200Mi requested), as Kueue
counts it.  In ``SidecarMode`` KubeRay puts that container in the head pod instead, and
it is charged there; ``HTTPMode`` has no submitter.  ``InteractiveMode`` is refused:
KubeRay does not suspend a RayJob while it waits for its job, so it could not be evicted.

Held by ``spec.suspend``; released by unsuspending it with our gate and the label
:data:`RAY_JOB_LABEL` added to every template (the head's, each worker group's, the
submitter's, which is written out in full when there was none), so every pod of it
waits for its planned node and names its RayJob: the pods are owned by the RayCluster
(whose name KubeRay draws at random) or by the submitter Job, never by the RayJob.
Evicted by suspending it again: KubeRay deletes the cluster and the submitter Job.
Finished when KubeRay says ``jobDeploymentStatus`` Complete or Failed.

Refused with InvalidSpec, naming the field, as Kueue refuses them:
``shutdownAfterJobFinishes`` false (the finished job's cluster would keep its pods, with
the quota already given back) and no ``rayClusterSpec``.  ``clusterSelector`` (a job run
on an existing cluster) is refused too, where Kueue lets the RayJob run unqueued: queued,
its submitter could ask for GPUs that no quota charges; queue the cluster instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from queue_controller.core.model import PodSet
from queue_controller.errors import InputError
from queue_controller.kube.fields import Obj, get, strings, timestamp
from queue_controller.kube.kinds.base import (
    KindFacts,
    KindGang,
    Membership,
    RbacRule,
    SuspendedHead,
    WebhookRule,
    head_gang,
    head_owner,
    head_rbac,
    queue_name,
    read_or,
)
from queue_controller.kube.kinds.managed import raw_mapping
from queue_controller.kube.kinds.ray.clusterspec import (
    API_VERSION,
    cluster_annotations,
    cluster_pod_sets,
    cluster_pod_specs,
    gated_cluster_spec,
    gated_template,
    made_by_ray,
    pod_set_of,
    template_pod_set,
)
from queue_controller.kube.kinds.runtime import NO_ASK, runtime_ask
from queue_controller.kube.resources import Resource
from queue_controller.kube.views import MemberPod, Patch, Write

RAY_JOB = Resource(API_VERSION, "RayJob", "rayjobs", True)
# Written on every template at release: the pods then say which RayJob they serve.
RAY_JOB_LABEL = "queue-controller.io/ray-job"
SUBMITTER = "submitter"
K8S_JOB_MODE = "K8sJobMode"
SIDECAR_MODE = "SidecarMode"
INTERACTIVE_MODE = "InteractiveMode"
FINISHED = ("Complete", "Failed", "ValidationFailed")


def default_submitter(head_image: str) -> Obj:
    """KubeRay's default submitter container (common.GetDefaultSubmitterContainer)."""
    return {
        "name": "ray-job-submitter",
        "image": head_image,
        "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "500m", "memory": "200Mi"},
        },
    }


def _head_image(spec: Obj) -> str:
    containers = raw_mapping(spec, "rayClusterSpec", "headGroupSpec", "template", "spec").get(
        "containers"
    )
    first = containers[0] if isinstance(containers, list) and containers else {}
    image = first.get("image") if isinstance(first, dict) else None
    return image if isinstance(image, str) else ""


def submitter_template(spec: Obj) -> Obj:
    """The submitter's pod template: the user's, or KubeRay's default."""
    written = spec.get("submitterPodTemplate")
    if isinstance(written, dict):
        return written
    return {
        "spec": {"containers": [default_submitter(_head_image(spec))], "restartPolicy": "Never"}
    }


# Held, stopped and evicted by spec.suspend.
SUSPEND = SuspendedHead("spec.suspend")


class RayJobKind:
    name: str = "RayJob"
    head: Resource | None = RAY_JOB
    webhook: WebhookRule = WebhookRule(resource=RAY_JOB)
    held_until_bound: bool = False
    optional: bool = True  # KubeRay's CRDs may not be installed
    status_read: frozenset[str] = frozenset({"jobDeploymentStatus", "jobStatus"})
    rbac: tuple[RbacRule, ...] = head_rbac(
        RAY_JOB, "find queued RayJobs; suspend, unsuspend and gate their templates"
    )

    def pod_specs(self, obj: Obj) -> list[Obj]:
        spec = raw_mapping(obj, "spec")
        return [
            *cluster_pod_specs(raw_mapping(spec, "rayClusterSpec")),
            raw_mapping(spec, "submitterPodTemplate", "spec"),
        ]

    def is_queued(self, obj: Obj) -> bool:
        return bool(queue_name(strings(obj, "metadata.labels")))

    def membership(self, pod: MemberPod) -> Membership | None:
        job = pod.labels.get(RAY_JOB_LABEL)
        if not job:
            return None
        if made_by_ray(pod, "RayCluster"):
            return Membership(workload=job, pod_set=pod_set_of(pod))
        owner = pod.owner
        if owner is not None and owner.kind == "Job" and owner.api_version == "batch/v1":
            return Membership(workload=job, pod_set=SUBMITTER)
        return None

    def read(
        self, *, namespace: str, name: str, head: Obj | None, members: Sequence[MemberPod]
    ) -> KindGang:
        assert head is not None, "a RayJob gang is read from its RayJob"
        labels = strings(head, "metadata.labels")
        errors: list[str] = []
        held = read_or(lambda: get(head, "spec.suspend", bool, False), False, errors)
        state = read_or(lambda: get(head, "status.jobDeploymentStatus", str, ""), "", errors)
        no_sets: tuple[PodSet, ...] = ()
        pod_sets = read_or(lambda: self._pod_sets(get(head, "spec", dict, {})), no_sets, errors)
        finished = state in FINISHED
        outcome = read_or(lambda: get(head, "status.jobStatus", str, ""), "", errors)
        total = sum(s.count for s in pod_sets)
        spec = raw_mapping(head, "spec")
        runtime = read_or(
            lambda: runtime_ask(
                annotations=(
                    *cluster_annotations(
                        raw_mapping(spec, "rayClusterSpec"), "spec.rayClusterSpec"
                    ),
                    ("metadata.annotations", strings(head, "metadata.annotations")),
                ),
                deadlines=(("spec.activeDeadlineSeconds", spec.get("activeDeadlineSeconds")),),
                labels=labels,
            ),
            NO_ASK,
            errors,
        )
        facts = KindFacts(
            queue=queue_name(labels),
            pod_sets=pod_sets,
            held=held,
            runtime=runtime,
            finished=finished,
            succeeded=finished and outcome == "SUCCEEDED",
            uncreated_members=0 if finished else max(0, total - sum(p.made for p in members)),
            spec_error=errors[0] if errors else "",
            # KubeRay makes the submitter once the cluster is ready, which it is not
            # before its members are bound.
            later_pod_sets=frozenset({SUBMITTER}),
        )
        created = read_or(lambda: timestamp(head, "metadata.creationTimestamp"), None, [])
        return head_gang(
            RAY_JOB,
            namespace=namespace,
            name=name,
            head=head,
            members=members,
            facts=facts,
            created=created,
            labels=labels,
        )

    def _pod_sets(self, spec: Obj) -> tuple[PodSet, ...]:
        if get(spec, "clusterSelector", dict, {}):
            raise InputError(
                "a queued RayJob runs on a cluster of its own; to share an existing one, "
                "queue that RayCluster and submit to it unqueued",
                field="spec.clusterSelector",
            )
        cluster = get(spec, "rayClusterSpec", dict, {})
        if not cluster:
            raise InputError(
                "a queued RayJob needs its cluster's spec", field="spec.rayClusterSpec"
            )
        if not get(spec, "shutdownAfterJobFinishes", bool, False):
            raise InputError(
                "false: the cluster would keep running after the job, with its quota given "
                "back; set it to true (as Kueue requires)",
                field="spec.shutdownAfterJobFinishes",
            )
        mode = get(spec, "submissionMode", str, "") or K8S_JOB_MODE
        if mode == INTERACTIVE_MODE:
            raise InputError(
                "InteractiveMode: KubeRay does not suspend a RayJob while it waits for its "
                "job to be submitted, so it could not be evicted; use K8sJobMode, HTTPMode "
                "or SidecarMode, or queue a RayCluster and submit to it",
                field="spec.submissionMode",
            )
        sidecar = default_submitter(_head_image(spec)) if mode == SIDECAR_MODE else None
        pod_sets = cluster_pod_sets(cluster, "spec.rayClusterSpec", sidecar)
        if mode == K8S_JOB_MODE:
            holder = {"template": submitter_template(spec)}
            pod_sets.append(template_pod_set(SUBMITTER, holder, "spec.submitterPodTemplate", 1))
        return tuple(pod_sets)

    def hold_at_creation(self, obj: Obj) -> Obj:
        return SUSPEND.at_creation(obj)

    def hold(self, gang: KindGang) -> list[Write]:
        return SUSPEND.stop(gang)

    def release(self, gang: KindGang) -> list[Write]:
        assert gang.head is not None
        assert gang.head_ref is not None
        spec = get(gang.head, "spec", dict, {})
        mine = {RAY_JOB_LABEL: gang.name}
        body: dict[str, Any] = {
            "suspend": False,
            "rayClusterSpec": gated_cluster_spec(get(spec, "rayClusterSpec", dict, {}), mine),
        }
        if (get(spec, "submissionMode", str, "") or K8S_JOB_MODE) == K8S_JOB_MODE:
            body["submitterPodTemplate"] = gated_template(submitter_template(spec), mine)
        return [Patch(ref=gang.head_ref, body={"spec": body})]

    def evict(self, gang: KindGang) -> list[Write]:
        return SUSPEND.evict(gang)

    def pod_group_name(self, name: str) -> str:
        return f"rayjob-{name}"

    def pod_group_owners(self, gang: KindGang) -> list[Obj]:
        return head_owner(RAY_JOB, gang)
