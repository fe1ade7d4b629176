"""A Ray cluster's spec as a gang: what a RayCluster and a RayJob's ``rayClusterSpec`` share.

A Ray cluster is one head pod and each worker group's pods; each is one pod set
(``head``, then each group's name in lower case, as in Kueue).  A worker group makes
what KubeRay makes of it: ``replicas`` held between ``minReplicas`` and
``maxReplicas``, times ``numOfHosts``.  That is where we differ from Kueue, which counts
``replicas`` as written: a count outside the bounds would charge the quota for pods
KubeRay never makes, or make pods the quota never charged.

Refused with InvalidSpec, naming the field, as Kueue refuses them at its webhook:
``enableInTreeAutoscaling`` (an autoscaled cluster changes its size, so it has no one
placement to admit whole), a worker group named ``head`` (its pod set would be the
head's), and two groups whose names are one pod set's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from queue_controller.core.model import PodSet
from queue_controller.errors import InputError
from queue_controller.kube.fields import MAX_GANG_MEMBERS, Obj, get, strings
from queue_controller.kube.kinds.managed import raw_mapping
from queue_controller.kube.kinds.topology import topology_request
from queue_controller.kube.objects import pod_template
from queue_controller.kube.resources import ADMISSION_GATE
from queue_controller.kube.views import MemberPod

API_GROUP = "ray.io"
API_VERSION = "ray.io/v1"
HEAD = "head"
# KubeRay's labels on every pod it makes for a cluster.
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
# KubeRay's CRD defaults: a worker group's bounds when they are not written.
INT32_MAX = 2**31 - 1


def pod_set_of(pod: MemberPod) -> str:
    """A cluster pod's pod set: ``head``, or its worker group's name in lower case."""
    if pod.labels.get(NODE_TYPE_LABEL) == HEAD:
        return HEAD
    return pod.labels.get(GROUP_LABEL, "").lower()


def made_by_ray(pod: MemberPod, kind: str) -> bool:
    """Whether ``pod``'s controlling owner is KubeRay's ``kind`` (RayCluster, RayJob)."""
    owner = pod.owner
    return owner is not None and owner.kind == kind and owner.api_version.startswith("ray.io/")


def cluster_pod_specs(spec: Mapping[str, Any]) -> list[Obj]:
    """Every pod spec of a cluster spec, read raw (never failing)."""
    groups = spec.get("workerGroupSpecs")
    workers = [
        raw_mapping(group, "template", "spec")
        for group in (groups if isinstance(groups, list) else [])
        if isinstance(group, Mapping)
    ]
    return [raw_mapping(spec, "headGroupSpec", "template", "spec"), *workers]


def _count(group: Obj, path: str) -> int:
    """The pods KubeRay makes of one worker group (its GetWorkerGroupDesiredReplicas)."""
    try:
        if get(group, "suspend", bool, False):
            return 0
        replicas = get(group, "replicas", int, 0)
        low = get(group, "minReplicas", int, 0)
        high = get(group, "maxReplicas", int, INT32_MAX)
        hosts = get(group, "numOfHosts", int, 1)
    except InputError as error:
        raise error.located(field_prefix=path) from None
    for name, value in (("replicas", replicas), ("minReplicas", low), ("numOfHosts", hosts)):
        if value < 0:
            raise InputError(f"{value}: a count of pods is 0 or more", field=f"{path}.{name}")
    return (high if low > high else min(max(replicas, low), high)) * hosts


def cluster_annotations(spec: Obj, where: str) -> list[tuple[str, dict[str, str]]]:
    """Each group's pod template annotations, the head's first, with their field paths
    (for the runtime annotation: kinds/runtime.py); InputError naming one that is not a
    map of strings."""
    groups: list[tuple[str, Obj]] = [(f"{where}.headGroupSpec", raw_mapping(spec, "headGroupSpec"))]
    workers = spec.get("workerGroupSpecs")
    for index, group in enumerate(workers if isinstance(workers, list) else []):
        if isinstance(group, Mapping):
            groups.append((f"{where}.workerGroupSpecs[{index}]", group))
    return [
        (f"{path}.template.metadata.annotations", strings(group, "template.metadata.annotations"))
        for path, group in groups
    ]


def template_pod_set(
    name: str, holder: Obj, path: str, count: int, extra: Obj | None = None
) -> PodSet:
    """One pod set from ``holder``'s ``template``; InputError naming the field."""
    template_path = f"{path}.template.spec"
    raw = get(holder, "template.spec", dict, {})
    if extra:
        raw = {**raw, "containers": [*get(raw, "containers", list, []), extra]}
    try:
        template = pod_template(raw)
    except InputError as error:
        raise error.located(field_prefix=template_path) from None
    annotations = f"{path}.template.metadata.annotations"
    topology, refused = topology_request(
        strings(holder, "template.metadata.annotations"), prefix=annotations, no_index=""
    )
    if refused:
        raise InputError(refused, field=annotations)
    return replace(PodSet(name, template, count, count, template_path), topology=topology)


