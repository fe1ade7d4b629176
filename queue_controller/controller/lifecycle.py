"""The gang lifecycle: from what the cluster shows, and what the core decided, to actions.

A queued Job moves through its PodGroup's phases:

    Pending --admit--> Admitted --minMember running--> Running --Job done--> Finished
       ^                  |  (timeout)                   |  (members lost past timeout)
       |                  v                              v
       +---requeued--- Evicted <-------------------------+
                          |
                          +--past backoffLimit--> Failed

Every decision is re-derived from the objects each cycle, and what is stored
in the API (PodGroup status, Job spec) is the only memory, so a restarted
controller picks up exactly where the last one stopped.  This module reads
and decides; it writes nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from queue_controller.controller import actions as act
from queue_controller.controller import gpuwatch
from queue_controller.controller.state import ClusterState
from queue_controller.controller.status import iso
from queue_controller.core.cycle import CycleResult
from queue_controller.core.decisions import Decision, Verdict
from queue_controller.core.model import GpuHealth, Queue, RequeuePolicy
from queue_controller.core.quantity import format_milli, parse_milli
from queue_controller.core.requeue import pods_ready_timeout, requeue
from queue_controller.errors import InputError
from queue_controller.kube import jobs, objects
from queue_controller.kube.fields import timestamp

Obj = dict[str, Any]
GATE = "queue-controller.io/admission"
HOSTNAME = "kubernetes.io/hostname"
POD_GROUP_API = "queue-controller.io/v1alpha1"
TIMEOUT_ANNOTATION = "queue-controller.io/pods-ready-timeout-seconds"
TERMINATED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class Gang:
    job: Obj
    group: Obj | None
    pods: tuple[Obj, ...]
    queue: Queue | None

    @property
    def key(self) -> str:
        meta = self.job["metadata"]
        return f"{meta.get('namespace', 'default')}/{meta['name']}"

    @property
    def queue_name(self) -> str:
        return jobs.queue_name(self.job)

    @property
    def queue_key(self) -> str:
        return f"{self.job['metadata'].get('namespace', 'default')}/{self.queue_name}"

    @property
    def phase(self) -> str | None:
        return None if self.group is None else _status(self.group).get("phase", "Pending")

    @property
    def suspended(self) -> bool:
        return bool(self.job.get("spec", {}).get("suspend"))

    @property
    def live_pods(self) -> tuple[Obj, ...]:
        return tuple(p for p in self.pods if _live(p))


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    status: Mapping[str, Any] = obj.get("status") or {}
    return status


def _live(pod: Mapping[str, Any]) -> bool:
    return _status(pod).get("phase") not in TERMINATED and not (pod.get("metadata") or {}).get(
        "deletionTimestamp"
    )


def pod_node(pod: Mapping[str, Any]) -> str | None:
    spec = pod.get("spec") or {}
    return spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME)


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates", []))


def finished(job: Mapping[str, Any]) -> tuple[bool, bool]:
    """(finished, succeeded) from the Job's conditions."""
    for condition in _status(job).get("conditions", []):
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "Failed"):
            return True, condition["type"] == "Complete"
    return False, False


def condition(group: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in _status(group).get("conditions", []) if c.get("type") == kind), None)


def gangs(state: ClusterState) -> list[Gang]:
    """Every queued Job with its PodGroup, pods and Queue."""
    pods: dict[tuple[str, str], list[Obj]] = defaultdict(list)
    for pod in state.of_kind("Pod"):
        owner = objects.owning_job(pod)
        if owner:
            namespace, name = owner.split("/", 1)
            pods[(namespace, name)].append(pod)
    groups: dict[tuple[str, str], list[Obj]] = defaultdict(list)
    for each in state.of_kind("PodGroup"):
        groups[(each["metadata"].get("namespace", ""), each["metadata"]["name"])].append(each)
    out = []
    for job in state.of_kind("Job"):
        queue_name = jobs.queue_name(job)
        if not queue_name:
            continue
        meta = job["metadata"]
        namespace = meta.get("namespace", "default")
        candidates = groups.get((namespace, meta["name"]), [])
        group: Obj | None = next((g for g in candidates if _owned_by(g, job)), None)
        queue_obj = state.get("Queue", namespace, queue_name)
        try:
            queue = objects.queue(queue_obj) if queue_obj is not None else None
        except InputError:
            queue = None
        out.append(Gang(job, group, tuple(pods.get((namespace, meta["name"]), [])), queue))
    return sorted(out, key=lambda g: g.key)


