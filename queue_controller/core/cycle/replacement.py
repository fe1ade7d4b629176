"""Failed-node replacement: a lost node of an admitted topology gang, swapped for one in its domain.

Kueue's TASFailedNodeReplacement.  Without it, one lost node of a 64-node gang throws
away the other 63 members' placement: the MembersLost timeout evicts the gang whole.
With ``onNodeFailure: Replace`` on its Queue (or, when the Queue says nothing, its
TeamQuota), the cycle first looks for one node that takes every member the gang's plan
put on the lost node, and the rest of the gang keeps running.

The rule, kept simple:

* A node of the plan is **lost** when it is gone from the snapshot (deleted), NotReady,
  or has every GPU unhealthy; and it is replaced only once some member planned there is
  missing (no live pod of the gang's pod set is bound there for it).  So a NotReady
  node is replaced once its pods are evicted past their toleration, a deleted one once
  the pod garbage collector has taken its pods, and a node whose GPUs failed once its
  member died (with ``gpuHealth.onUnhealthy: Evict`` the gang is evicted first).
* The replacement lies in the same domain of the pod set's narrowest constraint: its
  requested level (required or preferred), or its slice level when that is above the
  node.  A pod set that asks for no level and no slices may go anywhere in the
  Topology; one required on a single node has no other node to go to.  A deleted
  node's domain is read from a surviving node of its slice, else from the domain the
  PodGroup recorded.
* One node for one node (as Kueue): the replacement holds all the lost node's members
  of the pod set, so a slice that was whole on it stays whole.  Among the nodes that
  fit, the one nearest the lost node (deepest shared domain), then the tightest, then
  by name.  It is placed through the placer (eligibility, health, capacity), and
  committed before any pending gang is tried, so a replacement comes first and no
  capacity is counted twice.
* All or nothing per gang: if one lost node finds no replacement, none of the gang's
  is kept, and the gang is evicted whole by its timeout, as without this feature.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from queue_controller.core.model.decisions import Replacement
from queue_controller.core.model.objects import (
    BoundPod,
    Node,
    NodeFailure,
    Queue,
    TeamQuota,
    Workload,
)
from queue_controller.core.placement.shapes import GangShape, Placement, Placer, SetShape
from queue_controller.core.rules.gpuhealth import all_gpus_unhealthy
from queue_controller.core.rules.nodes import HOSTNAME_LABEL, is_ready, usable_allocatable
from queue_controller.core.rules.prepared import TERMINATED_PHASES, Prepared, Usage
from queue_controller.core.rules.topology import UNCONSTRAINED, TopologyAsk

# How an eviction says that the gang's Queue replaces lost nodes and none fit: ``chaos``
# then judges the eviction as right (the domain was full), not a broken promise.
NOT_REPLACED = "not replaced: "


def lost_reason(node: Node | None) -> str | None:
    """Why a node of a plan is lost (Deleted, NotReady, GPUUnhealthy), or None."""
    if node is None:
        return "Deleted"
    if not is_ready(node):
        return "NotReady"
    if all_gpus_unhealthy(node):
        return "GPUUnhealthy"
    return None


def policy(queue: Queue, quotas: Mapping[str, TeamQuota]) -> NodeFailure:
    """The Queue's ``onNodeFailure`` if it sets one, else its TeamQuota's (default Replace)."""
    if queue.on_node_failure is not None:
        return queue.on_node_failure
    quota = quotas.get(queue.team_quota)
    return quota.on_node_failure if quota is not None else NodeFailure.REPLACE


def replaces(workload: Workload, queue: Queue | None, quotas: Mapping[str, TeamQuota]) -> bool:
    """Whether a lost node of the gang's plan is replaced: some pod set asked for a
    topology (the others have no domain to stay in), and its Queue chose Replace."""
    return (
        queue is not None
        and any(s.topology is not None for s in workload.pod_sets)
        and policy(queue, quotas) is NodeFailure.REPLACE
    )


@dataclass(frozen=True, slots=True)
class LostPlan:
    """An admitted gang with lost nodes to replace: pod set -> (lost node, members)."""

    prepared: Prepared
    lost: Mapping[str, tuple[tuple[str, int], ...]]
    why: Mapping[str, str]  # lost node -> why it is lost


def lost_plans(
    admitted: Sequence[Prepared],
    *,
    queues: Mapping[tuple[str, str], Queue],
    quotas: Mapping[str, TeamQuota],
    nodes: Mapping[str, Node],
    pods: Sequence[BoundPod],
) -> list[LostPlan]:
    """The admitted gangs that chose Replace and have a lost node with a member missing."""
    out: list[LostPlan] = []
    live: Counter[tuple[str, str, str]] | None = None
    for prepared in admitted:
        workload = prepared.workload
        if prepared.error or not workload.pod_sets:
            continue
        if not replaces(workload, queues.get((workload.namespace, workload.queue)), quotas):
            continue
        first = workload.pod_sets[0].name
        plans = workload.pod_set_placement or {first: workload.placement}
        why = {
            node: reason
            for plan in plans.values()
            for node in plan
            if (reason := lost_reason(nodes.get(node))) is not None
        }
        if not why:
            continue
        if live is None:  # counted once, and only when some plan has a lost node
            live = Counter(
                (p.workload, p.pod_set, p.node_name)
                for p in pods
                if p.workload and p.phase not in TERMINATED_PHASES and not p.deleting
            )
        lost: dict[str, tuple[tuple[str, int], ...]] = {}
        for pod_set, plan in sorted(plans.items()):
            here = []
            for node, planned in sorted(plan.items()):
                if node not in why or planned <= 0:
                    continue
                present = live[(workload.key, pod_set, node)]
                if pod_set == first:  # a pod that names no pod set is of the first
                    present += live[(workload.key, "", node)]
                if present < planned:
                    here.append((node, planned))
            if here:
                lost[pod_set] = tuple(here)
        if lost:
            out.append(LostPlan(prepared, lost, why))
    return out


class _Search:
    """One gang's replacements, tried and committed on the cycle's placer."""

    def __init__(self, plan: LostPlan, nodes: Mapping[str, Node], used: Usage) -> None:
        self.plan = plan
        self.nodes = nodes
        self.used = used
        self.workload = plan.prepared.workload

    def path(self, name: str, ask: TopologyAsk) -> tuple[str, ...] | None:
        """A live node's label values at every domain level, if it is inside the Topology."""
        node = self.nodes.get(name)
        if node is None:
            return None
        values = tuple(node.labels.get(key) for key in ask.levels)
        if any(v is None for v in values) or (
            ask.has_hostname and HOSTNAME_LABEL not in node.labels
        ):
            return None
        return tuple(v for v in values if v is not None)

    def domain_of(
        self, pod_set: str, lost: str, ask: TopologyAsk, depth: int
    ) -> tuple[str, ...] | None:
        """The lost node's domain at ``depth``: its own labels while it exists, else a
        surviving node of its slice, else the domain the PodGroup recorded."""
        if depth == UNCONSTRAINED:
            return ()
        own = self.path(lost, ask)
        if own is not None:
            return own[: depth + 1]
        for one in self.workload.slices.get(pod_set, ()):
            if lost not in one:
                continue
            for other in sorted(one):
                found = self.path(other, ask) if other not in self.plan.why else None
                if found is not None and depth <= ask.cut_depth:
                    return found[: depth + 1]
        recorded = self.workload.topology_domains.get(pod_set, "")
        parts = tuple(recorded.split("/")) if recorded else ()
        return parts[: depth + 1] if len(parts) > depth else None

    def one(
        self, item: SetShape, lost: str, members: int, placer: Placer
    ) -> tuple[Replacement, Placement] | str:
        """The replacement of ``lost`` for one pod set, committed; or why there is none."""
        shape = item.shape
        ask = shape.topology
        pod_set = item.pod_set.name
        if ask is None:
            return f"pod set {pod_set} asked for no topology: it has no domain to stay in"
        depth = _depth(ask)
        if depth >= ask.node_depth:
            return f"pod set {pod_set} is required on one node: no other node is in its domain"
        domain = self.domain_of(pod_set, lost, ask, depth)
        if domain is None:
            return f"the domain of lost node {lost} is not known"
        near = self.path(lost, ask) or domain
        best: tuple[tuple[int, int, str], Placement] | None = None
        best_path: tuple[str, ...] = ()
        for name in sorted(self.nodes):
            if name in self.plan.why:
                continue
            path = self.path(name, ask)
            if path is None or path[: len(domain)] != domain:
                continue
            placement = placer.place_on(shape, {name: members})
            if placement is None:
                continue
            rank = (-_shared(path, near), self._room(name, shape), name)
            if best is None or rank < best[0]:
                best = (rank, placement)
                best_path = path
        if best is None:
            where = (
                f"{ask.level_name(depth)} {'/'.join(domain)}"
                if depth != UNCONSTRAINED
                else f"Topology {ask.topology}"
            )
            return (
                f"no node of {where} takes the {members} member{'s' if members > 1 else ''} "
                f"of pod set {pod_set} that {'were' if members > 1 else 'was'} on {lost}"
            )
        node = best[0][2]
        placer.commit(shape, best[1])
        found = Replacement(
            key=self.workload.key,
            pod_set=item.pod_set.name,
            lost=lost,
            why=self.plan.why[lost],
            node=node,
            members=members,
            domain="/".join(domain),
            node_domain="/".join((*best_path, node) if ask.has_hostname else best_path),
        )
        return found, best[1]

    def _room(self, name: str, shape: GangShape) -> int:
        """Members of ``shape`` the node holds now, for best fit (the placer decides fit)."""
        allocatable = usable_allocatable(self.nodes[name])
        used = self.used.get(name, {})
        fits = [
            (allocatable.get(r, 0) - used.get(r, 0)) // a for r, a in shape.request.items() if a > 0
        ]
        return min(fits, default=0)


