"""Reclaim on the real control plane: a lender gets its lent nominal back by preemption.

The borrower's gangs hold the lender's GPUs; the lender's gang, within its nominal,
evicts exactly the gangs on the node it needs, holds the room while they go, binds
there, and the borrower's gangs are requeued at once and come back when it is done.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import (
    GPU,
    GROUP,
    VERSION,
    Objects,
    create,
    eventually,
    h100,
    job,
    running_on,
)

pytestmark = pytest.mark.cluster


def team_quota(objects: Objects, name: str, cohort: str, nominal: int, **spec: Any) -> str:
    objects.api.create_cluster_custom_object(
        GROUP,
        VERSION,
        "teamquotas",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TeamQuota",
            "metadata": {"name": name},
            "spec": {"cohort": cohort, "resources": {GPU: {"nominal": nominal}}, **spec},
        },
    )
    objects.quotas.append(name)
    return name


def condition(group: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in group["status"].get("conditions", []) if c["type"] == kind), None)


def test_a_lender_reclaims_its_nominal_from_a_borrower(
    cluster: Cluster, namespace: str, objects: Objects, controller: ControllerProcess
) -> None:
    cohort = f"c-{secrets.token_hex(3)}"
    lender = team_quota(
        objects,
        f"lender-{secrets.token_hex(3)}",
        cohort,
        8,
        preemption={"reclaimWithinCohort": "Any"},
    )
    borrower = team_quota(objects, f"borrower-{secrets.token_hex(3)}", cohort, 0)
    objects.queue("own", lender)
    objects.queue("more", borrower)
    node = h100(5)
    for name in ("b-old", "b-new"):
        create(cluster, namespace, job(name, queue="more", gpus=4, pods=1, nodes=node))
        eventually(lambda name=name: objects.phase(name, "Running"), what=f"{name} borrowing")
    create(
        cluster,
        namespace,
        job("lend", queue="own", gpus=8, pods=1, nodes=node, runs_for="10s"),
    )
    # The lender's gang preempts both (it needs the whole node), holds the room,
    # and runs there once they are gone.
    running = eventually(
        lambda: objects.phase("lend", "Running"), timeout=90, what="the lender's gang running"
    )
    assert running["status"]["placement"] == {node[0]: 1}
    assert not running["status"].get("nominatedPlacement"), "the held room became its placement"
    assert dict(running_on(cluster, namespace, "lend")) == {node[0]: 1}
    for name in ("b-old", "b-new"):
        group = objects.pod_group(name)
        assert group is not None
        evicted = condition(group, "Evicted")
        assert evicted is not None
        assert evicted["reason"] == "Preempted"
        assert f"preempted by Job {namespace}/lend (ReclaimWithinCohort)" in evicted["message"]
        # No fault of the borrower's: its requeue count is not raised.
        assert group["status"].get("requeueCount", 0) == 0
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "involvedObject.name=lend"
    )
    assert "Preempting" in events
    assert (
        controller.metric(
            "queue_controller_preemptions_total",
            queue=f"{namespace}/more",
            reason="ReclaimWithinCohort",
        )
        == 2
    )
    # When the lender's gang is done, the borrower's gangs are readmitted.
    eventually(lambda: objects.phase("lend", "Finished"), timeout=60, what="the lender done")
    for name in ("b-old", "b-new"):
        eventually(
            lambda name=name: objects.phase(name, "Running"),
            timeout=60,
            what=f"{name} readmitted",
        )
