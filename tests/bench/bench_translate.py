"""What the controller's one translation per cycle costs, against the admission core.

    python -m tests.bench.bench_translate           # 100, 1,000, 5,000 nodes (make bench-translate)
    python -m tests.bench.bench_translate --quick   # 1,000 nodes only

Each cycle the controller translates every object its watches hold, once, into
the core's snapshot and one typed view per gang (kube/snapshot.translate), then
runs the core (core.schedule) and plans the writes (controller/lifecycle).
For each size this builds the raw objects a cluster of that many 8-GPU nodes
holds: every node, four running gangs' pods a node (bound, owned by their
Jobs, each Job with its PodGroup), pending Jobs (2 a node) and plain pod groups
(1 for every 4 nodes, 4 gated members each), and times in CPU seconds, best of
``--repeat``:

* ``translate``: raw objects -> Snapshot and gang views;
* ``schedule``: the admission cycle over that snapshot;
* ``plan``: the lifecycle's actions from the views and the decisions;
* ``again``: the translation at the next cycle, nothing changed, with the memo the
  controller keeps from cycle to cycle (kube/memo.py);
* ``again, 1% changed``: the same with one object in a hundred at a new version.

The ratios say how much the controller adds to the core's own cycle by reading the
raw objects, at the first cycle (translate / schedule) and at the cycles after it
((again + schedule + plan) / schedule: the full cycle against the core's own).
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.loop import gc_paused
from queue_controller.core import schedule
from queue_controller.kube.memo import TranslationMemo
from queue_controller.kube.snapshot import Located, translate
from tests.bench.timing import best_cpu_seconds

T = TypeVar("T")
QUEUE_LABEL = "queue-controller.io/queue"
GPU = "nvidia.com/gpu"
STAMP = "2026-12-01T00:00:00Z"
NOW = 1_800_000_000.0


def _container(gpus: int) -> dict[str, Any]:
    return {
        "name": "main",
        "resources": {
            "requests": {"cpu": "4", "memory": "32Gi"},
            "limits": {"memory": "32Gi", GPU: str(gpus)},
        },
    }


def _job(name: str, pods: int, gpus: int, *, suspend: bool) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "resourceVersion": "10",
            "creationTimestamp": STAMP,
            "labels": {QUEUE_LABEL: "train"},
        },
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": suspend,
            "template": {"spec": {"containers": [_container(gpus)]}},
        },
        "status": {},
    }


def _group(name: str, pods: int, phase: str, placement: dict[str, int]) -> dict[str, Any]:
    return {
        "apiVersion": "queue-controller.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": "team",
            "resourceVersion": "11",
            "ownerReferences": [{"kind": "Job", "name": name, "uid": f"uid-{name}"}],
        },
        "spec": {"queue": "train", "minMember": pods},
        "status": {"phase": phase, "placement": placement, "running": pods},
    }


def _pod(name: str, owner: str, node: str, gpus: int, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "resourceVersion": "12",
        "creationTimestamp": STAMP,
        "ownerReferences": [
            {"kind": "Job", "name": owner, "uid": f"uid-{owner}", "controller": True}
        ],
    }
    meta.update(extra.pop("metadata", {}))
    spec: dict[str, Any] = {"containers": [_container(gpus)], **extra}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def objects(nodes: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {
            "apiVersion": "queue-controller.io/v1alpha1",
            "kind": "TeamQuota",
            "metadata": {"name": "team", "resourceVersion": "1"},
            "spec": {"resources": {GPU: {"nominal": nodes * 8}}},
        },
        {
            "apiVersion": "queue-controller.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": "train", "namespace": "team", "resourceVersion": "2"},
            "spec": {"teamQuota": "team"},
        },
    ]
    for n in range(nodes):
        node = f"gpu-{n:05d}"
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node,
                    "resourceVersion": "1",
                    "labels": {"kubernetes.io/hostname": node},
                },
                "status": {
                    "allocatable": {"cpu": "96", "memory": "1000Gi", "pods": "110", GPU: "8"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
        for g in range(4):  # four running 1-pod, 2-GPU gangs a node
            name = f"run-{n}-{g}"
            out += [
                _job(name, 1, 2, suspend=False),
                _group(name, 1, "Running", {node: 1}),
                _pod(f"{name}-0", name, node, 2),
            ]
        for g in range(2):  # two pending 2 x 8-GPU gangs a node
            out.append(_job(f"wait-{n}-{g}", 2, 8, suspend=True))
        if n % 4 == 0:  # a plain pod group of 4 gated members for every 4 nodes
            for m in range(4):
                member = _pod(
                    f"ring-{n}-{m}",
                    "",
                    "",
                    1,
                    schedulingGates=[{"name": "queue-controller.io/admission"}],
                    metadata={
                        "ownerReferences": [],
                        "labels": {
                            QUEUE_LABEL: "train",
                            "queue-controller.io/pod-group": f"ring-{n}",
                        },
                        "annotations": {"queue-controller.io/pod-group-total-count": "4"},
                    },
                )
                out.append(member)
    return out


def _changed_cycle(raw: list[dict[str, Any]], memo: TranslationMemo, repeat: int) -> float:
    """Best CPU seconds of a memoized translation after 1% of the objects changed (each
    run changes a fresh 1%, as a live cluster's next cycle would)."""
    best = float("inf")
    step = 100
    changed = list(raw)  # changes add up: each run's 1% is new to the memo
    for run in range(repeat):
        for index in range(run % step, len(changed), step):
            obj = copy.deepcopy(changed[index])
            obj["metadata"]["resourceVersion"] = f"{1000 + run}"
            changed[index] = obj
        items = [Located(None, o) for o in changed]
        start = time.process_time()
        translate(items, now=NOW, skip=lambda e: None, memo=memo)
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 nodes only")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    sizes = [1_000] if args.quick else [100, 1_000, 5_000]
    table = Table(title="one controller cycle: translation against the core (CPU s, best of runs)")
    for column in (
        "nodes",
        "objects",
        "gangs",
        "translate",
        "schedule",
        "plan",
        "again",
        "again, 1% changed",
        "translate/schedule",
        "cycle/schedule after",
    ):
        table.add_column(column, justify="right")
    for nodes in sizes:
        with gc_paused():  # as the controller's cycle runs (loop.gc_paused)
            table.add_row(*_row(nodes, args.repeat))
    Console().print(table)


def _row(nodes: int, repeat: int) -> list[str]:
    raw = objects(nodes)
    items = [Located(None, o) for o in raw]

    def fresh() -> Any:
        return translate(items, now=NOW, skip=lambda e: None)

    t_translate, seen = best_cpu_seconds(fresh, repeat)
    t_schedule, result = best_cpu_seconds(lambda: schedule(seen.snapshot), repeat)
    t_plan, _ = best_cpu_seconds(lambda: Planner(300).plan(seen, result, now=NOW), repeat)
    memo = TranslationMemo()
    translate(items, now=NOW, skip=lambda e: None, memo=memo)
    t_again, _ = best_cpu_seconds(
        lambda: translate(items, now=NOW, skip=lambda e: None, memo=memo), repeat
    )
    t_changed = _changed_cycle(raw, memo, repeat)
    return [
        f"{nodes:,}",
        f"{len(raw):,}",
        f"{len(seen.gangs):,}",
        f"{t_translate:.2f}",
        f"{t_schedule:.2f}",
        f"{t_plan:.2f}",
        f"{t_again:.2f}",
        f"{t_changed:.2f}",
        f"{t_translate / t_schedule:.2f}x",
        f"{(t_changed + t_schedule + t_plan) / t_schedule:.2f}x",
    ]


if __name__ == "__main__":
    main()