def _depth(ask: TopologyAsk) -> int:
    """The narrowest domain level the pod set is kept in (UNCONSTRAINED: the Topology)."""
    depths = [ask.depth] if ask.depth != UNCONSTRAINED else []
    # Every slice layer above the node (layered slices: the narrowest such layer binds).
    depths += [depth for depth, _ in ask.layers if depth < ask.node_depth]
    return max(depths, default=UNCONSTRAINED)


def _shared(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


def replace_lost(
    plans: Sequence[LostPlan],
    *,
    shapes: Mapping[str, tuple[SetShape, ...]],
    placer: Placer,
    nodes: Mapping[str, Node],
    used: Usage,
    held: dict[str, Usage],
) -> tuple[tuple[Replacement, ...], dict[str, str]]:
    """Each gang's replacements, all or none, committed on ``placer``; ``used`` and
    ``held`` charged with them, as if the plans already named the new nodes.  And, for
    each gang that gets none, why (its eviction says so: core's word, not a guess)."""
    out: list[Replacement] = []
    unreplaced: dict[str, str] = {}
    for plan in plans:
        key = plan.prepared.workload.key
        sets = {item.pod_set.name: item for item in shapes.get(key, ())}
        search = _Search(plan, nodes, used)
        done: list[tuple[SetShape, Replacement, Placement]] = []
        whole = True
        for pod_set, lost in sorted(plan.lost.items()):
            item = sets.get(pod_set)
            for node, members in lost:
                if item is None:
                    unreplaced[key] = f"pod set {pod_set} is not in the workload"
                    whole = False
                    break
                result = search.one(item, node, members, placer)
                if isinstance(result, str):
                    unreplaced[key] = result
                    whole = False
                    break
                done.append((item, *result))
            if not whole:
                break
        if not whole:
            for item, _, placement in done:
                placer.release(item.shape, placement)
            continue
        for item, found, _ in done:
            for into in (used, held.setdefault(key, {})):
                node_used = into.setdefault(found.node, {})
                for resource, amount in item.shape.request.items():
                    node_used[resource] = node_used.get(resource, 0) + amount * found.members
            out.append(found)
    return tuple(out), unreplaced