def cluster_pod_sets(spec: Obj, where: str, head_extra: Obj | None = None) -> list[PodSet]:
    """The head's pod set and each worker group's, from the cluster spec at ``where``
    (``spec``, or ``spec.rayClusterSpec``); InputError naming the field that is wrong.
    ``head_extra``: a container KubeRay adds to the head pod (a RayJob's submitter in
    SidecarMode), charged with it."""
    if get(spec, "enableInTreeAutoscaling", bool, False):
        raise InputError(
            "an autoscaled Ray cluster changes its number of workers, so it has no one "
            "placement to admit whole; not queued (as in Kueue)",
            field=f"{where}.enableInTreeAutoscaling",
        )
    head_path = f"{where}.headGroupSpec"
    if not get(spec, "headGroupSpec.template.spec", dict, {}):
        raise InputError("a Ray cluster needs its head's pod template", field=head_path)
    pod_sets = [
        template_pod_set(HEAD, get(spec, "headGroupSpec", dict, {}), head_path, 1, head_extra)
    ]
    total = 1
    for index, group in enumerate(get(spec, "workerGroupSpecs", list, []) or []):
        path = f"{where}.workerGroupSpecs[{index}]"
        if not isinstance(group, dict):
            raise InputError("expected an object", field=path)
        name = get(group, "groupName", str, "").lower()
        if not name or name == HEAD or any(s.name == name for s in pod_sets[1:]):
            why = "is reserved for the head group" if name == HEAD else "names another group"
            raise InputError(
                f"{name!r} {why if name else 'is no name'}: each worker group is its own pod set",
                field=f"{path}.groupName",
            )
        count = _count(group, path)
        total += count
        if total > MAX_GANG_MEMBERS:
            raise InputError(
                f"{total} pods: more than a cluster can run at once ({MAX_GANG_MEMBERS})",
                field=f"{path}.replicas",
            )
        if count:
            pod_sets.append(template_pod_set(name, group, path, count))
    return pod_sets


def gated_template(template: Obj, labels: Mapping[str, str]) -> Obj:
    """``template`` with our scheduling gate (once) and ``labels`` added: the pods made
    from it wait for their planned nodes, and say whose they are."""
    spec = dict(get(template, "spec", dict, {}))
    gates = [
        g
        for g in get(spec, "schedulingGates", list, []) or []
        if isinstance(g, dict) and g.get("name") != ADMISSION_GATE
    ]
    spec["schedulingGates"] = [*gates, {"name": ADMISSION_GATE}]
    meta = dict(get(template, "metadata", dict, {}))
    if labels:
        meta["labels"] = {**get(meta, "labels", dict, {}), **labels}
    return {**template, "metadata": meta, "spec": spec}


def gated_cluster_spec(spec: Obj, labels: Mapping[str, str]) -> Obj:
    """The merge patch of a cluster spec that gates every template.  ``workerGroupSpecs``
    is a list, which a merge patch replaces whole: it is written as read, each group's
    template gated, and the write is conditional on the version read."""
    head = get(spec, "headGroupSpec", dict, {})
    groups = [
        {**group, "template": gated_template(get(group, "template", dict, {}), labels)}
        for group in get(spec, "workerGroupSpecs", list, []) or []
        if isinstance(group, dict)
    ]
    patch: dict[str, Any] = {
        "headGroupSpec": {"template": gated_template(get(head, "template", dict, {}), labels)}
    }
    if groups:
        patch["workerGroupSpecs"] = groups
    return patch
