"""A pod set's topology request, checked against its Queue's Topology.

A request names levels by node label, as Kueue's TAS annotations do.  It is
resolved here, once per cycle, into level *depths* the placer works with:
the Topology's levels other than the hostname are *domain levels* (depth 0 is
the broadest), and a hostname level, always the last, is the node itself
(depth ``len(levels)``).  Whatever cannot be resolved is a refusal that names
where the request was written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from queue_controller.core.model.objects import (
    PodSet,
    Queue,
    Topology,
    TopologyMode,
    TopologyPlacement,
    TopologyRequest,
)

HOSTNAME = "kubernetes.io/hostname"
UNCONSTRAINED = -1  # the depth of "anywhere in the topology": the root, above depth 0


@dataclass(frozen=True, slots=True)
class TopologyAsk:
    """A resolved request: what the placer keeps a pod set inside of."""

    topology: str
    levels: tuple[str, ...]  # the domain levels' node labels, broadest first
    has_hostname: bool  # whether the Topology's last level is the node
    mode: TopologyMode
    depth: int  # the requested level; UNCONSTRAINED, a domain depth, or len(levels): a node
    slice_size: int = 0
    slice_depth: int = UNCONSTRAINED
    # The Topology's spec.placement is Balanced: a preferred gang that is split is split
    # evenly (core/placement/topology/balanced.py); otherwise best fit.
    balanced: bool = False
    # Layered slices: the layers inside the slices above (slice_size at slice_depth, the
    # outermost), outermost first, as (depth, size); each size divides the one above.
    inner_slices: tuple[tuple[int, int], ...] = ()

    @property
    def node_depth(self) -> int:
        return len(self.levels)

    @property
    def layers(self) -> tuple[tuple[int, int], ...]:
        """Every slice layer, outermost first, as (depth, size); () without slices."""
        if not self.slice_size:
            return ()
        return ((self.slice_depth, self.slice_size), *self.inner_slices)

    @property
    def cut_size(self) -> int:
        """The innermost slices' size: what the placement's recorded slices hold."""
        return self.inner_slices[-1][1] if self.inner_slices else self.slice_size

    @property
    def cut_depth(self) -> int:
        return self.inner_slices[-1][0] if self.inner_slices else self.slice_depth

    def level_name(self, depth: int) -> str:
        """A level as people say it: the label's last word ("rack", "gpu.clique")."""
        label = HOSTNAME if depth >= len(self.levels) else self.levels[depth]
        return label.rsplit("/", 1)[-1]

    def level_label(self, depth: int) -> str:
        return HOSTNAME if depth >= len(self.levels) else self.levels[depth]


@dataclass(frozen=True, slots=True)
class Refusal:
    missing_topology: bool  # True: the Queue's Topology does not exist (yet); else invalid
    message: str


def resolve(
    request: TopologyRequest,
    *,
    pod_set: PodSet,
    queue: Queue,
    topologies: Mapping[str, Topology],
    several_sets: bool,
) -> TopologyAsk | Refusal:
    where = request.field or "topology request"
    of_set = f" (pod set {pod_set.name})" if several_sets else ""
    if not queue.topology_name:
        return Refusal(
            False,
            f"{where}{of_set}: asks for a topology, but Queue {queue.namespace}/{queue.name} "
            "names no Topology (spec.topologyName)",
        )
    topology = topologies.get(queue.topology_name)
    if topology is None:
        return Refusal(
            True,
            f"Queue {queue.namespace}/{queue.name} uses Topology {queue.topology_name!r}, "
            "which does not exist",
        )
    has_hostname = bool(topology.levels) and topology.levels[-1] == HOSTNAME
    levels = topology.levels[:-1] if has_hostname else topology.levels
    known = ", ".join(topology.levels)

    def depth_of(label: str) -> int | None:
        if label == HOSTNAME and has_hostname:
            return len(levels)
        return levels.index(label) if label in levels else None

    depth = UNCONSTRAINED
    if request.mode is not TopologyMode.UNCONSTRAINED:
        found = depth_of(request.level)
        if found is None:
            return Refusal(
                False,
                f"{where}{of_set}: {request.level!r} is not a level of Topology "
                f"{topology.name} (its levels: {known})",
            )
        depth = found
    balanced = topology.placement is TopologyPlacement.BALANCED
    ask = TopologyAsk(topology.name, levels, has_hostname, request.mode, depth, balanced=balanced)
    if not request.slice_size:
        return ask
    slice_depth = depth_of(request.slice_level)
    slice_where = f"{request.slices_field}[0].topology" if request.slices_field else where
    if slice_depth is None:
        return Refusal(
            False,
            f"{slice_where}{of_set}: slice level {request.slice_level!r} is not a level of "
            f"Topology {topology.name} (its levels: {known})",
        )
    if slice_depth < depth:
        return Refusal(
            False,
            f"{slice_where}{of_set}: slice level {request.slice_level!r} is broader than the pod "
            f"set's level {request.level!r}; a slice must fit inside the gang's domain",
        )
    k = request.slice_size
    if pod_set.min_count % k or pod_set.count % k:
        return Refusal(
            False,
            f"{request.slices_field or where}{of_set}: slice size {k} does not divide the "
            f"pod set's {pod_set.min_count} members",
        )
    inner = _inner_layers(request, slice_depth, depth_of, topology)
    if isinstance(inner, Refusal):
        return inner
    return TopologyAsk(
        topology.name, levels, has_hostname, request.mode, depth, k, slice_depth, balanced, inner
    )


