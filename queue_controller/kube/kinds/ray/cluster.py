"""KubeRay's ``RayCluster`` (``ray.io/v1``) on its own: a long-lived Ray cluster that queues.

Held by ``spec.suspend`` (set by the webhook at creation), released by unsuspending it
with our scheduling gate added to the head's and every worker group's template, and
evicted by suspending it again, which makes KubeRay delete its pods.  A cluster does
not finish: it holds its quota until it is deleted or evicted.

A RayCluster that KubeRay makes for a RayJob carries the RayJob's labels, queue label
included, and is owned by it: it is not a gang of its own (the RayJob is), so it is
neither held nor read here.
"""

from __future__ import annotations

from collections.abc import Sequence

from queue_controller.core.model import PodSet
from queue_controller.kube.fields import Obj, get, objects, strings, timestamp
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
from queue_controller.kube.kinds.ray.clusterspec import (
    API_VERSION,
    cluster_annotations,
    cluster_pod_sets,
    cluster_pod_specs,
    gated_cluster_spec,
    made_by_ray,
    pod_set_of,
)
from queue_controller.kube.kinds.runtime import NO_ASK, runtime_ask
from queue_controller.kube.resources import Resource
from queue_controller.kube.views import MemberPod, Patch, Write

RAY_CLUSTER = Resource(API_VERSION, "RayCluster", "rayclusters", True)
# KubeRay's kinds that make RayClusters of their own: those clusters are their gangs.
MAKERS = ("RayJob", "RayService")


def made_for_another(obj: Obj) -> bool:
    """Whether a RayCluster is controlled by a RayJob or RayService (made by KubeRay)."""
    return any(
        ref.get("controller") is True
        and ref.get("kind") in MAKERS
        and str(ref.get("apiVersion", "")).startswith("ray.io/")
        for ref in objects(obj, "metadata.ownerReferences")
    )


# Held, stopped and evicted by spec.suspend.
SUSPEND = SuspendedHead("spec.suspend")


class RayClusterKind:
    name: str = "RayCluster"
    head: Resource | None = RAY_CLUSTER
    webhook: WebhookRule = WebhookRule(resource=RAY_CLUSTER)
    held_until_bound: bool = False
    optional: bool = True  # KubeRay's CRDs may not be installed
    status_read: frozenset[str] = frozenset()  # a cluster runs until it is deleted
    rbac: tuple[RbacRule, ...] = head_rbac(
        RAY_CLUSTER, "find queued RayClusters; suspend, unsuspend and gate their templates"
    )

    def pod_specs(self, obj: Obj) -> list[Obj]:
        spec = obj.get("spec")
        return cluster_pod_specs(spec if isinstance(spec, dict) else {})

    def is_queued(self, obj: Obj) -> bool:
        labels = strings(obj, "metadata.labels")
        return bool(queue_name(labels)) and not made_for_another(obj)

    def membership(self, pod: MemberPod) -> Membership | None:
        if not made_by_ray(pod, "RayCluster"):
            return None
        assert pod.owner is not None
        return Membership(workload=pod.owner.name, pod_set=pod_set_of(pod))

    def read(
        self, *, namespace: str, name: str, head: Obj | None, members: Sequence[MemberPod]
    ) -> KindGang:
        assert head is not None, "a RayCluster gang is read from its RayCluster"
        labels = strings(head, "metadata.labels")
        errors: list[str] = []
        held = read_or(lambda: get(head, "spec.suspend", bool, False), False, errors)
        no_sets: list[PodSet] = []
        pod_sets = read_or(
            lambda: cluster_pod_sets(get(head, "spec", dict, {}), "spec"), no_sets, errors
        )
        total = sum(s.count for s in pod_sets)
        # A cluster runs until it is deleted: only an annotation says how long.
        runtime = read_or(
            lambda: runtime_ask(
                annotations=(
                    *cluster_annotations(get(head, "spec", dict, {}), "spec"),
                    ("metadata.annotations", strings(head, "metadata.annotations")),
                ),
                labels=labels,
            ),
            NO_ASK,
            errors,
        )
        facts = KindFacts(
            queue=queue_name(labels),
            pod_sets=tuple(pod_sets),
            held=held,
            runtime=runtime,
            finished=False,  # a cluster runs until it is deleted
            uncreated_members=max(0, total - sum(p.made for p in members)),
            spec_error=errors[0] if errors else "",
        )
        created = read_or(lambda: timestamp(head, "metadata.creationTimestamp"), None, [])
        return head_gang(
            RAY_CLUSTER,
            namespace=namespace,
            name=name,
            head=head,
            members=members,
            facts=facts,
            created=created,
            labels=labels,
        )

    def hold_at_creation(self, obj: Obj) -> Obj:
        return SUSPEND.at_creation(obj)

    def hold(self, gang: KindGang) -> list[Write]:
        return SUSPEND.stop(gang)

    def release(self, gang: KindGang) -> list[Write]:
        assert gang.head is not None
        assert gang.head_ref is not None
        spec = gated_cluster_spec(get(gang.head, "spec", dict, {}), {})
        return [Patch(ref=gang.head_ref, body={"spec": {"suspend": False, **spec}})]

    def evict(self, gang: KindGang) -> list[Write]:
        return SUSPEND.evict(gang)

    def pod_group_name(self, name: str) -> str:
        return f"raycluster-{name}"

    def pod_group_owners(self, gang: KindGang) -> list[Obj]:
        return head_owner(RAY_CLUSTER, gang)
