"""``batch/v1`` Job: a gang of ``parallelism`` pods from one template.

Held by ``spec.suspend`` (set by the webhook at creation), released by
unsuspending it with our scheduling gate added to its pod template, so the
pods it creates wait for their planned nodes; evicted by suspending it again,
which makes the Job controller delete its pods.

A gang is ``parallelism`` pods (capped by ``completions``), of which
``min-member`` must be placed together.  Anything of the Job that cannot be
read, or that makes no gang (no pods, a minimum of 0 or above the pods, more
members than a cluster can hold: :data:`fields.MAX_GANG_MEMBERS`), is the gang's
``spec_error``, naming the field: the gang is InvalidSpec on its own, and
nothing else of the cycle notices it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from queue_controller.core.model import one_pod_set
from queue_controller.errors import InputError
from queue_controller.kube.fields import (
    INT64_MAX,
    MAX_GANG_MEMBERS,
    Obj,
    get,
    strings,
    timestamp,
    whole_number,
)
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
from queue_controller.kube.resources import ADMISSION_GATE, JOB, Resource
from queue_controller.kube.views import MemberPod, Patch, Write

FINISHED_CONDITIONS = ("Complete", "Failed")
# Volcano users set a gang's minimum on the job itself; the PodGroup then carries it.
MIN_MEMBER_ANNOTATION = "queue-controller.io/min-member"
TIMEOUT_ANNOTATION = "queue-controller.io/pods-ready-timeout-seconds"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
# Where a Job keeps its pod template: messages about a bad template name the field there.
TEMPLATE_PATH = "spec.template.spec"
# Where its members' topology request is written: the pod template's annotations.
TEMPLATE_ANNOTATIONS = "spec.template.metadata.annotations"
POD_SET = "main"


def _whole_number(obj: Obj, annotation: str, maximum: int) -> int | None:
    """The annotation's whole number, None if absent; InputError naming it if it is not one."""
    raw = get(obj, "metadata.annotations", dict, {}).get(annotation)
    if raw is None:
        return None
    return whole_number(raw, field=f"metadata.annotations[{annotation}]", maximum=maximum)


def _gang_size(head: Obj) -> tuple[int, int]:
    """(pods, members placed together) of a Job; InputError naming the field that is wrong."""
    parallelism = get(head, "spec.parallelism", int, 1)
    completions = get(head, "spec.completions", int, -1)
    count = min(parallelism, completions) if completions >= 0 else parallelism
    field = "spec.parallelism" if count == parallelism else "spec.completions"
    if count < 1:
        raise InputError(f"{count}: the Job runs no pods, a gang of nobody", field=field)
    if count > MAX_GANG_MEMBERS:
        raise InputError(
            f"{count} pods: more than a cluster can run at once ({MAX_GANG_MEMBERS})", field=field
        )
    min_member = _whole_number(head, MIN_MEMBER_ANNOTATION, MAX_GANG_MEMBERS)
    if min_member is None:
        return count, count
    where = f"metadata.annotations[{MIN_MEMBER_ANNOTATION}]"
    if min_member < 1:
        raise InputError("0: a gang of nobody; at least 1 member", field=where)
    if min_member > count:
        raise InputError(
            f"{min_member} members, but the Job runs only {count} pods at once ({field})",
            field=where,
        )
    return count, min_member


def _runtime(head: Obj, labels: dict[str, str]) -> RuntimeAsk:
    """The template's runtime annotation, else the Job's; the Job's or its pods' deadline."""
    return runtime_ask(
        annotations=(
            (TEMPLATE_ANNOTATIONS, strings(head, TEMPLATE_ANNOTATIONS)),
            ("metadata.annotations", strings(head, "metadata.annotations")),
        ),
        deadlines=(
            ("spec.activeDeadlineSeconds", raw_mapping(head, "spec").get("activeDeadlineSeconds")),
            (
                f"{TEMPLATE_PATH}.activeDeadlineSeconds",
                raw_mapping(head, "spec", "template", "spec").get("activeDeadlineSeconds"),
            ),
        ),
        labels=labels,
    )


# Held, stopped and evicted by spec.suspend.
SUSPEND = SuspendedHead("spec.suspend")