def _owned_by(group: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    uid = job["metadata"].get("uid")
    refs = group["metadata"].get("ownerReferences") or []
    return any(r.get("kind") == "Job" and r.get("uid") == uid for r in refs) or (
        not refs and group["metadata"]["name"] == job["metadata"]["name"]
    )


def pod_group_for(job: Mapping[str, Any]) -> Obj:
    """A new PodGroup for a queued Job: owned by it, so it goes when the Job goes."""
    meta = job["metadata"]
    annotations = meta.get("annotations") or {}
    spec: Obj = {"queue": jobs.queue_name(job), "minMember": jobs.gang_size(job, jobs.BatchJob())}
    timeout = annotations.get(TIMEOUT_ANNOTATION)
    if isinstance(timeout, str) and timeout.isdigit():
        spec["timeoutSeconds"] = int(timeout)
    return {
        "apiVersion": POD_GROUP_API,
        "kind": "PodGroup",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace", "default"),
            "labels": {jobs.QUEUE_LABEL: jobs.queue_name(job)},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta.get("uid"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


@dataclass(frozen=True)
class Signals:
    """What the cycle knows about admitted gangs' GPUs besides the objects' own state."""

    health: Mapping[str, tuple[GpuHealth, float]] = field(default_factory=dict)
    idle: Mapping[str, float] = field(default_factory=dict)  # gang key -> idle since


@dataclass(frozen=True)
class Planner:
    default_timeout_seconds: int

    def plan(
        self,
        state: ClusterState,
        result: CycleResult,
        *,
        now: float,
        idle: Mapping[str, float] | None = None,
        health: Mapping[str, tuple[GpuHealth, float]] | None = None,
        all_gangs: list[Gang] | None = None,
    ) -> list[act.Action]:
        """``health`` and ``all_gangs`` are derived from ``state`` unless the caller has them."""
        decisions = {d.workload: d for d in result.decisions}
        all_gangs = gangs(state) if all_gangs is None else all_gangs
        if health is None:
            health = gpuwatch.node_health(state.of_kind("Node"))
        signals = Signals(health, idle or {})
        out: list[act.Action] = []
        for gang in all_gangs:
            out.extend(self._gang(gang, decisions.get(gang.key), now, signals))
        out.extend(_statuses(state, all_gangs, result))
        return out

    def _gang(
        self, gang: Gang, decision: Decision | None, now: float, signals: Signals = Signals()
    ) -> list[act.Action]:
        done, succeeded = finished(gang.job)
        if done:
            if gang.group is not None and gang.phase != "Finished":
                return [act.MarkFinished(gang.job, gang.group, gang.queue_key, succeeded)]
            return []
        out: list[act.Action] = []
        if gang.group is None:
            out.append(act.CreatePodGroup(gang.job, pod_group_for(gang.job)))
        if gang.phase in ("Admitted", "Running"):
            flagged = self._gpu_signals(gang, now, signals)
            if flagged and isinstance(flagged[0], act.Evict):
                return out + flagged
            return out + flagged + self._admitted(gang, now)
        if gang.phase in ("Evicted", "Failed"):
            assert gang.group is not None
            live = gang.live_pods
            if gang.suspended and not live and gang.phase == "Failed":
                return out
            requeued = gang.phase == "Evicted" and gang.suspended and not live
            return [*out, act.FinishEviction(gang.job, gang.group, live, requeued)]
        if not gang.suspended:
            return [*out, act.SuspendUnadmitted(gang.job, gang.live_pods)]
        if decision is None:
            return out
        if decision.verdict is Verdict.ADMIT:
            created = timestamp(gang.job, "metadata.creationTimestamp") or now
            name = gang.job["metadata"]["name"]
            out.append(
                act.Admit(
                    gang.job, name, gang.queue_key, decision.placement, decision.message, created
                )
            )
        elif _pending_changed(gang.group, decision):
            group = gang.group or pod_group_for(gang.job)
            out.append(
                act.MarkPending(
                    gang.job,
                    group,
                    gang.queue_key,
                    decision.verdict.value,
                    decision.reason.value,
                    decision.message,
                )
            )
        return out

    def _admitted(self, gang: Gang, now: float) -> list[act.Action]:
        group = gang.group
        assert group is not None
        status = _status(group)
        live = gang.live_pods
        if gang.suspended:
            if gang.phase == "Admitted" and not live:
                return [act.ResumeAdmission(gang.job)]
            return [self._evict(gang, now, "JobSuspended", "the Job was suspended by someone else")]
        out: list[act.Action] = list(_bindings(gang, status.get("placement") or {}))
        min_member = int(group.get("spec", {}).get("minMember", 0))
        phases = Counter(
            _status(p).get("phase") for p in gang.pods if not p["metadata"].get("deletionTimestamp")
        )
        running, done = phases["Running"], phases["Succeeded"]
        ready = running + done >= min_member
        timeout = pods_ready_timeout(
            pod_group_seconds=group.get("spec", {}).get("timeoutSeconds"),
            queue_seconds=gang.queue.pods_ready_timeout_seconds if gang.queue else None,
            default_seconds=self.default_timeout_seconds,
        )
        if gang.phase == "Admitted":
            if ready:
                out.append(act.MarkRunning(gang.job, group, running))
            else:
                admitted_at = timestamp(group, "status.admittedAt") or now
                if now >= admitted_at + timeout:
                    message = (
                        f"{running + done} of {min_member} members running "
                        f"{timeout}s after admission"
                    )
                    out.append(self._evict(gang, now, "PodsReadyTimeout", message, admitted_at))
            return out
        ready_condition = condition(group, "PodsReady")
        lost = ready_condition is not None and ready_condition.get("reason") == "MembersLost"
        if ready:
            if lost:
                out.append(act.MarkRunning(gang.job, group, running))  # recovered
            return out
        if not lost:
            return [*out, act.MarkMembersLost(gang.job, group, running)]
        assert ready_condition is not None
        since = timestamp(ready_condition, "lastTransitionTime") or now
        if now >= since + timeout:
            message = f"only {running + done} of {min_member} members running for {timeout}s"
            out.append(self._evict(gang, now, "MembersLost", message, since))
        return out

    def _gpu_signals(self, gang: Gang, now: float, signals: Signals) -> list[act.Action]:
        """GPUUnhealthy and Idle: evict (the Queue's choice) or set and clear the conditions."""
        assert gang.group is not None
        queue = gang.queue or Queue("", "", "")
        out: list[act.Action] = []
        hit = gpuwatch.hits(gang.live_pods, signals.health) if signals.health else []
        if hit:
            message = hit[0].describe() + (f" (and {len(hit) - 1} more)" if len(hit) > 1 else "")
            if queue.evict_on_gpu_unhealthy:
                return [self._evict(gang, now, "GPUUnhealthy", message)]
            if not _condition_is(gang.group, "GPUUnhealthy", "True"):
                out.append(_flag(gang, "GPUUnhealthy", True, "GPUUnhealthy", message, True))
        elif _condition_is(gang.group, "GPUUnhealthy", "True"):
            out.append(_flag(gang, "GPUUnhealthy", False, "GPUsHealthy", "its GPUs are healthy"))
        since = signals.idle.get(gang.key)
        if since is not None and gang.phase == "Running":
            message = f"its GPUs have been idle since {iso(since)}"
            if queue.evict_idle:
                return [self._evict(gang, now, "Idle", message)]
            if not _condition_is(gang.group, "Idle", "True"):
                out.append(_flag(gang, "Idle", True, "GPUIdle", message, True))
        elif since is None and _condition_is(gang.group, "Idle", "True"):
            out.append(_flag(gang, "Idle", False, "GPUActive", "its GPUs are active again"))
        return out

    def _evict(
        self, gang: Gang, now: float, reason: str, message: str, since: float | None = None
    ) -> act.Evict:
        assert gang.group is not None
        policy = gang.queue.requeue if gang.queue else RequeuePolicy()
        previous = int(_status(gang.group).get("requeueCount", 0))
        return act.Evict(
            gang.job,
            gang.group,
            gang.live_pods,
            gang.queue_key,
            reason,
            message,
            requeue(policy, previous=previous, now=now),
            since,
        )


def _condition_is(group: Mapping[str, Any], kind: str, status: str) -> bool:
    found = condition(group, kind)
    return found is not None and found.get("status") == status


def _flag(
    gang: Gang, kind: str, status: bool, reason: str, message: str, warning: bool = False
) -> act.SetCondition:
    assert gang.group is not None
    return act.SetCondition(gang.job, gang.group, kind, status, reason, message, warning)


def _bindings(gang: Gang, placement: Mapping[str, int]) -> Iterable[act.BindMember]:
    """Each gated member gets a node of the plan that still has a slot for it."""
    assigned = Counter(
        node for p in gang.live_pods if not gated(p) and (node := pod_node(p)) is not None
    )
    slots = {node: count - assigned[node] for node, count in sorted(placement.items())}
    for pod in sorted((p for p in gang.live_pods if gated(p)), key=lambda p: p["metadata"]["name"]):
        node = next((n for n, free in slots.items() if free > 0), None)
        if node is not None:
            slots[node] -= 1
        yield act.BindMember(pod, node)


def _pending_changed(group: Mapping[str, Any] | None, decision: Decision) -> bool:
    if group is None:
        return True
    status = _status(group)
    return (status.get("reason"), status.get("message"), status.get("phase", "Pending")) != (
        decision.reason.value,
        decision.message,
        "Pending",
    )


def _statuses(state: ClusterState, all_gangs: list[Gang], result: CycleResult) -> list[act.Action]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for gang in all_gangs:
        if finished(gang.job)[0]:
            continue
        phase = gang.phase or "Pending"
        bucket = {"Admitted": "admittedGangs", "Running": "runningGangs"}.get(phase, "pendingGangs")
        counts[gang.queue_key][bucket] += 1
    out: list[act.Action] = []
    team_counts: dict[str, Counter[str]] = defaultdict(Counter)
    for queue in state.of_kind("Queue"):
        key = f"{queue['metadata'].get('namespace', '')}/{queue['metadata']['name']}"
        wanted = {k: counts[key][k] for k in ("pendingGangs", "admittedGangs", "runningGangs")}
        team = (queue.get("spec") or {}).get("teamQuota", "")
        team_counts[team]["pendingGangs"] += wanted["pendingGangs"]
        team_counts[team]["admittedGangs"] += wanted["admittedGangs"] + wanted["runningGangs"]
        if any(_status(queue).get(k) != v for k, v in wanted.items()):
            out.append(act.QueueStatus(queue, wanted))
    for quota in state.of_kind("TeamQuota"):
        name = quota["metadata"]["name"]
        used_milli = result.quota_usage.get(name, {})
        used, borrowed = _quota_figures(quota, used_milli)
        wanted_counts = {k: team_counts[name][k] for k in ("pendingGangs", "admittedGangs")}
        current = _status(quota)
        if (
            current.get("used", {}) != used
            or current.get("borrowed", {}) != borrowed
            or any(current.get(k) != v for k, v in wanted_counts.items())
        ):
            out.append(act.TeamQuotaStatus(quota, used, borrowed, wanted_counts))
    return out


def _quota_figures(
    quota: Mapping[str, Any], used_milli: Mapping[str, int]
) -> tuple[dict[str, str], dict[str, str]]:
    used: dict[str, str] = {}
    borrowed: dict[str, str] = {}
    for resource, limits in ((quota.get("spec") or {}).get("resources") or {}).items():
        amount = used_milli.get(resource, 0)
        used[resource] = format_milli(amount, resource)
        over = amount - parse_milli(limits.get("nominal", 0))
        if over > 0:
            borrowed[resource] = format_milli(over, resource)
    return used, borrowed
