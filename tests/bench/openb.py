"""The Alibaba ``openb`` GPU-cluster trace as an admission snapshot.

Source: Alibaba clusterdata ``cluster-trace-gpu-v2023`` (CC BY 4.0), from
Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent", USENIX ATC '23.

Nodes come from ``openb_node_list_gpu_node.csv`` (1,213 GPU nodes).  Every
task of ``openb_pod_list_default.csv`` that asks for whole GPUs becomes a
single-pod gang (the trace has no gang column); a ``gpu_spec`` such as
``V100M16|V100M32`` becomes required node affinity on the GPU model.  Tasks
that share a fraction of one GPU (``gpu_milli < 1000``) have no whole-device
equivalent under the device plugin and are counted, not scheduled.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from queue_controller.core import (
    Container,
    Node,
    NodeSelectorTerm,
    PodTemplate,
    Queue,
    SelectorRequirement,
    Snapshot,
    TeamQuota,
    Workload,
    one_pod_set,
)

GPU = "nvidia.com/gpu"
MODEL_LABEL = "openb.alibaba.com/gpu-model"
DEFAULT_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "openb"


@dataclass(frozen=True)
class Trace:
    snapshot: Snapshot
    gpu_tasks: int
    shared_gpu_tasks: int


def _nodes(path: Path) -> list[Node]:
    nodes = []
    with path.open() as handle:
        for row in csv.DictReader(handle):
            nodes.append(
                Node(
                    name=row["sn"],
                    allocatable={
                        "cpu": int(row["cpu_milli"]),
                        "memory": int(row["memory_mib"]) * 2**20 * 1000,
                        GPU: int(row["gpu"]) * 1000,
                        "pods": 110_000,
                    },
                    labels={MODEL_LABEL: row["model"], "kubernetes.io/hostname": row["sn"]},
                    conditions={"Ready": "True"},
                )
            )
    return nodes


def _gangs(path: Path) -> tuple[list[Workload], int, int]:
    gangs: list[Workload] = []
    shared = 0
    with path.open() as handle:
        for row in csv.DictReader(handle):
            gpus = int(row["num_gpu"])
            if gpus == 0:
                continue
            if int(row["gpu_milli"]) < 1000:
                shared += 1
                continue
            spec = row.get("gpu_spec") or ""
            affinity = (
                (
                    NodeSelectorTerm(
                        match_expressions=(
                            SelectorRequirement(MODEL_LABEL, "In", tuple(spec.split("|"))),
                        )
                    ),
                )
                if spec
                else None
            )
            gangs.append(
                Workload(
                    kind="Job",
                    namespace="openb",
                    name=row["name"],
                    queue="trace",
                    pod_sets=one_pod_set(
                        PodTemplate(
                            containers=(
                                Container(
                                    "task",
                                    requests={
                                        "cpu": f"{row['cpu_milli']}m",
                                        "memory": f"{row['memory_mib']}Mi",
                                    },
                                    limits={GPU: gpus},
                                ),
                            ),
                            required_affinity=affinity,
                        ),
                        count=1,
                    ),
                    created=float(row["creation_time"]),
                )
            )
    return gangs, len(gangs), shared


def load(directory: Path = DEFAULT_DIR) -> Trace | None:
    nodes_csv = directory / "openb_node_list_gpu_node.csv"
    pods_csv = directory / "openb_pod_list_default.csv"
    if not nodes_csv.exists() or not pods_csv.exists():
        return None
    gangs, whole, shared = _gangs(pods_csv)
    snapshot = Snapshot(
        nodes=tuple(_nodes(nodes_csv)),
        workloads=tuple(gangs),
        queues=(Queue("openb", "trace", "trace"),),
        quotas=(TeamQuota("trace", {}),),  # no quota: this run measures placement
    )
    return Trace(snapshot, whole, shared)
