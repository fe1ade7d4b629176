"""The trace every system replays: gangs of GPU pods with arrival times and runtimes.

Two sources:

* ``openb`` (the default): the Alibaba GPU-cluster trace in ../shared/data/openb/.
  Source: Alibaba clusterdata ``cluster-trace-gpu-v2023`` (CC BY 4.0), from Weng et al.,
  "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient
  Descent", USENIX ATC '23.  How it becomes gangs, all seeded:

  - its GPU tasks in creation order; a task asking for whole GPUs gives each pod of its
    gang ``num_gpu`` GPUs; a task sharing part of one GPU (``gpu_milli`` < 1000) becomes
    a gang of MIG slices (the trace has no MIG, and a shared GPU has no whole-device
    equivalent): one slice per pod, of the MIG profile the gangs so far load least
    against the cluster's slices of it.  Most shared tasks ask for 300-800 milli, and
    mapping them by size would pile them all on 3g.40gb while 1g.10gb stayed empty;
  - a shared task is skipped while MIG slices are more loaded than whole GPUs (the MIG
    pool is 15% of the nodes, the shared tasks 40% of the trace): every pool saturates
    alike, and neither's backlog alone sets the makespan;
  - the trace has no gang column, so each gang's pod count is drawn from 1..32
    (``GANG_PODS``), capped at a quarter of the cluster's units of that resource so that
    every gang fits one team's nominal quota and the cluster;
  - runtimes keep the trace's order of durations (deletion - scheduled) but are spread
    by rank over ``--runtime`` (default 20-120 s): equal runtimes empty and refill the
    cluster in waves, and systems tie;
  - arrivals keep the trace's spacing, compressed so that the gangs offer twice what
    the cluster holds (``OFFERED_LOAD``) while they arrive: a backlog builds, and the
    cluster saturates.

* a Kueue performance-generator YAML (``test/performance/scheduler/configs/*/
  generator.yaml``): cohorts x queuesSets x workloadsSets x workloads, translated to
  teams and GPU gangs (``request`` whole GPUs per pod, ``podCount`` pods, ``runtimeMs``,
  the k-th workload of a set arriving k x ``creationIntervalMs`` after the start, as
  Kueue's generator creates them).
"""

from __future__ import annotations

import csv
import math
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.bench.e2e.shape import GPU, MIG_PREFIX, ROOT, ClusterShape
from tests.bench.e2e.teams import QUEUE_NAME, TeamSpec

OPENB_DIR = ROOT.parent / "shared" / "data" / "openb"


def repo_relative(path: Path) -> str:
    """``path`` as a report names it: relative to the repository root (``../shared/data/openb``
    for the shared data beside it), so that no committed report carries a machine's path."""
    return Path(os.path.relpath(path.resolve(), ROOT.resolve())).as_posix()


OPENB_CREDIT = (
    "Alibaba clusterdata cluster-trace-gpu-v2023 (openb), CC BY 4.0; Weng et al., "
    '"Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation '
    "Gradient Descent\", USENIX ATC '23"
)
GANG_PODS = (1, 2, 4, 8, 16, 32)
GANG_WEIGHTS = (40, 20, 15, 12, 8, 5)  # mostly small gangs, a few that fill many nodes
OFFERED_LOAD = 2.0  # GPU-seconds offered per GPU-second held, while gangs arrive
FILL = 2.0  # the default --jobs: enough gangs to fill every GPU twice over
TEAMS = 4
RUNTIME = (20.0, 120.0)

KWOK_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
# The runtime every Job declares (as a user who knows it would): our reservation and
# backfill read it; Kueue ignores it.
EXPECTED_RUNTIME = "queue-controller.io/expected-runtime-seconds"
OUR_QUEUE_LABEL = "queue-controller.io/queue"


@dataclass(frozen=True)
class Gang:
    """One batch/v1 Job: ``pods`` pods, each asking ``per_pod`` units of ``resource``."""

    name: str
    namespace: str
    pods: int
    resource: str
    per_pod: int
    runtime_seconds: float
    arrival_seconds: float


