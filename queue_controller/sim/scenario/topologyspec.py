"""A simulation's topology: the Topology objects, which Queues use them, which gangs ask.

The cluster's nodes carry the domain labels (a NodePools pool's ``racks``); this
file, given with ``simulate --topology``, says how the workload uses them:

    apiVersion: queue-controller.io/v1alpha1
    kind: SimulationTopology
    topologies:
    - name: racks
      levels: [topology.queue-controller.io/block, topology.queue-controller.io/rack,
               kubernetes.io/hostname]
    queues: {"*": racks}          # namespace/name (or "*": every Queue) -> Topology
    gangs:                        # tried in order; a gang takes the first rule it draws
    - {minPods: 2, fraction: 0.5, mode: Preferred, level: topology.queue-controller.io/rack}

A trace or a generated workload has no topology column of its own, so that the
same workload can be replayed with topology on and off: the rules draw, with the
run's seed, which gangs of at least ``minPods`` members ask (a gang whose job
already asks keeps its own request).  Errors name the file and the field.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from queue_controller.core.model import Topology, TopologyMode, TopologyPlacement, TopologyRequest
from queue_controller.core.rules import HOSTNAME
from queue_controller.dump import StrictLoader
from queue_controller.errors import InputError
from queue_controller.sim.scenario.spec import Scenario, SimJob

ANY_QUEUE = "*"
# Where a drawn request says it was written, for the core's messages.
DRAWN_FIELD = "--topology gangs"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TopologySpec(_Strict):
    name: str = Field(min_length=1)
    levels: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)

    @model_validator(mode="after")
    def _levels(self) -> TopologySpec:
        if len(set(self.levels)) != len(self.levels):
            raise ValueError(f"levels: a label is named twice in {self.levels}")
        if HOSTNAME in self.levels[:-1]:
            raise ValueError(f"levels: {HOSTNAME} may only be the last (narrowest) level")
        return self


class GangRule(_Strict):
    minPods: Annotated[int, Field(ge=1)] = 2
    fraction: Annotated[float, Field(ge=0, le=1)]
    mode: Literal["Required", "Preferred"]
    level: str = Field(min_length=1)
    sliceSize: Annotated[int, Field(ge=0)] = 0
    sliceLevel: str = ""

    @model_validator(mode="after")
    def _slices(self) -> GangRule:
        if self.sliceSize and not self.sliceLevel:
            raise ValueError("sliceLevel: a rule with sliceSize names the level of its slices")
        return self

    def request(self) -> TopologyRequest:
        return TopologyRequest(
            mode=TopologyMode(self.mode),
            level=self.level,
            slice_size=self.sliceSize,
            slice_level=self.sliceLevel,
            field=DRAWN_FIELD,
        )


class TopologyFile(_Strict):
    apiVersion: Literal["queue-controller.io/v1alpha1"] = "queue-controller.io/v1alpha1"
    kind: Literal["SimulationTopology"] = "SimulationTopology"
    topologies: list[TopologySpec] = Field(min_length=1)
    queues: dict[str, str] = Field(min_length=1)
    gangs: list[GangRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> TopologyFile:
        by_name = {t.name: t for t in self.topologies}
        if len(by_name) != len(self.topologies):
            raise ValueError("topologies: names must be unique")
        for queue, name in self.queues.items():
            if name not in by_name:
                raise ValueError(
                    f"queues.{queue}: no Topology named {name!r} (topologies: {', '.join(by_name)})"
                )
        # A rule applies to gangs of every listed Queue: each of their Topologies
        # must have its levels, or the core would refuse the gangs as invalid.
        for i, rule in enumerate(self.gangs):
            for name in sorted(set(self.queues.values())):
                levels = by_name[name].levels
                for key, level in (("level", rule.level), ("sliceLevel", rule.sliceLevel)):
                    if level and level not in levels:
                        raise ValueError(
                            f"gangs.{i}.{key}: {level!r} is not a level of Topology {name} "
                            f"(its levels: {', '.join(levels)})"
                        )
        return self


def bundled_file() -> Path:
    """The example that goes with the bundled cluster's racks (data/sim-topology.yaml)."""
    return Path(str(resources.files("queue_controller.data").joinpath("sim-topology.yaml")))


