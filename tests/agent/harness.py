"""A Node held in memory behind a recording gateway, a clock, and an agent wired to both.

The agent publishes through the real NodeHealthPublisher; only the gateway under it is
fake: it keeps one Node, applies the merge patches the publisher sends (and the
strategic merge of ``status.conditions`` by type), and records every request.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from queue_controller.agent.loop import NodeAgent
from queue_controller.agent.metrics import AgentMetrics
from queue_controller.gpuhealth.nvml import open_session
from queue_controller.gpuhealth.readings import Limits
from queue_controller.kube import gateway as gw
from queue_controller.kube import nodehealth
from queue_controller.kube.healthwriter import NodeHealthPublisher
from tests.fakes.fake_pynvml import FakeNvml

NODE = "gpu-node-1"
START = 1_700_000_000.0


@dataclass
class Clock:
    now: float = START

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


@dataclass
class FakeGateway:
    """The Gateway surface NodeHealthPublisher uses: get and patch of one Node."""

    node: dict[str, Any] = field(
        default_factory=lambda: {
            "metadata": {"name": NODE, "resourceVersion": "1", "annotations": {}},
            "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    requests: list[tuple[str, str]] = field(default_factory=list)
    # (method, error): the next request of that method fails so (a transient API failure).
    failures: list[tuple[str, gw.GatewayError]] = field(default_factory=list)
    # Called after each successful write, with the number of writes so far.
    on_write: Callable[[int], None] | None = None

    def _fail(self, method: str) -> None:
        for i, (failing, error) in enumerate(self.failures):
            if failing == method:
                del self.failures[i]
                raise error

    def get(self, kind: gw.Resource, namespace: str, name: str) -> dict[str, Any]:
        self.requests.append(("GET", name))
        self._fail("GET")
        if kind is not gw.NODE or name != self.node["metadata"]["name"]:
            raise gw.NotFound(404, f"{kind.plural} {name!r} not found")
        return copy.deepcopy(self.node)

    def patch(
        self,
        kind: gw.Resource,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        resource_version: str | None = None,
        subresource: str = "",
        strategic: bool = False,
    ) -> dict[str, Any]:
        self.requests.append(("PATCH", f"{name}/{subresource}" if subresource else name))
        self._fail("PATCH")
        if subresource == "status":
            assert strategic, "conditions need a strategic merge patch"
            conditions = {c["type"]: c for c in self.node["status"]["conditions"]}
            for condition in patch["status"]["conditions"]:
                conditions[condition["type"]] = copy.deepcopy(condition)
            self.node["status"]["conditions"] = list(conditions.values())
        else:
            _merge(self.node, {k: v for k, v in patch.items() if k != "metadata"})
            _merge(self.node["metadata"], patch.get("metadata", {}))
            self.node["metadata"].pop("resourceVersion", None)
        version = int(self.node["metadata"].get("resourceVersion", "1"))
        self.node["metadata"]["resourceVersion"] = str(version + 1)
        if self.on_write is not None:
            self.on_write(self.writes())
        return copy.deepcopy(self.node)

    # -- what the Node says now ------------------------------------------------------

    def condition(self) -> dict[str, Any]:
        found = nodehealth.condition(self.node)
        assert found is not None, "no GPUHealthy condition"
        return dict(found)

    def annotation(self) -> dict[str, Any]:
        raw = self.node["metadata"]["annotations"][nodehealth.ANNOTATION]
        data: dict[str, Any] = json.loads(raw)
        return data

    def unhealthy(self) -> dict[int, dict[str, Any]]:
        return {e["index"]: e for e in self.annotation().get("unhealthy", [])}

    def writes(self) -> int:
        return sum(1 for method, _ in self.requests if method == "PATCH")


@dataclass
class Rig:
    nvml: FakeNvml
    gateway: FakeGateway
    clock: Clock
    metrics: AgentMetrics
    agent: NodeAgent

    def step(self, seconds: float = 0.0) -> None:
        """Let ``seconds`` pass, take the events queued in NVML, and poll once."""
        self.clock.advance(seconds)
        events = self.agent.session.wait(0) if self.agent.session is not None else None
        self.agent.step(events or [])


def rig(
    nvml: FakeNvml | None = None,
    *,
    gateway: FakeGateway | None = None,
    clock: Clock | None = None,
    limits: Limits | None = None,
    clear_seconds: float = 600.0,
    retry_seconds: float = 300.0,
    taint: bool = False,
) -> Rig:
    nvml = nvml if nvml is not None else FakeNvml(8)
    gateway = gateway if gateway is not None else FakeGateway()
    clock = clock if clock is not None else Clock()
    metrics = AgentMetrics()
    publisher = NodeHealthPublisher(gateway=gateway, source="node-agent", taint=taint)  # type: ignore[arg-type]
    agent = NodeAgent(
        node_name=NODE,
        publisher=publisher,
        open_nvml=lambda: open_session(nvml),
        limits=limits or Limits(),
        clear_seconds=clear_seconds,
        poll_seconds=10.0,
        nvml_retry_seconds=retry_seconds,
        metrics=metrics,
        clock=clock,
    )
    return Rig(nvml=nvml, gateway=gateway, clock=clock, metrics=metrics, agent=agent)
