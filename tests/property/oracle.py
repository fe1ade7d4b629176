"""An independent, brute-force referee for one admission cycle.

It replays the cycle's decisions in order, recomputing node capacity and
quota from first principles (no code shared with the placers or the ledger
beyond the model and the pod-request rules), and fails on any decision that
breaks an invariant or any Pending that a correct engine would have admitted.
"""

from __future__ import annotations

from collections import defaultdict

from queue_controller.core import Decision, Ordering, Snapshot, Verdict, WorkloadPhase
from queue_controller.core.model.objects import Node, PodTemplate, TeamQuota, Workload
from queue_controller.core.placement.podscan import PodByPodPlacer
from queue_controller.core.placement.shapes import Shortfall, shape_of
from queue_controller.core.rules.nodes import exclusion, usable_allocatable
from queue_controller.core.rules.requests import pod_request

TERMINATED = {"Succeeded", "Failed"}


def _node_used(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    arrived: dict[tuple[str, str], int] = defaultdict(int)
    for pod in snapshot.pods:
        if pod.workload:
            arrived[(pod.workload, pod.node_name)] += 1
        if pod.phase not in TERMINATED:
            for r, a in pod.request.items():
                used[pod.node_name][r] += a
    for w in snapshot.workloads:
        if w.phase is WorkloadPhase.ADMITTED:
            request = pod_request(w.pod_sets[0].template)
            for node, planned in w.placement.items():
                for r, a in request.items():
                    used[node][r] += a * max(0, planned - arrived[(w.key, node)])
    return used


def _members_fitting(node: Node, free: dict[str, int], request: dict[str, int]) -> int:
    return min(max(0, free.get(r, 0)) // a for r, a in request.items() if a)


class Referee:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.nodes = {n.name: n for n in snapshot.nodes}
        used = _node_used(snapshot)
        self.free = {
            n.name: {r: a - used[n.name].get(r, 0) for r, a in usable_allocatable(n).items()}
            for n in snapshot.nodes
        }
        for name in self.free:
            for r, a in used[name].items():
                self.free[name].setdefault(r, -a)
        self.quotas = {q.name: q for q in snapshot.quotas}
        self.queues = {(q.namespace, q.name): q for q in snapshot.queues}
        self.workloads = {w.key: w for w in snapshot.workloads}
        self.usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for w in snapshot.workloads:
            queue = self.queues.get((w.namespace, w.queue))
            if w.phase is WorkloadPhase.ADMITTED and queue is not None:
                for r, a in pod_request(w.pod_sets[0].template).items():
                    self.usage[queue.team_quota][r] += a * w.pod_count

    # -- quota, from the definition ------------------------------------------

    def _within_nominal(self, quota: TeamQuota, need: dict[str, int]) -> bool:
        used = self.usage[quota.name]
        return bool(quota.cohort) and all(
            used.get(r, 0) + a <= quota.resources[r].nominal
            for r, a in need.items()
            if a > 0 and r in quota.resources
        )

    def quota_allows(self, quota: TeamQuota, extra: dict[str, int]) -> bool:
        after = dict(self.usage[quota.name])
        for r, a in extra.items():
            after[r] = after.get(r, 0) + a
        return self.quota_valid(quota.name, after)

    def quota_valid(self, name: str, usage_of_name: dict[str, int]) -> bool:
        quota = self.quotas[name]
        for r, limits in quota.resources.items():
            used = usage_of_name.get(r, 0)
            if not quota.cohort:
                if used > limits.nominal:
                    return False
                continue
            if (
                limits.borrowing_limit is not None
                and used > limits.nominal + limits.borrowing_limit
            ):
                return False
            # Everything borrowed in the cohort must be covered by what lenders may lend.
            borrowed = lendable = 0
            for member in self.quotas.values():
                if member.cohort != quota.cohort or r not in member.resources:
                    continue
                m_limits = member.resources[r]
                m_used = (
                    usage_of_name.get(r, 0)
                    if member.name == name
                    else self.usage[member.name].get(r, 0)
                )
                borrowed += max(0, m_used - m_limits.nominal)
                lend_cap = (
                    m_limits.nominal if m_limits.lending_limit is None else m_limits.lending_limit
                )
                lendable += min(lend_cap, max(0, m_limits.nominal - m_used))
            if borrowed > lendable:
                return False
        return True

    # -- nodes -----------------------------------------------------------------

    def capacity(self, template: PodTemplate, request: dict[str, int]) -> int:
        total = 0
        for name, node in self.nodes.items():
            if exclusion(node, template) is None:
                total += _members_fitting(node, self.free[name], request)
        return total

    def naive_explanation(self, workload: Workload, request: dict[str, int]) -> str:
        """What the per-pod placer, built on the replayed state, says about this gang."""
        used = {
            name: {
                r: usable_allocatable(node).get(r, 0) - left for r, left in self.free[name].items()
            }
            for name, node in self.nodes.items()
        }
        naive = PodByPodPlacer(list(self.nodes.values()), used)
        outcome = naive.try_place(
            shape_of(workload.pod_sets[0].template, request), workload.gang_size
        )
        assert isinstance(outcome, Shortfall)
        return outcome.explanation

    # -- replay ----------------------------------------------------------------

    def replay(self, decisions: tuple[Decision, ...]) -> None:
        blocked: dict[tuple[str, str], bool] = {}
        holding: set[str] = set()  # cohorts where a member's idle nominal is held
        for decision in decisions:
            workload = self.workloads[decision.key]
            queue = self.queues.get((workload.namespace, workload.queue))
            if decision.verdict is not Verdict.ADMIT:
                assert not decision.placement, decision
            if decision.verdict is Verdict.INVALID or queue is None:
                continue
            if decision.reason.value == "WaitingForHead":
                assert queue.ordering is Ordering.STRICT_FIFO
                assert blocked.get((queue.namespace, queue.name))
                continue
            if decision.reason.value in ("Backoff", "Deactivated", "TeamQuotaNotFound"):
                continue
            assert not blocked.get((queue.namespace, queue.name)), (
                f"{decision} passed a StrictFIFO head"
            )
            request = pod_request(workload.pod_sets[0].template)
            need = {r: a * workload.pod_count for r, a in request.items()}
            quota = self.quotas[queue.team_quota]
            quota_ok = self.quota_allows(quota, need)
            capacity = self.capacity(workload.pod_sets[0].template, request)
            if decision.verdict is Verdict.ADMIT:
                self._check_admission(decision, workload, request, quota_ok)
                for r, a in need.items():
                    self.usage[quota.name][r] += a
            elif decision.reason.value == "QuotaExceeded":
                if self._within_nominal(quota, need):
                    # The cohort lent its nominal out: what is idle of it is held for it
                    # for the rest of the cycle (Kueue's reserveCapacityForUnreclaimablePreempt).
                    holding.add(quota.cohort)
                if quota_ok:
                    # Room the oracle sees can only be room held for another member.
                    assert quota.cohort in holding, f"{decision} but the quota has room"
                    assert "held this cycle for a gang of" in decision.message, decision
            else:
                assert decision.reason.value == "NoNodeFit", decision
                assert quota_ok, f"{decision}: quota should have been reported first"
                assert capacity < workload.gang_size, f"{decision} but {capacity} members fit"
                assert decision.message.startswith(
                    f"{capacity} of {workload.gang_size} members fit"
                )
            if decision.verdict is not Verdict.ADMIT and queue.ordering is Ordering.STRICT_FIFO:
                blocked[(queue.namespace, queue.name)] = True

    def _check_admission(
        self, decision: Decision, workload: Workload, request: dict[str, int], quota_ok: bool
    ) -> None:
        assert quota_ok, f"{decision} exceeds its quota"
        assert sum(decision.placement.values()) == workload.gang_size, "gang not fully placed"
        for name, members in decision.placement.items():
            node = self.nodes[name]
            assert members > 0
            assert exclusion(node, workload.pod_sets[0].template) is None, f"{name} is not eligible"
            free = self.free[name]
            for r, a in request.items():
                free[r] = free.get(r, 0) - a * members
                assert free[r] >= 0, f"{name} over-committed on {r}"