def _inner_layers(
    request: TopologyRequest,
    outer: int,
    depth_of: Callable[[str], int | None],
    topology: Topology,
) -> tuple[tuple[int, int], ...] | Refusal:
    """Layered slices' inner layers as depths, each strictly narrower than the one above
    (Kueue checks the order when it schedules, against the flavor's Topology, as here)."""
    where = request.slices_field
    out: list[tuple[int, int]] = []
    above, above_level = outer, request.slice_level
    for i, (level, size) in enumerate(request.inner_slices, start=1):
        found = depth_of(level)
        if found is None:
            return Refusal(
                False,
                f"{where}[{i}].topology: {level!r} is not a level of Topology "
                f"{topology.name} (its levels: {', '.join(topology.levels)})",
            )
        if found <= above:
            return Refusal(
                False,
                f"{where}[{i}].topology: {level!r} is not narrower than the layer above "
                f"({above_level!r}); layers go from the broadest level to the narrowest",
            )
        out.append((found, size))
        above, above_level = found, level
    return tuple(out)


def group_refusal(pod_sets: Sequence[PodSet]) -> Refusal | None:
    """Why the workload's pod-set groups cannot be placed as written, as Kueue's webhook
    says it (ValidatePodSetGroupingTopology); None when they can, or there are none.

    A group is a leader and its workers: exactly two pod sets, one of them a single pod,
    asking for the same level the same way (both required, or both preferred).  Kueue
    refuses anything else, so that a workload moved between the two means the same.
    """
    groups: dict[str, list[PodSet]] = {}
    for pod_set in pod_sets:
        if pod_set.topology is not None and pod_set.topology.group:
            groups.setdefault(pod_set.topology.group, []).append(pod_set)
    for name, members in groups.items():
        first = members[0].topology
        assert first is not None
        where = first.group_field or "topology group"
        names = ", ".join(p.name for p in members)
        if len(members) != 2:
            return Refusal(
                False,
                f"{where}: group {name!r} has {len(members)} pod set(s) ({names}); a group "
                "is exactly 2 pod sets, a leader and its workers (as in Kueue)",
            )
        leader, workers = members
        if leader.count != 1 and workers.count != 1:
            return Refusal(
                False,
                f"{where}: group {name!r} has {leader.count} and {workers.count} pods; one "
                "of its 2 pod sets must be a single pod, the leader (as in Kueue)",
            )
        other = workers.topology
        assert other is not None
        unconstrained = first.mode is TopologyMode.UNCONSTRAINED
        if unconstrained or (first.mode, first.level) != (other.mode, other.level):
            return Refusal(
                False,
                f"{where}: group {name!r}: pod sets {leader.name} and {workers.name} must ask "
                f"for the same level the same way (both required or both preferred); they "
                f"ask {first.mode.value.lower()} {first.level!r} and "
                f"{other.mode.value.lower()} {other.level!r}",
            )
    return None
