"""What topology did to the gangs that asked for it: two figures of the report.

- **In the preferred domain**: of the gangs that asked for a Preferred level, the
  fraction that ran inside one domain of that level.  Read off where the gang's
  members actually bound, when the last one did, from the nodes' labels: the
  same for every policy (quota-only and per-pod place pod by pod, and the core's
  Decision.domains only exists where the core places), and exact whatever the
  decision said.  A gang that ran several times counts each time.
- **GPU-hours waiting for a domain**: for gangs that asked for a topology, the
  gang's GPUs times the time the core held them back because of topology alone.
  The core says so exactly: its NoNodeFit message reads "... at most N in any one
  <level>" only when the gang's members fit in the Topology's nodes as they are,
  ignoring domains (core/placement/topology/domains.py, ``_short_in_one``), and no one domain holds
  them.  A wait starts at the cycle that first says so and ends at the first
  decision that says anything else (a gang not decided in a cycle keeps its last
  answer: nothing it waits for changed).  Measured where the core places
  (gang-fit); quota-only's placer never refuses, and per-pod has no admission.
- **Fragmentation**, sampled with stranded capacity (every 5 minutes) over the
  nodes inside a Topology that is used: the share of their free GPUs that lie on
  nodes partly in use (a gang needing whole nodes cannot have them), and the
  share of the narrowest domains (racks) with free GPUs that are *broken*, partly
  in use (a gang needing a whole rack cannot have it).  Averaged over samples;
  what best fit and balanced placement (``--topology-placement``) trade.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from queue_controller.core import Decision, Queue, Verdict
from queue_controller.core.model import ONE, TopologyMode, TopologyRequest
from queue_controller.core.rules import HOSTNAME
from queue_controller.sim.scenario.gpus import gpu_resources, unit_value
from queue_controller.sim.scenario.spec import Scenario
from queue_controller.sim.world.runstate import JobState

HOUR = 3600.0
NO_NODE_FIT = "NoNodeFit"
# The core's words when only topology holds a gang back (core/placement/topology/domains.py).
TOPOLOGY_BINDS = " in any one "


class DomainMeter:
    def __init__(
        self, scenario: Scenario, queues: Sequence[Queue], *, waits_measured: bool
    ) -> None:
        nodes = scenario.nodes
        by_name = {t.name: t for t in scenario.topologies}
        self.levels: dict[tuple[str, str], tuple[str, ...]] = {
            (q.namespace, q.name): by_name[q.topology_name].levels
            for q in queues
            if q.topology_name in by_name
        }
        self.labels = {node.name: node.labels for node in nodes}
        self.nodes = nodes
        self.waits_measured = waits_measured
        self.preferred = 0  # placements of gangs that asked for a Preferred level
        self.in_domain = 0  # of them, inside one domain of that level
        self.wait_gpu_seconds = 0.0
        self._waiting_since: dict[str, float] = {}
        self._gpus: dict[tuple[object, ...], float] = {}
        # Node -> its narrowest domain, for the nodes inside a Topology some Queue uses.
        self.rack_of: dict[str, tuple[str | None, ...]] = {}
        for levels in set(self.levels.values()):
            domain_levels = [key for key in levels if key != HOSTNAME]
            for node in nodes:
                if domain_levels and all(key in node.labels for key in domain_levels):
                    self.rack_of[node.name] = tuple(node.labels.get(k) for k in domain_levels)
        self.samples = 0
        self._free_on_used = 0.0
        self._broken = 0.0

    @property
    def active(self) -> bool:
        return bool(self.levels)

    # -- waiting for a domain ---------------------------------------------------

    def decided(self, job: JobState, decision: Decision, now: float) -> None:
        if job.spec.topology is None or not self.waits_measured:
            return
        binds = (
            decision.verdict is Verdict.PENDING
            and decision.reason.value == NO_NODE_FIT
            and TOPOLOGY_BINDS in decision.message
        )
        if binds:
            self._waiting_since.setdefault(job.key, now)
        else:
            self.stopped(job, now)

    def stopped(self, job: JobState, now: float) -> None:
        """``job`` no longer waits for a domain (decided otherwise, or the run ends)."""
        since = self._waiting_since.pop(job.key, None)
        if since is not None:
            self.wait_gpu_seconds += (now - since) * self._gang_gpus(job)

    def finish(self, jobs: Sequence[JobState], now: float) -> None:
        for job in jobs:
            self.stopped(job, now)

    def _gang_gpus(self, job: JobState) -> float:
        """GPU-equivalents of the whole gang, valued on a node that offers them
        (a time-sliced replica is worth less than a whole GPU)."""
        gpus = self._gpus.get(job.shape)
        if gpus is None:
            gpus = 0.0
            for resource in gpu_resources(job.request):
                node = next((n for n in self.nodes if n.allocatable.get(resource)), None)
                if node is not None:
                    gpus += unit_value(node, resource) * job.request[resource] / ONE
            gpus = self._gpus[job.shape] = gpus * job.pods
        return gpus

    # -- where gangs ran --------------------------------------------------------

    def placed(self, job: JobState, bound: Mapping[str, int]) -> None:
        """Every member of ``job`` is bound (node -> members)."""
        request = job.spec.topology
        if request is None or request.mode is not TopologyMode.PREFERRED:
            return
        levels = self.levels.get((job.spec.namespace, job.spec.queue))
        if levels is None:
            return
        self.preferred += 1
        self.in_domain += in_one_domain(
            request, levels, [n for n, c in bound.items() if c], self.labels
        )

    # -- fragmentation ------------------------------------------------------------

    def sample(self, free_and_total: Callable[[str], tuple[float, float] | None]) -> None:
        """One look at the Topology's nodes: node -> (free GPUs, GPUs), None when down."""
        free_all = free_partly = 0.0
        racks: dict[tuple[str | None, ...], tuple[bool, bool]] = {}  # (some free, some used)
        for node, rack in self.rack_of.items():
            seen = free_and_total(node)
            if seen is None or seen[1] <= 0:
                continue
            free, total = seen
            used = total - free > 1e-9
            free_all += free
            if used:
                free_partly += free
            some_free, some_used = racks.get(rack, (False, False))
            racks[rack] = (some_free or free > 1e-9, some_used or used)
        with_free = [used for some_free, used in racks.values() if some_free]
        if free_all <= 1e-9 or not with_free:
            return  # nothing free: nothing to fragment
        self.samples += 1
        self._free_on_used += free_partly / free_all
        self._broken += sum(with_free) / len(with_free)

    def fragmentation(self) -> tuple[float | None, float | None]:
        """(free GPUs on partly used nodes, broken racks), each a mean share; None: unseen."""
        if not self.samples:
            return None, None
        return self._free_on_used / self.samples, self._broken / self.samples

    def preferred_fraction(self) -> float | None:
        return self.in_domain / self.preferred if self.preferred else None

    def wait_gpu_hours(self) -> float | None:
        if not self.active or not self.waits_measured:
            return None
        return self.wait_gpu_seconds / HOUR


def in_one_domain(
    request: TopologyRequest,
    levels: Sequence[str],
    nodes: Sequence[str],
    labels: Mapping[str, Mapping[str, str]],
) -> bool:
    """Whether ``nodes`` lie in one domain of the request's level: they agree on
    every level from the broadest down to it (a rack is named within its block)."""
    if request.level == HOSTNAME:
        return len(nodes) == 1
    if request.level not in levels:
        return False
    upto = levels[: levels.index(request.level) + 1]
    paths = {tuple(labels[n].get(key) for key in upto) for n in nodes}
    return len(paths) == 1 and None not in next(iter(paths))