@dataclass(frozen=True)
class Trace:
    gangs: tuple[Gang, ...]
    teams: tuple[TeamSpec, ...]
    source: str
    credit: str = ""
    notes: tuple[str, ...] = field(default=())

    def gpus(self, gang: Gang, shape: ClusterShape) -> float:
        return shape.gpus(gang.resource, gang.pods * gang.per_pod)

    def makespan_lower_bound(self, shape: ClusterShape) -> dict[str, float]:
        """No system can finish sooner than the largest of these: every GPU-second over
        every GPU, the longest gang's runtime, and the last arrival's own end."""
        if not self.gangs:
            return {"seconds": 0.0}
        first = min(g.arrival_seconds for g in self.gangs)
        work = sum(self.gpus(g, shape) * g.runtime_seconds for g in self.gangs)
        bounds = {
            "gpu_seconds_over_gpus": round(work / shape.total_gpus, 1),
            "longest_runtime": round(max(g.runtime_seconds for g in self.gangs), 1),
            "latest_arrival_end": round(
                max(g.arrival_seconds + g.runtime_seconds for g in self.gangs) - first, 1
            ),
        }
        return {"seconds": max(bounds.values()), **bounds}


# -- teams --------------------------------------------------------------------------


def default_teams(shape: ClusterShape, count: int = TEAMS) -> tuple[TeamSpec, ...]:
    """``count`` teams in one cohort sharing every GPU resource evenly, borrowing unbounded:
    alone, a team may take the whole cluster; together, each is guaranteed its share."""
    teams = []
    for index in range(count):
        nominal = {
            resource: total // count + (1 if index < total % count else 0)
            for resource, total in shape.capacity.items()
        }
        name = f"team-{chr(ord('a') + index)}"
        teams.append(TeamSpec(name=name, namespace=name, cohort="gpu", nominal=nominal))
    return tuple(teams)


# -- openb ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Task:
    created: float
    duration: float
    num_gpu: int
    gpu_milli: int


def _tasks(directory: Path) -> list[_Task]:
    path = directory / "openb_pod_list_default.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path}: the openb trace is missing (see {OPENB_DIR})")
    tasks = []
    with path.open() as handle:
        for row in csv.DictReader(handle):
            if int(row["num_gpu"]) == 0:
                continue
            created = float(row["creation_time"])
            started = float(row["scheduled_time"] or row["creation_time"])
            tasks.append(
                _Task(
                    created=created,
                    duration=max(1.0, float(row["deletion_time"]) - started),
                    num_gpu=int(row["num_gpu"]),
                    gpu_milli=int(row["gpu_milli"]),
                )
            )
    tasks.sort(key=lambda t: t.created)
    return tasks


def least_loaded_mig(shape: ClusterShape, offered: Mapping[str, float]) -> str | None:
    """The MIG resource with the least offered per unit on the cluster (the smallest on ties)."""
    migs = [r for r in shape.capacity if r.startswith(MIG_PREFIX)]
    if not migs:
        return None
    return min(migs, key=lambda r: (offered.get(r, 0.0) / shape.capacity[r], shape.weights[r]))


def _family_load(shape: ClusterShape, offered: Mapping[str, float], mig: bool) -> float:
    """Offered GPUs per GPU held, over the MIG resources or over the others."""
    resources = [r for r in shape.capacity if r.startswith(MIG_PREFIX) == mig]
    held = sum(shape.gpus(r, shape.capacity[r]) for r in resources)
    return sum(shape.gpus(r, offered.get(r, 0.0)) for r in resources) / held if held else 0.0


def spread_by_rank(values: Sequence[float], low: float, high: float) -> list[float]:
    """Each value replaced by ``low..high`` by its rank: order kept, spread even, whole s."""
    if not values:
        return []
    order = sorted(range(len(values)), key=lambda i: (values[i], i))
    out = [0.0] * len(values)
    last = max(1, len(values) - 1)
    for rank, index in enumerate(order):
        out[index] = float(round(low + (high - low) * rank / last))
    return out


