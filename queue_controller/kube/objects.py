"""Kubernetes objects (raw camelCase dicts) to core model values.

Every function raises :class:`InputError` with the field path when the object
is malformed; the caller adds which object or document it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from queue_controller.api import v1alpha1
from queue_controller.core.model import (
    AdmissionFairSharing,
    Cohort,
    Container,
    Node,
    NodeFailure,
    NodeSelectorTerm,
    Ordering,
    PodClaim,
    PodTemplate,
    Preemption,
    PriorityClass,
    Queue,
    RequeuePolicy,
    ReservationPolicy,
    ResourceQuota,
    SelectorRequirement,
    Taint,
    TeamQuota,
    Toleration,
    Topology,
    TopologyPlacement,
    parse_milli,
)
from queue_controller.errors import InputError, QuantityError, shown
from queue_controller.kube import nodehealth
from queue_controller.kube.fields import Obj, epoch_seconds, get, objects, strings

_AFFINITY = "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _resources(obj: Obj, path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, raw in get(obj, path, dict, {}).items():
        try:
            out[str(name)] = parse_milli(raw)
        except QuantityError as error:
            raise InputError(error.detail, field=f"{path}.{name}") from None
    return out


def _raw_quantities(obj: Obj, path: str) -> dict[str, Any]:
    return dict(get(obj, path, dict, {}))


def _container(obj: Obj) -> Container:
    return Container(
        name=get(obj, "name", str, ""),
        requests=_raw_quantities(obj, "resources.requests"),
        limits=_raw_quantities(obj, "resources.limits"),
        restart_policy=get(obj, "restartPolicy", str, ""),
    )


def _requirements(term: Obj, path: str) -> tuple[SelectorRequirement, ...]:
    out = []
    for i, item in enumerate(objects(term, path)):
        operator = get(item, "operator", str, "")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            raise InputError(f"unknown operator {shown(operator)}", field=f"{path}[{i}].operator")
        values = get(item, "values", list, [])
        out.append(
            SelectorRequirement(
                key=get(item, "key", str, ""),
                operator=operator,
                values=tuple(str(v) for v in values),
            )
        )
    return tuple(out)


def _affinity(spec: Obj) -> tuple[NodeSelectorTerm, ...] | None:
    required = get(spec, _AFFINITY, dict, {})
    if not required:
        return None
    terms = []
    for i, term in enumerate(objects(required, "nodeSelectorTerms")):
        try:
            terms.append(
                NodeSelectorTerm(
                    match_expressions=_requirements(term, "matchExpressions"),
                    match_fields=_requirements(term, "matchFields"),
                )
            )
        except InputError as error:
            raise error.located(field_prefix=f"{_AFFINITY}.nodeSelectorTerms[{i}]") from None
    return tuple(terms)


def _toleration(obj: Obj) -> Toleration:
    return Toleration(
        key=get(obj, "key", str, ""),
        operator=get(obj, "operator", str, "Equal"),
        value=get(obj, "value", str, ""),
        effect=get(obj, "effect", str, ""),
    )


def _pod_claim(obj: Obj) -> PodClaim:
    """One ``spec.resourceClaims`` entry: a name and exactly one of claim or template."""
    name = get(obj, "name", str, "")
    if not name:
        raise InputError("needs a name", field="name")
    claim = get(obj, "resourceClaimName", str, "")
    template = get(obj, "resourceClaimTemplateName", str, "")
    if bool(claim) == bool(template):
        raise InputError("needs exactly one of resourceClaimName and resourceClaimTemplateName")
    return PodClaim(name=name, claim_name=claim, template_name=template)


def _pod_claims(spec: Obj) -> tuple[PodClaim, ...]:
    out: list[PodClaim] = []
    for i, item in enumerate(objects(spec, "resourceClaims")):
        try:
            claim = _pod_claim(item)
            if any(c.name == claim.name for c in out):
                raise InputError(f"the claim {claim.name!r} is named twice", field="name")
        except InputError as error:
            raise error.located(field_prefix=f"resourceClaims[{i}]") from None
        out.append(claim)
    return tuple(out)


def pod_template(spec: Obj) -> PodTemplate:
    """A PodSpec (of a Pod, or of a Job's ``spec.template.spec``)."""
    return PodTemplate(
        containers=tuple(_container(c) for c in objects(spec, "containers")),
        init_containers=tuple(_container(c) for c in objects(spec, "initContainers")),
        overhead=_raw_quantities(spec, "overhead"),
        node_selector=strings(spec, "nodeSelector"),
        required_affinity=_affinity(spec),
        tolerations=tuple(_toleration(t) for t in objects(spec, "tolerations")),
        priority_class_name=get(spec, "priorityClassName", str, ""),
        resource_claims=_pod_claims(spec),
    )


def node(obj: Obj) -> Node:
    status_key = (
        "status.allocatable" if get(obj, "status.allocatable", dict, {}) else "status.capacity"
    )
    conditions = {
        get(c, "type", str, ""): get(c, "status", str, "Unknown")
        for c in objects(obj, "status.conditions")
    }
    return Node(
        name=get(obj, "metadata.name", str, ""),
        allocatable=_resources(obj, status_key),
        labels=strings(obj, "metadata.labels"),
        taints=tuple(
            Taint(
                key=get(t, "key", str, ""),
                value=get(t, "value", str, ""),
                effect=get(t, "effect", str, ""),
            )
            for t in objects(obj, "spec.taints")
        ),
        unschedulable=get(obj, "spec.unschedulable", bool, False),
        conditions=conditions,
        capacity=_resources(obj, "status.capacity"),
        gpu_health=nodehealth.gpu_health(obj),
    )


def priority_class(obj: Obj) -> PriorityClass:
    return PriorityClass(
        name=get(obj, "metadata.name", str, ""),
        value=get(obj, "value", int, 0),
        global_default=get(obj, "globalDefault", bool, False),
    )


_Model = TypeVar(
    "_Model",
    v1alpha1.TeamQuota,
    v1alpha1.Cohort,
    v1alpha1.Topology,
    v1alpha1.Queue,
    v1alpha1.PodGroup,
)


def _validated(model: type[_Model], obj: Obj) -> _Model:
    try:
        return model.model_validate(obj)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        raise InputError(first["msg"].removeprefix("Value error, "), field=field) from None


def _milli(value: str | int | None) -> int | None:
    return None if value is None else parse_milli(value)


def _quota_limits(spec: Mapping[str, v1alpha1.ResourceLimits]) -> dict[str, ResourceQuota]:
    return {
        name: ResourceQuota(
            nominal=parse_milli(limits.nominal),
            borrowing_limit=_milli(limits.borrowingLimit),
            lending_limit=_milli(limits.lendingLimit),
        )
        for name, limits in spec.items()
    }


def team_quota(obj: Obj) -> TeamQuota:
    model = _validated(v1alpha1.TeamQuota, obj)
    preemption = model.spec.preemption
    return TeamQuota(
        name=model.metadata.name,
        cohort=model.spec.cohort,
        resources=_quota_limits(model.spec.resources),
        preemption=Preemption(
            reclaim_within_cohort=preemption.reclaimWithinCohort,
            within_team_quota=preemption.withinTeamQuota,
            borrow_within_cohort=preemption.borrowWithinCohort.policy,
            borrow_max_priority=preemption.borrowWithinCohort.maxPriorityThreshold,
        ),
        fair_weight=parse_milli(model.spec.fairSharing.weight),
        admission_fair_sharing=_admission_fair_sharing(model.spec.admissionFairSharing),
        on_node_failure=NodeFailure(model.spec.onNodeFailure.value),
    )


def _admission_fair_sharing(
    spec: v1alpha1.AdmissionFairSharing | None,
) -> AdmissionFairSharing | None:
    if spec is None:
        return None
    return AdmissionFairSharing(
        usage_half_life_seconds=float(spec.usageHalfLifeSeconds),
        usage_sampling_interval_seconds=float(spec.usageSamplingIntervalSeconds),
        resource_weights={
            name: parse_milli(weight) for name, weight in spec.resourceWeights.items()
        },
    )


def consumed_usage(status: Mapping[str, Any]) -> tuple[dict[str, float], float | None]:
    """A Queue's status.fairSharing.admissionFairSharingStatus: (resource -> milli-units,
    lastUpdate in seconds since the epoch), or ({}, None) when there is none.

    The controller writes it; one it cannot read (a dump edited by hand) counts as
    never sampled rather than leaving the Queue out: the next sample writes it anew.
    """
    fair = status.get("fairSharing")
    held = fair.get("admissionFairSharingStatus") if isinstance(fair, Mapping) else None
    if not isinstance(held, Mapping):
        return {}, None
    try:
        model = v1alpha1.AdmissionFairSharingStatus.model_validate(held)
    except ValidationError:
        return {}, None
    consumed = {
        name: float(parse_milli(amount)) for name, amount in model.consumedResources.items()
    }
    return consumed, epoch_seconds(model.lastUpdate)


def cohort(obj: Obj) -> Cohort:
    model = _validated(v1alpha1.Cohort, obj)
    fair = model.spec.fairSharing
    return Cohort(
        name=model.metadata.name,
        fair_sharing=fair.enabled,
        preemption_strategies=tuple(fair.preemptionStrategies),
        parent=model.spec.parentName,
        resources=_quota_limits(model.spec.resources),
        fair_weight=parse_milli(fair.weight),
    )


def topology(obj: Obj) -> Topology:
    model = _validated(v1alpha1.Topology, obj)
    return Topology(
        name=model.metadata.name,
        levels=tuple(level.nodeLabel for level in model.spec.levels),
        placement=TopologyPlacement(model.spec.placement.value),
    )


def queue(obj: Obj) -> Queue:
    model = _validated(v1alpha1.Queue, obj)
    spec = model.spec
    consumed, consumed_at = consumed_usage(model.status)
    return Queue(
        namespace=model.metadata.namespace or "default",
        name=model.metadata.name,
        team_quota=spec.teamQuota,
        ordering=Ordering(spec.ordering.value),
        pods_ready_timeout_seconds=spec.podsReadyTimeoutSeconds,
        requeue=RequeuePolicy(
            backoff_base_seconds=spec.requeue.backoffBaseSeconds,
            backoff_max_seconds=spec.requeue.backoffMaxSeconds,
            backoff_limit=spec.requeue.backoffLimit,
        ),
        evict_on_gpu_unhealthy=spec.gpuHealth.onUnhealthy is v1alpha1.GpuUnhealthyPolicy.EVICT,
        evict_idle=spec.gpuHealth.evictIdle,
        topology_name=spec.topologyName,
        fair_weight=parse_milli(spec.fairSharing.weight),
        consumed=consumed,
        consumed_at=consumed_at,
        reservation=_reservation(spec.reservation),
        on_node_failure=(
            NodeFailure(spec.onNodeFailure.value) if spec.onNodeFailure is not None else None
        ),
    )


def _reservation(spec: v1alpha1.ReservationSpec | None) -> ReservationPolicy:
    """spec.reservation as the core's policy; absent (or no afterSeconds): off."""
    if spec is None:
        return ReservationPolicy()
    return ReservationPolicy(
        after_seconds=spec.afterSeconds,
        max_per_team_quota=spec.maxPerTeamQuota,
        overrun=spec.overrun,
        backfill_margin_seconds=spec.backfillMarginSeconds,
    )


def pod_group(obj: Obj) -> v1alpha1.PodGroup:
    return _validated(v1alpha1.PodGroup, obj)


def labels_of(obj: Obj) -> Mapping[str, str]:
    return strings(obj, "metadata.labels")
