"""Resource names and resource vectors.

A resource vector maps a resource name to an amount in integer milli-units.
Absent names mean zero.  Vectors handed around the core are read-only
``Mapping`` values; the helpers here always return fresh dicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

Resources = Mapping[str, int]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
ONE = 1000  # one whole unit in milli-units


def is_native(name: str) -> bool:
    """Native resources: unprefixed names, or anything in the kubernetes.io domain."""
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    """Extended resources (device plugins: GPUs, MIG slices, NICs, ...).

    Same rule as ``v1helper.IsExtendedResourceName``: a domain-prefixed name
    outside ``kubernetes.io`` that is not a quota ``requests.`` name.
    """
    return not is_native(name) and not name.startswith("requests.")


def is_mig(name: str) -> bool:
    return name.startswith(MIG_PREFIX)


@lru_cache(maxsize=1024)
def scarcity_rank(name: str) -> tuple[int, str]:
    """Order in which resources are compared when choosing nodes and explaining shortfalls.

    Accelerators first (they are what gangs fight over), then CPU and memory,
    then everything else, with the name as a tie-break so the order is total.
    """
    if is_extended(name):
        return (0, name)
    if name == CPU:
        return (1, name)
    if name == MEMORY:
        return (2, name)
    if name == PODS:
        return (4, name)
    return (3, name)


def add(*vectors: Resources) -> dict[str, int]:
    total: dict[str, int] = {}
    for vector in vectors:
        for name, amount in vector.items():
            total[name] = total.get(name, 0) + amount
    return total


def scale(vector: Resources, factor: int) -> dict[str, int]:
    return {name: amount * factor for name, amount in vector.items()}


def sum_vectors(vectors: Iterable[Resources]) -> dict[str, int]:
    return add(*vectors)


def nonzero(vector: Resources) -> dict[str, int]:
    return {name: amount for name, amount in vector.items() if amount}