def compress(raw: Sequence[float], window: float) -> list[float]:
    """Arrival times keeping ``raw``'s spacing, scaled to start at 0 and end at ``window``."""
    if not raw:
        return []
    first, span = raw[0], raw[-1] - raw[0]
    if span <= 0:
        return [0.0] * len(raw)
    return [round((t - first) / span * window, 3) for t in raw]


def openb(
    shape: ClusterShape,
    *,
    jobs: int | None,
    seed: int,
    runtime: tuple[float, float] = RUNTIME,
    directory: Path = OPENB_DIR,
) -> Trace:
    tasks = _tasks(directory)
    rng = random.Random(seed)
    teams = default_teams(shape)
    capacity_goal = FILL * shape.total_gpus
    picked: list[tuple[_Task, str, int, int, float]] = []  # task, resource, per_pod, pods, raw
    offered = 0.0
    by_resource: dict[str, float] = {}  # units offered so far, per resource
    cycle_span = tasks[-1].created - tasks[0].created + 1.0
    index = 0
    while (jobs is None and offered < capacity_goal) or (jobs is not None and len(picked) < jobs):
        task = tasks[index % len(tasks)]
        raw = task.created + (index // len(tasks)) * cycle_span  # past the end: the trace again
        index += 1
        resource, per_pod = GPU, task.num_gpu
        drawn = rng.choices(GANG_PODS, weights=GANG_WEIGHTS)[0]  # drawn for every task
        if task.gpu_milli < 1000:
            mig = least_loaded_mig(shape, by_resource)
            if mig is None or _family_load(shape, by_resource, True) > _family_load(
                shape, by_resource, False
            ):
                continue
            resource, per_pod = mig, 1
        total = shape.capacity.get(resource, 0)
        if total == 0:
            continue
        per_pod = min(per_pod, total)
        pods = max(1, min(drawn, total // TEAMS // per_pod))
        picked.append((task, resource, per_pod, pods, raw))
        offered += shape.gpus(resource, pods * per_pod)
        by_resource[resource] = by_resource.get(resource, 0.0) + pods * per_pod
    runtimes = spread_by_rank([p[0].duration for p in picked], *runtime)
    demand = sum(
        shape.gpus(resource, pods * per_pod) * seconds
        for (_, resource, per_pod, pods, _), seconds in zip(picked, runtimes, strict=True)
    )
    window = demand / (OFFERED_LOAD * shape.total_gpus)
    arrivals = compress([p[4] for p in picked], window)
    gangs = []
    for number, ((_, resource, per_pod, pods, _), seconds, at) in enumerate(
        zip(picked, runtimes, arrivals, strict=True)
    ):
        team = teams[rng.randrange(len(teams))]
        kind = "gpu" if resource == GPU else resource.removeprefix(MIG_PREFIX).split(".")[0]
        gangs.append(
            Gang(
                name=f"g{number:05d}-{pods}x{per_pod}{kind}",
                namespace=team.namespace,
                pods=pods,
                resource=resource,
                per_pod=per_pod,
                runtime_seconds=seconds,
                arrival_seconds=at,
            )
        )
    return Trace(
        gangs=tuple(gangs),
        teams=teams,
        source=f"openb ({repo_relative(directory)}), seed {seed}",
        credit=OPENB_CREDIT,
        notes=(f"arrivals compressed into {window:.0f} s (offered load {OFFERED_LOAD:g}x)",),
    )


# -- Kueue's performance-generator YAML ----------------------------------------------------


class TraceError(ValueError):
    """A trace file that cannot be read as Kueue's generator config."""


def _whole(value: Any, what: str) -> int:
    try:
        number = float(str(value))
    except ValueError:
        raise TraceError(f"{what}: {value!r} is not a number of GPUs") from None
    return max(1, math.ceil(number))


def kueue_generator(config: Mapping[str, Any], *, resource: str = GPU) -> Trace:
    """Kueue's generator config as teams (one per ClusterQueue) and gangs."""
    cohorts = config.get("cohorts")
    if not isinstance(cohorts, list) or not cohorts:
        raise TraceError("a Kueue generator config needs a non-empty 'cohorts' list")
    teams: list[TeamSpec] = []
    gangs: list[Gang] = []
    for cohort_set in cohorts:
        for cohort_index in range(int(cohort_set.get("count", 1))):
            cohort = f"{cohort_set['className']}-{cohort_index}"
            for set_index, queue_set in enumerate(cohort_set.get("queuesSets", [])):
                for queue_index in range(int(queue_set.get("count", 1))):
                    # Named as Kueue's generator names its ClusterQueues (and namespaces).
                    name = f"{queue_set['className']}-{set_index}-{queue_index}-{cohort}"
                    borrowing = queue_set.get("borrowingLimit")
                    teams.append(
                        TeamSpec(
                            name=name,
                            namespace=name,
                            cohort=cohort,
                            nominal={resource: _whole(queue_set["nominalQuota"], name)},
                            borrowing_limit=(
                                {}
                                if borrowing in (None, "")
                                else {resource: int(float(str(borrowing)))}
                            ),
                        )
                    )
                    gangs += _workloads(queue_set, name, resource)
    gangs.sort(key=lambda g: (g.arrival_seconds, g.namespace, g.name))
    return Trace(gangs=tuple(gangs), teams=tuple(teams), source="Kueue generator YAML")


def _workloads(queue_set: Mapping[str, Any], namespace: str, resource: str) -> list[Gang]:
    gangs = []
    for set_index, workload_set in enumerate(queue_set.get("workloadsSets", [])):
        interval = float(workload_set.get("creationIntervalMs", 0)) / 1000
        made = 0
        for repeat in range(int(workload_set.get("count", 1))):
            for index, workload in enumerate(workload_set.get("workloads", [])):
                made += 1  # Kueue's generator waits one interval before each workload
                gangs.append(
                    Gang(
                        name=f"{workload['className']}-{set_index}-{repeat}-{index}",
                        namespace=namespace,
                        pods=int(workload.get("podCount") or 1),
                        resource=resource,
                        per_pod=_whole(workload.get("request", 1), workload["className"]),
                        runtime_seconds=float(workload.get("runtimeMs", 1000)) / 1000,
                        arrival_seconds=round(made * interval, 3),
                    )
                )
    return gangs


def load(
    source: str,
    shape: ClusterShape,
    *,
    jobs: int | None,
    seed: int,
    runtime: tuple[float, float] = RUNTIME,
) -> Trace:
    """``openb`` or the path of a Kueue generator YAML (``--jobs`` then keeps the first M)."""
    if source == "openb":
        return openb(shape, jobs=jobs, seed=seed, runtime=runtime)
    path = Path(source)
    config = yaml.safe_load(path.read_text())
    if not isinstance(config, dict):
        raise TraceError(f"{path}: expected a Kueue generator config (a mapping)")
    trace = kueue_generator(config)
    gangs = trace.gangs if jobs is None else trace.gangs[:jobs]
    return Trace(gangs, trace.teams, f"Kueue generator YAML ({path})")


# -- batch/v1 Jobs ----------------------------------------------------------------------


def kwok_delay(seconds: float) -> str:
    """A Go duration kwok reads from the completion-delay annotation."""
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def job_manifest(gang: Gang, *, queue_label: str | None) -> dict[str, Any]:
    """The Job every system gets; only the queue label differs.

    With a queue label (the queueing systems) the Job is created suspended: the system
    releases it.  Without (no queue) it starts at once and kube-scheduler places pods one
    by one as they come.
    """
    labels = {queue_label: QUEUE_NAME} if queue_label else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": gang.name, "namespace": gang.namespace, "labels": labels},
        "spec": {
            "suspend": queue_label is not None,
            "parallelism": gang.pods,
            "completions": gang.pods,
            "completionMode": "Indexed",
            "backoffLimit": 3,
            "template": {
                "metadata": {
                    "annotations": {
                        KWOK_DELAY: kwok_delay(gang.runtime_seconds),
                        EXPECTED_RUNTIME: str(round(gang.runtime_seconds)),
                    }
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "worker",
                            "image": "bench-e2e/worker:none",  # kwok runs nothing
                            "resources": {
                                "limits": {gang.resource: str(gang.per_pod)},
                                "requests": {gang.resource: str(gang.per_pod)},
                            },
                        }
                    ],
                },
            },
        },
    }
