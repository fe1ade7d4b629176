"""Which nodes a pod may use at all, before counting capacity.

These are the kube-scheduler filters that decide GPU placement: node
readiness and cordons, taints against tolerations, ``nodeSelector`` and
required node affinity.  Each check answers with a short, stable
``Exclusion`` that the explanations aggregate ("3 nodes had untolerated
taint gpu=broken:NoSchedule").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from queue_controller.core.model.objects import (
    Node,
    NodeSelectorTerm,
    PodTemplate,
    SelectorRequirement,
    Taint,
    Toleration,
)
from queue_controller.core.model.resources import Resources, is_mig
from queue_controller.core.rules.gpuhealth import all_gpus_unhealthy, gpu_count, healthy_allocatable

MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
HOSTNAME_LABEL = "kubernetes.io/hostname"
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True, order=True)
class Exclusion:
    """Why a node cannot take a pod, in words that stay the same across releases."""

    # NotReady | Unschedulable | UntoleratedTaint | GPUUnhealthy | NodeSelector | NodeAffinity
    code: str
    detail: str = ""

    def describe(self) -> str:
        return f"{self.code} {self.detail}".strip()


NOT_READY = Exclusion("NotReady")
UNSCHEDULABLE = Exclusion("Unschedulable")
SELECTOR_MISMATCH = Exclusion("NodeSelector", "didn't match")
AFFINITY_MISMATCH = Exclusion("NodeAffinity", "didn't match")


def is_ready(node: Node) -> bool:
    return node.conditions.get("Ready") == "True"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``v1.Toleration.ToleratesTaint``: an empty key with Exists tolerates everything."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("Equal", ""):
        return toleration.value == taint.value
    return False


def untolerated_taint(
    taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]
) -> Taint | None:
    """The first NoSchedule/NoExecute taint that no toleration covers."""
    for taint in taints:
        if taint.effect not in _BLOCKING_EFFECTS:
            continue  # PreferNoSchedule only lowers a score
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _requirement_matches(requirement: SelectorRequirement, value: str | None) -> bool:
    operator = requirement.operator
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        # Both sides must be integers, else the node does not match (as upstream).
        if value is None or len(requirement.values) != 1:
            return False
        try:
            actual, bound = int(value), int(requirement.values[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def _term_matches(term: NodeSelectorTerm, node: Node) -> bool:
    # An empty term matches no node (corev1 NodeSelectorTerm semantics).
    if not term.match_expressions and not term.match_fields:
        return False
    for requirement in term.match_expressions:
        if not _requirement_matches(requirement, node.labels.get(requirement.key)):
            return False
    fields = {"metadata.name": node.name}
    return all(_requirement_matches(r, fields.get(r.key)) for r in term.match_fields)


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def affinity_matches(terms: tuple[NodeSelectorTerm, ...] | None, node: Node) -> bool:
    if terms is None:
        return True
    return any(_term_matches(term, node) for term in terms)


def may_select(node: Node, template: PodTemplate) -> bool:
    """Whether the pod's own nodeSelector and required affinity allow ``node``."""
    return selector_matches(template.node_selector, node.labels) and affinity_matches(
        template.required_affinity, node
    )


# What a pod asks for itself comes first: a node outside its own selector is
# reported as such, and the other reasons speak only of nodes it asked for.
SELF_IMPOSED = frozenset({"NodeSelector", "NodeAffinity"})


def exclusion(node: Node, template: PodTemplate) -> Exclusion | None:
    """Why ``node`` can never take a pod of ``template``, or None if it may (capacity aside)."""
    if not selector_matches(template.node_selector, node.labels):
        return SELECTOR_MISMATCH
    if not affinity_matches(template.required_affinity, node):
        return AFFINITY_MISMATCH
    if not is_ready(node):
        return NOT_READY
    if node.unschedulable:
        return UNSCHEDULABLE
    taint = untolerated_taint(node.taints, template.tolerations)
    if taint is not None:
        shown = f"{taint.key}={taint.value}" if taint.value else taint.key
        return Exclusion("UntoleratedTaint", f"{shown}:{taint.effect}")
    if all_gpus_unhealthy(node):
        return gpu_unhealthy(node)
    return None


def gpu_unhealthy(node: Node) -> Exclusion:
    count = gpu_count(node)
    return Exclusion("GPUUnhealthy", f"all {count} GPUs" if count else "all GPUs")


def usable_allocatable(node: Node) -> Resources:
    """What the node offers for scheduling.

    While the MIG manager is reconfiguring a node (its ``mig.config.state``
    is present and not ``success``), the advertised MIG devices are about to
    change or vanish, so none of them are offered.  Unhealthy GPUs offer
    nothing either (see :mod:`queue_controller.core.rules.gpuhealth`).
    """
    state = node.labels.get(MIG_CONFIG_STATE_LABEL)
    allocatable = node.allocatable
    if state is not None and state != "success":
        allocatable = {name: amount for name, amount in allocatable.items() if not is_mig(name)}
    return healthy_allocatable(node, allocatable)
