"""Turning `queue-controller simulate`'s options into a :class:`~.spec.Scenario`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from queue_controller.errors import InputError
from queue_controller.sim.scenario.spec import Scenario


def with_topology(scenario: Scenario, topology: str | None, *, seed: int) -> Scenario:
    """``scenario`` with the ``--topology`` file's Topologies and requests over it, if one
    is given (``bundled``: the one that goes with the bundled cluster)."""
    if topology is None:
        return scenario
    from queue_controller.sim.scenario import topologyspec

    path = topologyspec.bundled_file() if topology == "bundled" else Path(topology)
    where = "bundled sim-topology.yaml" if topology == "bundled" else topology
    return topologyspec.apply(topologyspec.load(path), scenario, seed=seed, where=where)


def with_dra(scenario: Scenario, dra: bool) -> Scenario:
    """``scenario`` with its whole GPUs asked and offered through DRA, if ``dra``
    (``--dra``: see :mod:`queue_controller.sim.scenario.dra`)."""
    if not dra:
        return scenario
    from queue_controller.core.model import GPU, ONE
    from queue_controller.core.rules import pod_request
    from queue_controller.errors import InvalidSpecError
    from queue_controller.sim.scenario import dra as sim_dra
    from queue_controller.sim.scenario.gpus import PRODUCT_LABEL

    shapes: set[tuple[str, int, str]] = set()
    for job in scenario.jobs:
        try:
            gpus = pod_request(job.template()).get(GPU, 0) // ONE
        except InvalidSpecError:
            continue  # the run reports it invalid
        if gpus:
            shapes.add((job.namespace, gpus, job.node_selector.get(PRODUCT_LABEL, "")))
    cluster = sim_dra.build(scenario.nodes, sorted(shapes))
    if not cluster.devices:
        raise InputError(
            "no node of the cluster offers whole, unshared nvidia.com/gpu to offer as DRA "
            "devices (MIG and time-sliced GPUs stay extended resources)",
            field="--dra",
        )
    offered = sum(cluster.devices.values())
    described = (
        f"whole GPUs as {DRIVER_CLASS} devices: {offered} on {len(cluster.devices)} nodes, "
        f"{len(cluster.claim_templates)} ResourceClaimTemplates; MIG and time-sliced GPUs "
        "stay extended resources"
    )
    return replace(scenario, dra=cluster, sources={**scenario.sources, "dra": described})


DRIVER_CLASS = "DeviceClass gpu.nvidia.com"


def build_scenario(
    *,
    bundled: bool,
    cluster: Path | None,
    queues: Sequence[Path],
    trace: Path | None,
    seed: int,
    jobs: int,
    arrival_rate_per_hour: float | None,
    max_gang_gpus: int,
    reshape: bool,
) -> Scenario:
    """The scenario that `simulate`'s options describe: bundled (reshaped if asked),
    from files with a trace, or from files with a generated workload."""
    # Imported late: --help and argument errors should not pay for the simulator.
    from queue_controller.sim.scenario.generate import (
        WorkloadShape,
        bundled_scenario,
        generate_workload,
    )
    from queue_controller.sim.scenario.inputs import load_cluster, load_queues, load_scenario

    shape = WorkloadShape(arrival_rate_per_hour=arrival_rate_per_hour, max_gang_gpus=max_gang_gpus)
    described = f"generated: seed={seed}, jobs={jobs}"
    if arrival_rate_per_hour is not None:
        described += f", arrival-rate-per-hour={arrival_rate_per_hour:g}"
    described += f", max-gang-gpus={max_gang_gpus}"
    if bundled:
        scenario = bundled_scenario(seed=seed, jobs=jobs)
        if not reshape:
            return scenario
        workload = generate_workload(
            seed=seed,
            jobs=jobs,
            queues=scenario.queues,
            nodes=scenario.nodes,
            quotas=scenario.quotas,
            priority_classes=scenario.priority_classes,
            shape=shape,
        )
        return replace(scenario, jobs=workload, sources={**scenario.sources, "workload": described})
    assert cluster is not None
    if trace is not None:
        return load_scenario(cluster=cluster, queues=queues, trace=trace)
    nodes = load_cluster(cluster)
    queue_objects, quotas, priority_classes, cohorts = load_queues(queues)
    workload = generate_workload(
        seed=seed,
        jobs=jobs,
        queues=queue_objects,
        nodes=nodes,
        quotas=quotas,
        priority_classes=priority_classes,
        shape=shape,
    )
    return Scenario(
        name=cluster.stem,
        nodes=tuple(nodes),
        queues=tuple(queue_objects),
        quotas=tuple(quotas),
        jobs=workload,
        priority_classes=tuple(priority_classes),
        cohorts=cohorts,
        sources={
            "cluster": str(cluster),
            "queues": ", ".join(str(path) for path in queues),
            "workload": described,
        },
    )
