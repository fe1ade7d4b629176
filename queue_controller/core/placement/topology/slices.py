"""What a topology placement looks like from outside: its domain and its slices.

A domain is written as its label values from the broadest level down, joined by
"/" ("block-a/rack-3"; with the node when one node holds the gang and the Topology's
last level is the hostname).  A slice is the ``k`` members with consecutive
indices that must share a domain; it is written node -> members, in index order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from queue_controller.core.model.decisions import Decision
from queue_controller.core.placement.shapes import Placement, SetShape
from queue_controller.core.rules.topology import TopologyAsk


def cut(chosen: Mapping[str, int], k: int) -> list[dict[str, int]]:
    """Members on nodes (by name) cut into consecutive slices of ``k``."""
    slices: list[dict[str, int]] = []
    current: dict[str, int] = {}
    filled = 0
    for node, members in sorted(chosen.items()):
        left = members
        while left:
            take = min(left, k - filled)
            current[node] = current.get(node, 0) + take
            filled += take
            left -= take
            if filled == k:
                slices.append(current)
                current, filled = {}, 0
    return slices


def common_prefix(paths: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    if not paths:
        return ()
    first = paths[0]
    length = len(first)
    for path in paths[1:]:
        length = min(length, len(path))
        for i in range(length):
            if path[i] != first[i]:
                length = i
                break
    return first[:length]


def domain_name(ask: TopologyAsk, paths: Sequence[tuple[str, ...]], nodes: Sequence[str]) -> str:
    """The narrowest domain holding every member."""
    common = common_prefix(paths)
    if ask.has_hostname and len(nodes) == 1 and len(common) == len(ask.levels):
        return "/".join((*common, *nodes))
    return "/".join(common)


def placement_on(
    ask: TopologyAsk, nodes: Mapping[str, int], labels: Callable[[str], Mapping[str, str]]
) -> Placement:
    """A placement chosen earlier (a preemptor's nominated room) described again: the
    domain that holds it, and its slices, cut slice domain by slice domain."""
    paths = {n: tuple(labels(n).get(key, "") for key in ask.levels) for n in nodes}
    domain = domain_name(ask, list(paths.values()), list(nodes))
    slices: list[dict[str, int]] = []
    if ask.slice_size:
        # Layered slices: cut by the innermost layer; the domains sort by their paths, so
        # an outer layer's domain is one run of them, as the placer filled it.
        depth = ask.cut_depth
        by_domain: dict[tuple[str, ...], dict[str, int]] = {}
        for node, members in sorted(nodes.items()):
            key = (*paths[node], node) if depth >= len(ask.levels) else paths[node][: depth + 1]
            by_domain.setdefault(key, {})[node] = members
        for _, part in sorted(by_domain.items()):
            slices += cut(part, ask.cut_size)
    return Placement(dict(nodes), domain, tuple(slices))


def with_topology(
    decision: Decision, sets: Sequence[SetShape], placed: Sequence[Placement]
) -> Decision:
    """The domains (and slices) that pod sets asking for a topology got."""
    domains: dict[str, str] = {}
    slices: dict[str, tuple[Mapping[str, int], ...]] = {}
    spread: dict[str, str] = {}
    for item, placement in zip(sets, placed, strict=True):
        if item.shape.topology is None:
            continue
        domains[item.pod_set.name] = placement.domain
        if placement.slices:
            slices[item.pod_set.name] = placement.slices
        if placement.note:
            spread[item.pod_set.name] = placement.note
    if not domains:
        return decision
    named = [
        f"{d or 'spread over top-level domains'}" + (f" ({spread[s]})" if s in spread else "")
        for s, d in domains.items()
    ]
    if len(domains) == 1:
        where = f"in domain {named[0]}"
    else:
        where = "in domains " + ", ".join(f"{s}: {d}" for s, d in zip(domains, named, strict=True))
    return replace(
        decision,
        message=f"{decision.message}; {where}",
        domains=domains,
        slices=slices,
        spread=spread,
    )