class BatchJob:
    name: str = "Job"
    head: Resource | None = JOB
    webhook: WebhookRule = WebhookRule(resource=JOB)
    held_until_bound: bool = False
    optional: bool = False
    status_read: frozenset[str] = frozenset({"conditions"})  # Complete, Failed
    rbac: tuple[RbacRule, ...] = head_rbac(
        JOB, "find queued Jobs; suspend, unsuspend and gate their pod template"
    )

    def pod_specs(self, obj: Obj) -> list[Obj]:
        return [raw_mapping(obj, "spec", "template", "spec")]

    def is_queued(self, obj: Obj) -> bool:
        return bool(queue_name(strings(obj, "metadata.labels")))

    def membership(self, pod: MemberPod) -> Membership | None:
        if pod.owner is not None:
            if pod.owner.kind != "Job":
                return None
            return Membership(workload=pod.owner.name, pod_set=POD_SET)
        name = next((pod.labels[k] for k in JOB_NAME_LABELS if k in pod.labels), "")
        return Membership(workload=name, pod_set=POD_SET) if name else None

    def read(
        self, *, namespace: str, name: str, head: Obj | None, members: Sequence[MemberPod]
    ) -> KindGang:
        assert head is not None, "a Job gang is read from its Job"
        labels = strings(head, "metadata.labels")  # read already, to find it queued
        errors: list[str] = []
        finished, succeeded = read_or(
            lambda: finished_by(head, FINISHED_CONDITIONS), (False, False), errors
        )
        facts = read_or(lambda: self._facts(head, members, finished, succeeded), None, errors)
        if facts is None:
            # Whatever else cannot be read makes the gang InvalidSpec, on its own.
            facts = KindFacts(
                queue=queue_name(labels),
                pod_sets=(),
                held=read_or(lambda: get(head, "spec.suspend", bool, False), False, []),
                finished=finished,
                succeeded=succeeded,
                spec_error=errors[-1],
            )
        created = read_or(lambda: timestamp(head, "metadata.creationTimestamp"), None, errors)
        facts = replace(facts, runtime=read_or(lambda: _runtime(head, labels), NO_ASK, errors))
        if errors and not facts.spec_error:
            facts = replace(facts, spec_error=errors[0])
        return head_gang(
            JOB,
            namespace=namespace,
            name=name,
            head=head,
            members=members,
            facts=facts,
            created=created,
            labels=labels,
        )

    def _facts(
        self, head: Obj, members: Sequence[MemberPod], finished: bool, succeeded: bool
    ) -> KindFacts:
        """The gang's facts; InputError naming the first field that cannot be read."""
        held = get(head, "spec.suspend", bool, False)
        try:
            template = pod_template(get(head, TEMPLATE_PATH, dict, {}))
        except InputError as error:
            raise error.located(field_prefix=TEMPLATE_PATH) from None
        timeout = _whole_number(head, TIMEOUT_ANNOTATION, INT64_MAX)
        parallelism, min_member = _gang_size(head)
        # Slices are filled by completion index, which only an Indexed Job gives its pods.
        indexed = get(head, "spec.completionMode", str, "NonIndexed") == "Indexed"
        topology, topology_error = topology_request(
            strings(head, TEMPLATE_ANNOTATIONS),
            prefix=TEMPLATE_ANNOTATIONS,
            no_index=""
            if indexed
            else (
                "slices are filled by completion index: the Job needs spec.completionMode: Indexed"
            ),
        )
        pod_sets = one_pod_set(
            template, count=parallelism, min_count=min_member, name=POD_SET, path=TEMPLATE_PATH
        )
        return KindFacts(
            queue=queue_name(strings(head, "metadata.labels")),
            pod_sets=tuple(replace(s, topology=topology) for s in pod_sets),
            held=held,
            finished=finished,
            # The Job controller makes a pod for each running slot not filled yet.
            uncreated_members=0 if finished else max(0, parallelism - sum(p.made for p in members)),
            succeeded=succeeded,
            spec_error=topology_error,
            timeout_seconds=timeout,
        )

    def hold_at_creation(self, obj: Obj) -> Obj:
        return SUSPEND.at_creation(obj)

    def hold(self, gang: KindGang) -> list[Write]:
        return SUSPEND.stop(gang)

    def release(self, gang: KindGang) -> list[Write]:
        assert gang.head is not None
        assert gang.head_ref is not None
        template = get(gang.head, "spec.template.spec", dict, {})
        gates = [
            g for g in template.get("schedulingGates", []) or [] if g.get("name") != ADMISSION_GATE
        ]
        body = {
            "spec": {
                "suspend": False,
                "template": {"spec": {"schedulingGates": [*gates, {"name": ADMISSION_GATE}]}},
            }
        }
        return [Patch(ref=gang.head_ref, body=body)]

    def evict(self, gang: KindGang) -> list[Write]:
        return SUSPEND.evict(gang)

    def pod_group_name(self, name: str) -> str:
        return name

    def pod_group_owners(self, gang: KindGang) -> list[Obj]:
        return head_owner(JOB, gang)
