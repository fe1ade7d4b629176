"""What a cycle reads of each workload before deciding anything.

Each workload is prepared once per cycle: its priority, the request of one pod
of each pod set, or why it is invalid.  The capacity that admitted gangs hold
on nodes (bound pods, and planned members not bound yet) is worked out here
too, from the same preparations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from queue_controller.core.devices.dims import is_device_dimension
from queue_controller.core.model.objects import BoundPod, Workload
from queue_controller.core.rules.ordering import PriorityTable
from queue_controller.core.rules.requests import pod_request
from queue_controller.errors import InvalidSpecError

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class Prepared:
    workload: Workload
    priority: int
    requests: tuple[Mapping[str, int], ...]  # per pod of each pod set; empty when invalid
    error: str  # why it is invalid; empty when valid
    # DRA (see devicecycle): what its claims' devices charge the quota, and, per pod
    # set, what to call each device dimension of its request in a message.
    device_quota: Mapping[str, int] = field(default_factory=dict)
    labels: tuple[Mapping[str, str], ...] = ()
    # need(), worked out once: a cycle asks for it at every step that charges a quota.
    _need: dict[str, int] | None = field(default=None, init=False, compare=False, repr=False)

    def need(self) -> Mapping[str, int]:
        """What the whole gang charges its quota: every pod of every pod set.

        Device dimensions are the placer's; the quota is charged for devices by
        their DeviceClass's quota resource instead.
        """
        need = self._need
        if need is None:
            # Every pending gang asks for this at every cycle, and nearly all have one
            # pod set and no claims: their need is one comprehension.
            pod_sets = self.workload.pod_sets
            if len(pod_sets) == len(self.requests) == 1 and not self.device_quota:
                count = pod_sets[0].count
                need = {
                    r: amount * count
                    for r, amount in self.requests[0].items()
                    if not is_device_dimension(r)
                }
            else:
                total: Counter[str] = Counter(self.device_quota)
                for pod_set, request in zip(pod_sets, self.requests, strict=True):
                    for resource, amount in request.items():
                        if not is_device_dimension(resource):
                            total[resource] += amount * pod_set.count
                need = dict(total)
            object.__setattr__(self, "_need", need)
        return need


def prepare(workload: Workload, priorities: PriorityTable) -> Prepared:
    def invalid(priority: int, message: str) -> Prepared:
        return Prepared(workload, priority, (), message)

    if not workload.pod_sets:
        if workload.absent_members and not workload.spec_error:
            return Prepared(workload, 0, (), "")  # none of its members exists yet
        return invalid(0, workload.spec_error or f"the {workload.kind} has no pods to run")
    # Priority first, so an invalid gang is still listed where it would have queued.
    first = workload.pod_sets[0]
    try:
        priority = priorities.value_of(first.template)
    except InvalidSpecError as error:
        return invalid(0, f"{_located(first.path, error.field)}: {error.detail}")
    requests = []
    for pod_set in workload.pod_sets:
        try:
            requests.append(pod_request(pod_set.template))
        except InvalidSpecError as error:
            return invalid(priority, f"{_located(pod_set.path, error.field)}: {error.detail}")
    if workload.spec_error:
        return invalid(priority, workload.spec_error)
    for pod_set in workload.pod_sets:
        if pod_set.min_count > pod_set.count and not workload.absent_members:
            of_set = f" in pod set {pod_set.name}" if len(workload.pod_sets) > 1 else ""
            return invalid(
                priority,
                f"the gang needs {pod_set.min_count} members{of_set} but the {workload.kind} "
                f"runs only {pod_set.count} pods at once",
            )
    return Prepared(workload, priority, tuple(requests), "")


def _located(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


def _planned(workload: Workload) -> Mapping[str, Mapping[str, int]]:
    """Pod set -> node -> planned members; a one-set plan may be given as a total."""
    if workload.pod_set_placement:
        return workload.pod_set_placement
    if workload.placement and workload.pod_sets:
        return {workload.pod_sets[0].name: workload.placement}
    return {}


# Node -> resource -> amount.
Usage = dict[str, dict[str, int]]


def node_usage(
    pods: Iterable[BoundPod], admitted: Iterable[Prepared]
) -> tuple[Usage, dict[str, Usage]]:
    """What each node has given away, in all and by admitted workload (by key).

    That is its bound, non-terminated pods, plus the members of admitted gangs
    that were planned onto it but are not bound yet: between admission and
    binding, the plan itself holds the capacity.  What each workload holds is
    what preempting it would give back.
    """
    used: Usage = {}
    held: dict[str, Usage] = {}

    def charge(into: Usage, node: str, request: Mapping[str, int], times: int) -> None:
        # Plain dict arithmetic: this runs for every pod at every cycle.
        node_used = into.get(node)
        if node_used is None:
            into[node] = {r: amount * times for r, amount in request.items()}
            return
        for resource, amount in request.items():
            node_used[resource] = node_used.get(resource, 0) + amount * times

    arrived: Counter[tuple[str, str, str]] = Counter()
    for pod in pods:
        if pod.workload:
            arrived[(pod.workload, pod.pod_set, pod.node_name)] += 1
        if pod.phase in TERMINATED_PHASES or not pod.node_name:
            continue
        charge(used, pod.node_name, pod.request, 1)
        if pod.workload:
            charge(held.setdefault(pod.workload, {}), pod.node_name, pod.request, 1)
    for prepared in admitted:
        workload = prepared.workload
        if not prepared.requests:
            continue
        plan = _planned(workload)
        first = workload.pod_sets[0].name
        for pod_set, request in zip(workload.pod_sets, prepared.requests, strict=True):
            for node, planned in plan.get(pod_set.name, {}).items():
                here = arrived[(workload.key, pod_set.name, node)]
                if pod_set.name == first:  # a pod that names no pod set is of the first
                    here += arrived[(workload.key, "", node)]
                waiting = planned - here
                if waiting > 0:
                    charge(used, node, request, waiting)
                    charge(held.setdefault(workload.key, {}), node, request, waiting)
    return used, held
