"""Reservation with backfill on the real control plane (docs/reservation.md).

Four 8-GPU nodes (h100-0..3) are taken by a stream of 1-node gangs, each annotated with
its expected runtime and completed by kwok a little before it.  A 4-node gang (4
members of 8 GPUs) behind them waits NoNodeFit, then, its Queue's ``afterSeconds``
past, gets a reservation: the 4 nodes, named, and the start the runtimes promise.  A
short gang that ends a margin before that start backfills onto a reserved node the
moment one frees (Admitted, a ``Backfilled`` event); a long one does not (NoNodeFit,
told which reservation holds the nodes).  The big gang is admitted by its reserved
start, within a cycle tick.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from queue_controller.api.v1alpha1 import GROUP, VERSION
from tests.cluster.conftest import Cluster
from tests.cluster.workloads import Objects, create, eventually, h100, job

pytestmark = pytest.mark.cluster

RUNTIME = "queue-controller.io/expected-runtime-seconds"
NODES = h100(0, 1, 2, 3)
TICK = 1.0  # the test controller's --tick
MARGIN = 5


def seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def gang(name: str, *, pods: int, nodes: list[str], runtime: int, runs_for: str) -> dict[str, Any]:
    body = job(name, queue="q", gpus=8, pods=pods, nodes=nodes, runs_for=runs_for)
    body["spec"]["template"]["metadata"]["annotations"][RUNTIME] = str(runtime)
    return body


def events(cluster: Cluster, namespace: str, reason: str, name: str) -> list[str]:
    listed = cluster.core.list_namespaced_event(namespace, field_selector=f"reason={reason}")
    return [
        e.message or ""
        for e in listed.items
        if e.involved_object.kind == "PodGroup" and e.involved_object.name == name
    ]


def test_a_starving_big_gang_is_reserved_for_and_backfilled_around(
    cluster: Cluster, namespace: str, objects: Objects
) -> None:
    team = objects.team_quota(64)
    objects.queue("q", team)
    objects.api.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "queues",
        "q",
        {"spec": {"reservation": {"afterSeconds": 3, "backfillMarginSeconds": MARGIN}}},
    )
    # The stream: one gang per node, ending (by kwok) a few seconds before its estimate.
    runs = {0: 20, 1: 30, 2: 40, 3: 55}
    for index, runs_for in runs.items():
        create(
            cluster,
            namespace,
            gang(
                f"small-{index}",
                pods=1,
                nodes=h100(index),
                runtime=runs_for + 5,
                runs_for=f"{runs_for}s",
            ),
        )
    for index in runs:
        eventually(
            lambda i=index: objects.phase(f"small-{i}", "Admitted", "Running"),
            what=f"small-{index} admitted",
        )
    create(cluster, namespace, gang("big", pods=4, nodes=NODES, runtime=60, runs_for="1h"))
    reserved = eventually(
        # The PodGroup is created before its status is written: read the reason safely.
        lambda: objects.reason("big") == "Reserved" and objects.pod_group("big"),
        timeout=60,
        what="the big gang reserved",
    )
    status = reserved["status"]
    assert status["phase"] == "Pending"
    assert status["reservedPlacement"] == {"main": dict.fromkeys(NODES, 1)}
    start = seconds(status["reservedStart"])
    last = seconds(objects.pod_group("small-3")["status"]["admittedAt"])  # type: ignore[index]
    assert start == pytest.approx(last + 60, abs=1)
    assert status["message"].startswith("reserved 4 nodes (")
    assert status["runtimeEstimate"]["source"] == "Annotation"
    assert events(cluster, namespace, "Reserved", "big")

    # A short gang ends a margin before the start: it may run on a reserved node.
    create(
        cluster,
        namespace,
        gang("short", pods=1, nodes=NODES, runtime=10, runs_for="8s"),
    )
    # A long one would still run at the start: it may not.
    create(cluster, namespace, gang("long", pods=1, nodes=NODES, runtime=3600, runs_for="1h"))
    short = eventually(
        lambda: objects.phase("short", "Admitted", "Running", "Finished"),
        timeout=90,
        what="the short gang backfilled",
    )
    assert seconds(short["status"]["admittedAt"]) + 10 + MARGIN <= start
    backfilled = eventually(
        lambda: events(cluster, namespace, "Backfilled", "short") or None,
        what="the Backfilled event",
    )
    assert f"{namespace}/big" in backfilled[0]
    long = eventually(
        lambda: objects.reason("long") == "NoNodeFit" and objects.pod_group("long"),
        what="the long gang refused",
    )
    assert f"reserved for {namespace}/big" in long["status"]["message"]

    # The big gang starts at its reserved time (or before, if the room frees sooner).
    admitted = eventually(
        lambda: objects.phase("big", "Admitted", "Running"),
        timeout=start - datetime.now().timestamp() + 60,
        what="the big gang admitted",
    )
    # Within a tick (admittedAt is written to the second: one more for its rounding).
    assert seconds(admitted["status"]["admittedAt"]) <= start + TICK + 1
    assert "reservedPlacement" not in admitted["status"]
    assert sorted(admitted["status"]["placement"]) == NODES
    still = objects.pod_group("long")
    assert still is not None
    assert still["status"]["phase"] == "Pending"
