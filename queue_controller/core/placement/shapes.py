"""The shape of a gang member, and the outcome of trying to place a gang.

Every member of a pod set comes from one pod template, so a pod set is
"``count`` copies of one request under one set of constraints".  That is what
lets placement reason about counts per node instead of pod by pod.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from queue_controller.core.devices.dims import DeviceDims, is_device_dimension
from queue_controller.core.model.objects import PodSet, PodTemplate
from queue_controller.core.rules.topology import TopologyAsk


@dataclass(frozen=True, slots=True)
class GangShape:
    request: Mapping[str, int]  # per member, milli-units, zero amounts dropped
    template: PodTemplate  # where members may go
    constraint_key: Hashable  # equal keys: identical node eligibility
    key: Hashable  # equal keys: identical members, kept together alike
    # Equal fit keys: identical members, wherever they are kept (the key without the
    # topology).  What a node holds for a member depends on nothing else.
    fit_key: Hashable
    topology: TopologyAsk | None = None  # None: placed without regard to domains
    # DRA: the cycle's device dimensions, when the request holds some, and what to
    # call each in a message ("gpu.nvidia.com devices for request gpus of ...").
    devices: DeviceDims | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def label(self, resource: str) -> str:
        return next((text for name, text in self.labels if name == resource), resource)


def shape_of(
    template: PodTemplate,
    request: Mapping[str, int],
    topology: TopologyAsk | None = None,
    *,
    devices: DeviceDims | None = None,
    labels: Mapping[str, str] | None = None,
) -> GangShape:
    constraint_key = (
        tuple(sorted(template.node_selector.items())),
        template.required_affinity,
        tuple(sorted(set(template.tolerations), key=repr)),
    )
    request = {name: amount for name, amount in request.items() if amount}
    named = tuple(sorted((labels or {}).items()))
    return GangShape(
        request=request,
        template=template,
        constraint_key=constraint_key,
        # The topology is part of the key (two gangs alike but for it place differently),
        # not of the constraint key: which nodes a member may use does not depend on it.
        # Labels too: gangs alike but for their claims' names are told apart in messages.
        key=(constraint_key, tuple(sorted(request.items())), topology, named),
        topology=topology,
        fit_key=(constraint_key, tuple(sorted(request.items()))),
        devices=devices if any(map(is_device_dimension, request)) else None,
        labels=named,
    )


@dataclass(frozen=True, slots=True)
class SetShape:
    """One pod set of a gang as the placer sees it."""

    pod_set: PodSet
    shape: GangShape


@dataclass(frozen=True, slots=True)
class Placement:
    nodes: Mapping[str, int]  # node -> members
    # With a topology: the narrowest domain holding every member, as its label values
    # from the broadest level down joined by "/" ("" when it spans top-level domains).
    domain: str = ""
    # With slices: node -> members of each slice, in member-index order.
    slices: tuple[Mapping[str, int], ...] = ()
    # How a split gang was spread, where the Topology's placement chose it ("balanced
    # over 2 racks"); "" otherwise.
    note: str = ""


@dataclass(frozen=True, slots=True)
class Shortfall:
    fits: int  # members that could be placed at once
    needed: int
    explanation: str


@dataclass(frozen=True, slots=True)
class GroupShortfall:
    """Why a group of pod sets (Kueue's podset-group-name) was not placed together."""

    member: int | None  # the member that does not fit even alone; None: not together
    shortfall: Shortfall


@runtime_checkable
class GroupPlacer(Protocol):
    """A placer that keeps a group of pod sets in one domain of their shared level."""

    def try_place_group(
        self, items: Sequence[tuple[GangShape, int]]
    ) -> list[Placement] | GroupShortfall:
        """Each (shape, members) placed, all in one domain; changes nothing, as try_place."""
        ...


class Placer(Protocol):
    """Places whole gangs on nodes, as a transaction.

    ``try_place`` changes nothing; ``commit`` applies a placement it returned.
    A gang that is not committed is simply forgotten (Volcano's statement
    discard, Kueue's forget-on-failure).  ``release`` undoes a commit: a gang
    of several pod sets commits each set before trying the next, and gives
    them all back if a later one does not fit.
    """

    def try_place(self, shape: GangShape, count: int) -> Placement | Shortfall: ...

    def commit(self, shape: GangShape, placement: Placement) -> None: ...

    def release(self, shape: GangShape, placement: Placement) -> None: ...

    def adjust(self, node: str, freed: Mapping[str, int]) -> None:
        """Give ``freed`` back to ``node`` (negative amounts take it): what evicting the
        gangs that hold it would free, tried out by the preemption search."""
        ...

    def place_on(self, shape: GangShape, nodes: Mapping[str, int]) -> Placement | None:
        """``nodes`` (node -> members) as a placement, if every member fits there now."""
        ...

    def withhold(self, node: str) -> Mapping[str, int]:
        """Take all that ``node`` has free, and say what: nodes reserved for a gang are
        withheld from the others, and ``adjust`` gives the room back."""
        ...
