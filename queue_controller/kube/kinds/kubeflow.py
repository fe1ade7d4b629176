"""Kubeflow's training-operator jobs (``kubeflow.org/v1``): PyTorchJob, TFJob, XGBoostJob
and PaddleJob, through the one adapter that their shared ``replicaSpecs`` and
``runPolicy`` allow (Kueue's ``kubeflowjob`` integration).

A gang is every replica of every replica type, one pod set per type (``master``,
``worker``, ``ps``, ...), all placed together.  Held by ``spec.runPolicy.suspend``
(set by the webhook at creation), released by unsuspending it with our scheduling
gate added to every replica template, so the pods the operator makes wait for their
planned nodes; evicted by suspending it again, which makes the operator delete its
pods.  The operator names each pod's replica type in the label
``training.kubeflow.org/replica-type``, which is how a pod finds its pod set.

What Kueue does with the rest, we do: ``runPolicy.schedulingPolicy.minAvailable`` is
not a partial admission (the operator makes every replica, so every replica is
placed); an ``elasticPolicy`` (a PyTorchJob whose workers scale) is refused with
InvalidSpec, naming the field, since a gang of changing size has no one placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from queue_controller.core.model import PodSet
from queue_controller.errors import InputError
from queue_controller.kube.fields import MAX_GANG_MEMBERS, Obj, get, strings, timestamp
from queue_controller.kube.kinds.base import (
    KindFacts,
    KindGang,
    Membership,
    RbacRule,
    SuspendedHead,
    WebhookRule,
    finished_by,
    head_gang,
    head_owner,
    head_rbac,
    queue_name,
    read_or,
)
from queue_controller.kube.kinds.managed import raw_mapping
from queue_controller.kube.kinds.runtime import NO_ASK, RuntimeAsk, runtime_ask
from queue_controller.kube.kinds.topology import topology_request
from queue_controller.kube.objects import pod_template
from queue_controller.kube.resources import ADMISSION_GATE, Resource
from queue_controller.kube.views import MemberPod, Patch, Write

API_VERSION = "kubeflow.org/v1"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
FINISHED_CONDITIONS = ("Succeeded", "Failed")


# Held, stopped and evicted by spec.runPolicy.suspend, every training kind alike.
SUSPEND = SuspendedHead("spec.runPolicy.suspend")


class TrainingJob:
    """One training-operator kind: where its replica specs live is all that differs."""

    held_until_bound: bool = False
    # The training-operator's CRDs may not be installed: nothing to list then.
    optional: bool = True
    status_read: frozenset[str] = frozenset({"conditions"})  # Succeeded, Failed

    def __init__(self, name: str, plural: str, replica_specs: str) -> None:
        self.name = name  # PyTorchJob, ...
        self.replica_specs = replica_specs  # the field of spec holding them
        self.head: Resource | None = Resource(API_VERSION, name, plural, True)
        self.webhook = WebhookRule(resource=self.head)
        self.rbac: tuple[RbacRule, ...] = head_rbac(
            self.head, f"find queued {name}s; suspend, unsuspend and gate their templates"
        )

    @property
    def _resource(self) -> Resource:
        assert self.head is not None
        return self.head

    def pod_specs(self, obj: Obj) -> list[Obj]:
        specs = raw_mapping(obj, "spec", self.replica_specs)
        return [raw_mapping(spec, "template", "spec") for spec in specs.values()]

    def is_queued(self, obj: Obj) -> bool:
        return bool(queue_name(strings(obj, "metadata.labels")))

    def membership(self, pod: MemberPod) -> Membership | None:
        if pod.owner is None or pod.owner.kind != self.name:
            return None
        if not pod.owner.api_version.startswith("kubeflow.org/"):
            return None
        return Membership(workload=pod.owner.name, pod_set=pod.labels.get(REPLICA_TYPE_LABEL, ""))

    def read(
        self, *, namespace: str, name: str, head: Obj | None, members: Sequence[MemberPod]
    ) -> KindGang:
        assert head is not None, f"a {self.name} gang is read from its {self.name}"
        labels = strings(head, "metadata.labels")
        errors: list[str] = []
        finished, succeeded = read_or(
            lambda: finished_by(head, FINISHED_CONDITIONS), (False, False), errors
        )
        held = read_or(lambda: get(head, "spec.runPolicy.suspend", bool, False), False, errors)
        no_sets: tuple[PodSet, ...] = ()
        pod_sets = read_or(lambda: self._pod_sets(head), no_sets, errors)
        total = sum(s.count for s in pod_sets)
        facts = KindFacts(
            queue=queue_name(labels),
            pod_sets=pod_sets,
            held=held,
            finished=finished,
            succeeded=succeeded,
            # The operator makes every replica once the job runs.
            uncreated_members=0 if finished else max(0, total - sum(p.made for p in members)),
            spec_error=errors[0] if errors else "",
        )
        runtime = read_or(lambda: self._runtime(head, labels), NO_ASK, errors)
        facts = replace(facts, runtime=runtime, spec_error=errors[0] if errors else "")
        created = read_or(lambda: timestamp(head, "metadata.creationTimestamp"), None, [])
        return head_gang(
            self._resource,
            namespace=namespace,
            name=name,
            head=head,
            members=members,
            facts=facts,
            created=created,
            labels=labels,
        )

    def _runtime(self, head: Obj, labels: dict[str, str]) -> RuntimeAsk:
        """The first replica template's runtime annotation, else the job's; its
        runPolicy's deadline."""
        where = f"spec.{self.replica_specs}"
        templates = [
            (f"{where}.{replica}.template.metadata.annotations", raw_mapping(spec, "template"))
            for replica, spec in raw_mapping(head, "spec", self.replica_specs).items()
        ]
        return runtime_ask(
            annotations=(
                *(
                    (path, strings(template, "metadata.annotations"))
                    for path, template in templates
                ),
                ("metadata.annotations", strings(head, "metadata.annotations")),
            ),
            deadlines=(
                (
                    "spec.runPolicy.activeDeadlineSeconds",
                    raw_mapping(head, "spec", "runPolicy").get("activeDeadlineSeconds"),
                ),
            ),
            labels=labels,
        )

    def _pod_sets(self, head: Obj) -> tuple[PodSet, ...]:
        """One pod set per replica type, in the order written; InputError naming the
        field that is wrong."""
        if get(head, "spec.elasticPolicy", dict, {}):
            raise InputError(
                "an elastic job changes its number of workers, so it has no one placement "
                "to admit whole; not queued (as in Kueue)",
                field="spec.elasticPolicy",
            )
        where = f"spec.{self.replica_specs}"
        specs = get(head, where, dict, {})
        if not specs:
            raise InputError("no replica types: a gang of nobody", field=where)
        pod_sets = []
        total = 0
        for replica_type, spec in specs.items():
            path = f"{where}.{replica_type}"
            if not isinstance(spec, dict):
                raise InputError("expected an object", field=path)
            try:
                count = get(spec, "replicas", int, 1)
            except InputError as error:
                raise error.located(field_prefix=path) from None
            if count < 0:
                raise InputError(f"{count}: a count of pods is 0 or more", field=f"{path}.replicas")
            total += count
            if total > MAX_GANG_MEMBERS:
                raise InputError(
                    f"{total} pods: more than a cluster can run at once ({MAX_GANG_MEMBERS})",
                    field=f"{path}.replicas",
                )
            if count == 0:
                continue
            template_path = f"{path}.template.spec"
            try:
                template = pod_template(get(spec, "template.spec", dict, {}))
            except InputError as error:
                raise error.located(field_prefix=template_path) from None
            annotations = f"{path}.template.metadata.annotations"
            topology, refused = topology_request(
                strings(spec, "template.metadata.annotations"),
                prefix=annotations,
                no_index="",
            )
            if refused:
                raise InputError(refused, field=annotations)
            pod_sets.append(
                replace(
                    PodSet(replica_type.lower(), template, count, count, template_path),
                    topology=topology,
                )
            )
        if not pod_sets:
            raise InputError("every replica type has 0 replicas", field=where)
        return tuple(pod_sets)

    def hold_at_creation(self, obj: Obj) -> Obj:
        return SUSPEND.at_creation(obj)

    def hold(self, gang: KindGang) -> list[Write]:
        return SUSPEND.stop(gang)

    def release(self, gang: KindGang) -> list[Write]:
        assert gang.head is not None
        assert gang.head_ref is not None
        specs: dict[str, Obj] = {}
        for replica_type, spec in get(gang.head, f"spec.{self.replica_specs}", dict, {}).items():
            gates = [
                g
                for g in get(spec, "template.spec.schedulingGates", list, []) or []
                if isinstance(g, dict) and g.get("name") != ADMISSION_GATE
            ]
            specs[replica_type] = {
                "template": {"spec": {"schedulingGates": [*gates, {"name": ADMISSION_GATE}]}}
            }
        body = {"spec": {"runPolicy": {"suspend": False}, self.replica_specs: specs}}
        return [Patch(ref=gang.head_ref, body=body)]

    def evict(self, gang: KindGang) -> list[Write]:
        return SUSPEND.evict(gang)

    def pod_group_name(self, name: str) -> str:
        # Distinct from a Job's PodGroup of the same name.
        return f"{self.name.lower()}-{name}"

    def pod_group_owners(self, gang: KindGang) -> list[Obj]:
        return head_owner(self._resource, gang)


PYTORCH_JOB = TrainingJob("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs")
TF_JOB = TrainingJob("TFJob", "tfjobs", "tfReplicaSpecs")
XGBOOST_JOB = TrainingJob("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs")
PADDLE_JOB = TrainingJob("PaddleJob", "paddlejobs", "paddleReplicaSpecs")
TRAINING_JOBS = (PYTORCH_JOB, TF_JOB, XGBOOST_JOB, PADDLE_JOB)