def load(path: Path) -> TopologyFile:
    """Read and validate a topology file; errors name the file and the field."""
    try:
        # A key given twice is refused, naming its line, as in a dump.
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=StrictLoader)
    except FileNotFoundError:
        raise InputError("no such file", where=str(path), field="--topology") from None
    except yaml.YAMLError as error:
        where = str(path)
        mark = getattr(error, "problem_mark", None)
        if mark is not None:
            where = f"{path} line {mark.line + 1}, column {mark.column + 1}"
        problem = " ".join(str(getattr(error, "problem", None) or error).split())
        raise InputError(f"not valid YAML: {problem}", where=where) from None
    try:
        return TopologyFile.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        # A model check names its field first in its message ("gangs.0.level: ..."),
        # which pydantic reports at the model's location: join the two.
        head, colon, rest = message.partition(": ")
        if colon and " " not in head:
            field, message = ".".join(filter(None, (field, head))), rest
        raise InputError(message, where=str(path), field=field) from None


def apply(spec: TopologyFile, scenario: Scenario, *, seed: int, where: str) -> Scenario:
    """The scenario with the file's Topologies, its Queues' topologyName, and the
    gangs the rules draw asking for a topology."""
    keys = {f"{q.namespace}/{q.name}" for q in scenario.queues}
    for queue in spec.queues:
        if queue != ANY_QUEUE and queue not in keys:
            raise InputError(
                f"no Queue {queue} in the scenario (Queues: {', '.join(sorted(keys))})",
                where=where,
                field=f"queues.{queue}",
            )
    for i, topology in enumerate(spec.topologies):
        # A gang asking for a Topology no node is in could never run: say so now.
        domain_levels = [level for level in topology.levels if level != HOSTNAME]
        if not any(all(key in n.labels for key in domain_levels) for n in scenario.nodes):
            raise InputError(
                f"no node of the cluster has every label {', '.join(domain_levels)} "
                "(a NodePools pool gets the rack and block labels from its topology option)",
                where=where,
                field=f"topologies.{i}.levels",
            )
    default = spec.queues.get(ANY_QUEUE, "")
    queues = tuple(
        replace(q, topology_name=spec.queues.get(f"{q.namespace}/{q.name}", default))
        for q in scenario.queues
    )
    with_topology = {(q.namespace, q.name) for q in queues if q.topology_name}
    # Its own stream: drawing which gangs ask leaves the run's other draws as they were.
    rng = random.Random(f"topology:{seed}")
    jobs = tuple(
        _drawn(job, spec.gangs, rng) if (job.namespace, job.queue) in with_topology else job
        for job in scenario.jobs
    )
    topologies = tuple(Topology(t.name, tuple(t.levels)) for t in spec.topologies)
    return replace(
        scenario,
        queues=queues,
        jobs=jobs,
        topologies=topologies,
        sources={**scenario.sources, "topology": where},
    )


def _drawn(job: SimJob, rules: Sequence[GangRule], rng: random.Random) -> SimJob:
    # One draw per rule and gang, whether it applies or not: which gangs ask does not
    # depend on what the gangs before them drew.
    draws = [rng.random() for _ in rules]
    if job.topology is not None:
        return job
    for rule, draw in zip(rules, draws, strict=True):
        if draw < rule.fraction and job.pods >= rule.minPods and _divides(rule, job.pods):
            return replace(job, topology=rule.request())
    return job


def _divides(rule: GangRule, pods: int) -> bool:
    # A slice size that does not divide the gang is the core's InvalidSpec: a drawn
    # rule skips such a gang instead of making it invalid.
    return not rule.sliceSize or pods % rule.sliceSize == 0


def with_placement(scenario: Scenario, placement: TopologyPlacement) -> Scenario:
    """``scenario`` with every Topology's ``spec.placement`` set (``--topology-placement``):
    the same cluster, workload and requests, split by best fit or balanced."""
    topologies = tuple(replace(t, placement=placement) for t in scenario.topologies)
    return replace(scenario, topologies=topologies)
