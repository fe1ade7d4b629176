"""Fault injection, drawn once per simulation so every policy meets the same faults.

Node failures and pods outside any queue are timed in advance from the seed.
Whether a member pod fails to bind is a pure function of (seed, job, attempt,
pod), so a policy that makes the same attempt meets the same failure.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from queue_controller.core.model import GPU, ONE
from queue_controller.sim.scenario.spec import Faults, Scenario

FOREIGN_GPUS = ((1, 0.5), (2, 0.25), (4, 0.25))


@dataclass(frozen=True, slots=True)
class NodeFailure:
    at: float
    node: str
    repaired: float


@dataclass(frozen=True, slots=True)
class ForeignPod:
    """A pod outside any queue (a notebook, a debug pod) that takes whole GPUs."""

    index: int
    at: float
    ends: float
    request: dict[str, int]


@dataclass(frozen=True, slots=True)
class FaultPlan:
    seed: int
    bind_failure_probability: float
    bind_retry_seconds: float
    node_failures: tuple[NodeFailure, ...]
    foreign_pods: tuple[ForeignPod, ...]

    @classmethod
    def draw(cls, scenario: Scenario, faults: Faults, seed: int) -> FaultPlan:
        rng = random.Random(f"faults:{seed}")
        horizon = _horizon(scenario)
        nodes = sorted(node.name for node in scenario.nodes)
        failures: list[NodeFailure] = []
        if faults.node_failures_per_hour > 0 and nodes:
            t = rng.expovariate(faults.node_failures_per_hour / 3600)
            while t < horizon:
                node = rng.choice(nodes)
                failures.append(NodeFailure(t, node, t + faults.node_repair_seconds))
                t += rng.expovariate(faults.node_failures_per_hour / 3600)
        foreign: list[ForeignPod] = []
        if faults.foreign_pods_per_hour > 0:
            t = rng.expovariate(faults.foreign_pods_per_hour / 3600)
            while t < horizon:
                gpus = rng.choices([g for g, _ in FOREIGN_GPUS], [w for _, w in FOREIGN_GPUS])[0]
                life = rng.expovariate(1 / faults.foreign_pod_seconds)
                foreign.append(ForeignPod(len(foreign), t, t + life, {GPU: gpus * ONE}))
                t += rng.expovariate(faults.foreign_pods_per_hour / 3600)
        return cls(
            seed,
            faults.bind_failure_probability,
            faults.bind_retry_seconds,
            tuple(failures),
            tuple(foreign),
        )

    def bind_fails(self, job: str, attempt: int, pod: int, tries: int) -> bool:
        if self.bind_failure_probability <= 0:
            return False
        digest = hashlib.blake2b(
            f"{self.seed}:{job}:{attempt}:{pod}:{tries}".encode(), digest_size=8
        ).digest()
        return int.from_bytes(digest) / 2**64 < self.bind_failure_probability


def uniform(key: str, low: float, high: float) -> float:
    """A draw from [low, high] that depends on ``key`` alone, so every policy draws the same."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return low + (high - low) * int.from_bytes(digest) / 2**64


def _horizon(scenario: Scenario) -> float:
    """Faults stop where the workload stops arriving, plus the longest job."""
    if not scenario.jobs:
        return 0.0
    return max(j.arrival for j in scenario.jobs) + max(j.duration for j in scenario.jobs)
