"""A gang's pod sets placed as one transaction, groups together.

Pod sets are placed in turn, each committed before the next is tried, so that no two
count the same free room; if one does not fit, those placed are released (Volcano's
statement discard).  Pod sets of one topology group (Kueue's ``podset-group-name``) are
placed together where the placer can keep them in one domain (:class:`GroupPlacer`), at
the turn of the group's first pod set.  A placer that ignores topology (the pod-by-pod
baseline) places them in turn like any others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from queue_controller.core.placement.shapes import (
    GroupPlacer,
    GroupShortfall,
    Placement,
    Placer,
    SetShape,
)


@dataclass(frozen=True, slots=True)
class SetsRefused:
    pod_sets: tuple[int, ...]  # the pod sets the explanation is about (a group's, or one)
    group: str  # their topology group; "" for a pod set alone
    explanation: str


def group_of(item: SetShape) -> str:
    topology = item.pod_set.topology
    return topology.group if topology is not None and item.shape.topology is not None else ""


def place_sets(placer: Placer, sets: Sequence[SetShape]) -> list[Placement] | SetsRefused:
    """Every pod set placed and committed (in the sets' order), or none and why."""
    if len(sets) == 1:  # nearly every gang: no group to look for (a group is two sets)
        item = sets[0]
        only = placer.try_place(item.shape, item.pod_set.min_count)
        if not isinstance(only, Placement):
            return SetsRefused((0,), "", only.explanation)
        placer.commit(item.shape, only)
        return [only]
    groups: dict[str, list[int]] = {}
    for index, item in enumerate(sets):
        group = group_of(item)
        if group:
            groups.setdefault(group, []).append(index)
    together = placer if groups and isinstance(placer, GroupPlacer) else None
    placed: dict[int, Placement] = {}
    for index, item in enumerate(sets):
        if index in placed:
            continue
        group = group_of(item) if together is not None else ""
        if group and together is not None:
            indexes = groups[group]
            outcome = together.try_place_group(
                [(sets[i].shape, sets[i].pod_set.min_count) for i in indexes]
            )
            if isinstance(outcome, GroupShortfall):
                _release(placer, sets, placed)
                failed = indexes if outcome.member is None else [indexes[outcome.member]]
                return SetsRefused(tuple(failed), group, outcome.shortfall.explanation)
            for i, placement in zip(indexes, outcome, strict=True):
                placer.commit(sets[i].shape, placement)
                placed[i] = placement
            continue
        single = placer.try_place(item.shape, item.pod_set.min_count)
        if not isinstance(single, Placement):
            _release(placer, sets, placed)
            return SetsRefused((index,), "", single.explanation)
        placer.commit(item.shape, single)
        placed[index] = single
    return [placed[i] for i in range(len(sets))]


def _release(placer: Placer, sets: Sequence[SetShape], placed: dict[int, Placement]) -> None:
    for index, placement in placed.items():
        placer.release(sets[index].shape, placement)
