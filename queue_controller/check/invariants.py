"""The invariants, each a pure function of one look at the cluster.

Counted from Pods, Nodes and the workloads' own objects (:mod:`.gangstate`);
the controller's status is read only for what it alone knows: what it planned
(``placement``), that it evicted (the ``Evicted`` condition), and when it saw
members lost (``PodsReady``/``MembersLost``, which only ever postpones a verdict).  The quota
rules are the core's (``core/quota/tree.py``: what is guaranteed, lent and drawn at
every level of a cohort tree),
and a gang's charge is the core's (``Prepared.need``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from queue_controller.check.gangstate import GangState, gang_state
from queue_controller.check.violations import Invariant, Violation
from queue_controller.core.model import Cohort, TeamQuota, format_milli, is_extended
from queue_controller.core.quota import QuotaTree
from queue_controller.core.rules import TERMINATED_PHASES, PriorityTable
from queue_controller.kube.fields import Obj, get
from queue_controller.kube.gangs import HOLDING_PHASES
from queue_controller.kube.snapshot import Translation


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """The controller's clock, as ``check`` assumes it (the controller's own defaults)."""

    cycle_seconds: float = 5.0  # its safety-net tick: every change is acted on within one
    pods_ready_timeout_seconds: int = 300  # when neither the PodGroup nor the Queue says


def violations(
    seen: Translation, pod_groups: Iterable[Obj], *, now: float, timing: Timing
) -> list[Violation]:
    """Every invariant broken in this one look at the cluster, in a stable order."""
    priorities = PriorityTable(seen.snapshot.priority_classes)
    gangs = [gang_state(view, priorities) for view in seen.gangs]
    found = [
        *_overcommitted_nodes(seen),
        *_overdrawn_quotas(seen, gangs),
        *_admitted_twice(gangs, pod_groups),
        *_partially_placed(gangs, now, timing),
        *_evicted_still_holding(gangs, now, timing),
        *_members_off_plan(gangs),
        *_members_off_slice(gangs),
    ]
    return sorted(found, key=lambda v: (v.invariant.value, v.objects))


def _overcommitted_nodes(seen: Translation) -> Iterable[Violation]:
    used: dict[str, Counter[str]] = defaultdict(Counter)
    on_node: dict[str, list[str]] = defaultdict(list)
    for pod in seen.snapshot.pods:
        if pod.phase in TERMINATED_PHASES:
            continue
        counted = False
        for resource, amount in pod.request.items():
            if is_extended(resource) and amount:
                used[pod.node_name][resource] += amount
                counted = True
        if counted:
            on_node[pod.node_name].append(f"Pod {pod.namespace}/{pod.name}")
    for node in seen.snapshot.nodes:
        for resource, amount in sorted(used.get(node.name, {}).items()):
            has = node.allocatable.get(resource, 0)
            if amount > has:
                yield Violation(
                    Invariant.NODE_OVERCOMMITTED,
                    (f"Node {node.name}", *sorted(on_node[node.name])),
                    f"node {node.name}: bound pods request {format_milli(amount, resource)} "
                    f"{resource}, it has {format_milli(has, resource)}",
                )


def _overdrawn_quotas(seen: Translation, gangs: list[GangState]) -> Iterable[Violation]:
    queues = {(q.namespace, q.name): q.team_quota for q in seen.snapshot.queues}
    used: dict[str, Counter[str]] = defaultdict(Counter)
    holders: dict[str, list[str]] = defaultdict(list)
    for gang in gangs:
        team = queues.get((gang.view.namespace, gang.view.gang.facts.queue))
        if gang.holds and team is not None:
            used[team].update(gang.need)
            holders[team].append(gang.name)
    quotas = {q.name: q for q in seen.snapshot.quotas}
    for quota in quotas.values():
        for resource, limits in sorted(quota.resources.items()):
            amount = used[quota.name].get(resource, 0)
            cap = limits.nominal
            if quota.cohort and limits.borrowing_limit is not None:
                cap += limits.borrowing_limit
            elif quota.cohort:
                continue  # unlimited borrowing: the cohort's pool is what bounds it
            if amount > cap:
                holding = sorted(holders[quota.name])
                named = ", ".join(holding[:5])
                if len(holding) > 5:
                    named += f" and {len(holding) - 5} more"
                yield Violation(
                    Invariant.QUOTA_OVERDRAWN,
                    (f"TeamQuota {quota.name}",),
                    f"TeamQuota {quota.name}: {len(holding)} gangs running or released hold "
                    f"{format_milli(amount, resource)} {resource}, at most "
                    f"{format_milli(cap, resource)} allowed ({named})",
                )
    yield from _overdrawn_cohorts(quotas, seen.snapshot.cohorts, used)


def _overdrawn_cohorts(
    quotas: Mapping[str, TeamQuota], cohorts: Iterable[Cohort], used: Mapping[str, Counter[str]]
) -> Iterable[Violation]:
    """The core's tree rule (core/quota/tree.py), at every level: what a cohort's
    children use beyond what each keeps back is at most what its subtree holds (at a
    root) or what it may borrow on top (below one), so no lender's kept-back nominal
    is ever lent, and no cohort lends past its lending limit."""
    tree = QuotaTree(quotas.values(), cohorts, {name: dict(u) for name, u in used.items()})
    for name, node in sorted(tree.cohorts.items()):
        if not node.children:
            continue
        members = tuple(sorted(f"TeamQuota {leaf.name}" for leaf in tree.leaves(node)))
        for resource in sorted(node.usage):
            drawn = node.usage[resource]
            holds = node.subtree.get(resource, 0)
            limits = node.limits.get(resource)
            if node.parent is None and drawn > holds:
                yield Violation(
                    Invariant.LENDING_LIMIT_EXCEEDED,
                    members,
                    f"cohort {name}: its members draw {format_milli(drawn, resource)} "
                    f"{resource} beyond what each keeps back, but lend only "
                    f"{format_milli(holds, resource)}",
                )
            elif limits is not None and limits.borrowing_limit is not None:
                cap = holds + limits.borrowing_limit
                if drawn > cap:
                    yield Violation(
                        Invariant.QUOTA_OVERDRAWN,
                        (f"Cohort {name}", *members),
                        f"cohort {name}: its subtree draws {format_milli(drawn, resource)} "
                        f"{resource}, at most {format_milli(cap, resource)} allowed "
                        f"(its quota and borrowing limit)",
                    )


def _admitted_twice(gangs: list[GangState], pod_groups: Iterable[Obj]) -> Iterable[Violation]:
    owners: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for group in pod_groups:
        namespace = get(group, "metadata.namespace", str, "")
        name = get(group, "metadata.name", str, "")
        for ref in get(group, "metadata.ownerReferences", list, []):
            if isinstance(ref, dict) and ref.get("uid") and ref.get("kind") != "Pod":
                owners[(namespace, str(ref.get("kind")), str(ref["uid"]))].append(name)
    for (namespace, kind, _), names in sorted(owners.items()):
        if len(names) > 1:
            yield Violation(
                Invariant.ADMITTED_TWICE,
                tuple(sorted(f"PodGroup {namespace}/{n}" for n in names)),
                f"{len(names)} PodGroups for one {kind} in {namespace}: {', '.join(sorted(names))}",
            )
    for gang in gangs:
        size = gang.view.workload.pod_count
        if gang.view.workload.pod_sets and len(gang.live) > size:
            yield Violation(
                Invariant.ADMITTED_TWICE,
                (gang.name,),
                f"{gang.name}: {len(gang.live)} live members, but the gang runs {size}",
            )


def _timeout(gang: GangState, timing: Timing) -> int:
    facts = gang.view.gang.facts
    if facts.timeout_seconds is not None:
        return facts.timeout_seconds
    queue = gang.view.queue
    if queue is not None and queue.pods_ready_timeout_seconds is not None:
        return queue.pods_ready_timeout_seconds
    return timing.pods_ready_timeout_seconds


def _partially_placed(gangs: list[GangState], now: float, timing: Timing) -> Iterable[Violation]:
    for gang in gangs:
        if not gang.holds or gang.started is None:
            continue
        size = gang.view.workload.gang_size
        placed = sum(
            1
            for pod in gang.view.gang.members
            if pod.node_name and pod.phase in ("Running", "Succeeded") and not pod.deleting
        )
        if placed >= size:
            continue
        limit = gang.started + _timeout(gang, timing) + timing.cycle_seconds
        if now > limit:
            yield Violation(
                Invariant.PARTIALLY_PLACED_TOO_LONG,
                (gang.name,),
                f"{gang.name}: {placed} of {size} members placed "
                f"{now - gang.started:.0f}s after it started; its timeout is "
                f"{_timeout(gang, timing)}s",
                since=limit,
            )


def _evicted_still_holding(
    gangs: list[GangState], now: float, timing: Timing
) -> Iterable[Violation]:
    for gang in gangs:
        if gang.evicted_at is None:
            continue
        limit = gang.evicted_at + timing.cycle_seconds
        if now <= limit or not (gang.holds or gang.running):
            continue
        what = []
        if not gang.view.gang.facts.held and not gang.view.gang.facts.finished:
            what.append("it is released again (not held) without an admission")
        if gang.running:
            what.append(f"{len(gang.running)} members still run")
        elif gang.holds:
            what.append("members bound to nodes still hold its quota")
        yield Violation(
            Invariant.EVICTED_STILL_HOLDING,
            (gang.name, *sorted(f"Pod {p.ref.namespace}/{p.ref.name}" for p in gang.running)),
            f"{gang.name} was evicted {now - gang.evicted_at:.0f}s ago but " + " and ".join(what),
            since=limit,
        )


def _members_off_plan(gangs: list[GangState]) -> Iterable[Violation]:
    for gang in gangs:
        group = gang.view.group
        if group is None or group.phase not in HOLDING_PHASES or not group.status.placement:
            continue
        by_set = group.status.podSetPlacement
        bound: dict[str, Counter[str]] = defaultdict(Counter)
        for pod in gang.live:
            if pod.node_name:
                bound[pod.pod_set if by_set else ""][pod.node_name] += 1
        for pod_set, nodes in sorted(bound.items()):
            planned = by_set.get(pod_set, {}) if by_set else group.status.placement
            off = {n: c for n, c in nodes.items() if c > planned.get(n, 0)}
            if off:
                where = ", ".join(
                    f"{c} on {n} (planned {planned.get(n, 0)})" for n, c in off.items()
                )
                yield Violation(
                    Invariant.MEMBER_OFF_PLAN,
                    (gang.name,),
                    f"{gang.name}: members bound off its plan: {where}",
                )


def _members_off_slice(gangs: list[GangState]) -> Iterable[Violation]:
    """A sliced pod set's members with a completion index on their own slice's nodes.

    The domain itself is not checked apart: it is the planned nodes', which
    MemberOffPlan holds members to.
    """
    for gang in gangs:
        group = gang.view.group
        if group is None or group.phase not in HOLDING_PHASES:
            continue
        first = gang.view.workload.pod_sets[0].name if gang.view.workload.pod_sets else ""
        for pod_set, assignment in sorted(group.status.topologyAssignment.items()):
            slices = assignment.slices
            size = sum(slices[0].values()) if slices else 0
            if size <= 0:
                continue
            bound: Counter[tuple[int, str]] = Counter(
                (pod.index // size, pod.node_name)
                for pod in gang.live
                if pod.node_name
                and pod.index is not None
                and (pod.pod_set or first) == pod_set
                and pod.index // size < len(slices)
            )
            off = sorted(
                (j, node, count)
                for (j, node), count in bound.items()
                if count > slices[j].get(node, 0)
            )
            if off:
                where = ", ".join(
                    f"{count} of slice {j} on {node} (planned {slices[j].get(node, 0)})"
                    for j, node, count in off
                )
                yield Violation(
                    Invariant.MEMBER_OFF_SLICE,
                    (gang.name,),
                    f"{gang.name}: pod set {pod_set} members bound off their slice: {where}",
                )
