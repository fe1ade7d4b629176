"""GPU health end to end on the real local control plane.

The session's controller reads a fake dcgm-exporter (tests/cluster/conftest.py)
every second.  Here a GPU of a MIG node raises XID 79 there, and:

1. the node is marked unhealthy (``kubectl describe node`` shows GPUHealthy);
2. the running gang on it is evicted whole with GPUUnhealthy and requeued;
3. it is admitted again elsewhere, while a gang that needs the whole node waits;
4. ``plan`` over a dump of the cluster at that moment decides the same;
5. when the XID clears, the node recovers and admission uses it again.

The tests use the A100 MIG and L4 nodes, which the other controller tests leave alone.
The last one runs the node agent's loop on a fake NVML against the real API
server: what ``kubectl describe node`` shows is what the agent set.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from queue_controller.agent.loop import NodeAgent
from queue_controller.cli import cli
from queue_controller.gpuhealth.nvml import open_session
from queue_controller.gpuhealth.readings import Limits
from queue_controller.kube import nodehealth
from queue_controller.kube.gateway import Gateway
from queue_controller.kube.healthwriter import NodeHealthPublisher
from tests.cluster.conftest import Cluster, FakeDcgmExporter
from tests.cluster.controller_harness import ControllerProcess
from tests.cluster.workloads import Objects, create, eventually, job, pods_of, running_on
from tests.fakes.fake_pynvml import FakeNvml

pytestmark = pytest.mark.cluster
MIG = "nvidia.com/mig-3g.40gb"  # one per GPU on these nodes: 8 per node
NODES = ["a100-mig-0002", "a100-mig-0003"]


def exposition(
    xid_by_host: dict[str, dict[int, int]], activity: dict[tuple[str, str], float] | None = None
) -> str:
    """dcgm-exporter's text for both nodes' 8 GPUs, with the given XIDs.

    ``activity``: (namespace, pod) -> GR_ENGINE_ACTIVE, each pod on GPU 0 of
    the first node (the exporter's pod mapping).
    """
    lines = [
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
    ]
    for host in NODES:
        for gpu in range(8):
            xid = xid_by_host.get(host, {}).get(gpu, 0)
            labels = (
                f'gpu="{gpu}",UUID="GPU-{host}-{gpu}",device="nvidia{gpu}",'
                f'modelName="NVIDIA A100-SXM4-80GB",Hostname="{host}"'
            )
            lines.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xid}")
    lines += [
        "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.",
        "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge",
    ]
    for (namespace, pod), value in (activity or {}).items():
        labels = (
            f'gpu="0",UUID="GPU-{NODES[0]}-0",Hostname="{NODES[0]}",'
            f'container="train",namespace="{namespace}",pod="{pod}"'
        )
        lines.append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


def mig_queue(objects: Objects, name: str) -> None:
    """A Queue on a TeamQuota of 16 ``3g.40gb`` instances: the two nodes' worth."""
    team = objects.team_quota(0)
    objects.api.patch_cluster_custom_object(
        "queue-controller.io",
        "v1alpha1",
        "teamquotas",
        team,
        {"spec": {"resources": {MIG: {"nominal": 16}}}},
    )
    objects.queue(name, team)


def mig_job(name: str, *, queue: str) -> dict[str, Any]:
    body = job(name, queue=queue, gpus=8, pods=1, nodes=NODES)
    (container,) = body["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"limits": {MIG: "8"}}
    return body


def condition(cluster: Cluster, node: str) -> dict[str, Any] | None:
    obj = json.loads(cluster.kubectl("get", "node", node, "-o", "json"))
    return nodehealth.condition(obj)  # type: ignore[return-value]


@pytest.fixture
def healthy_again(cluster: Cluster, dcgm: FakeDcgmExporter) -> Iterator[None]:
    """Whatever happens, the nodes end healthy, for the tests that come after."""
    dcgm.body = exposition({})
    yield
    dcgm.body = exposition({})
    for node in NODES:
        eventually(
            lambda n=node: (c := condition(cluster, n)) is None or c.get("status") == "True",
            timeout=30,
            what=f"{node} healthy again",
        )


def test_a_gpu_fault_from_dcgm_evicts_the_gang_on_it_and_admission_avoids_it_until_it_clears(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    dcgm: FakeDcgmExporter,
    healthy_again: None,
    tmp_path: Path,
) -> None:
    mig_queue(objects, "train")
    create(cluster, namespace, mig_job("first", queue="train"))
    placed = eventually(
        lambda: (c := running_on(cluster, namespace, "first")) and sum(c.values()) == 1 and c,
        what="the first gang running",
    )
    (sick,) = placed
    (other,) = [n for n in NODES if n != sick]

    # 1. XID 79 (fallen off the bus) on GPU 3 of the node the gang runs on.
    dcgm.body = exposition({sick: {3: 79}})
    state = eventually(
        lambda: (c := condition(cluster, sick)) and c.get("status") == "False" and c,
        what="the node marked unhealthy",
    )
    assert state["reason"] == "XidCriticalError"
    assert f"GPU 3 (GPU-{sick}-3): XID 79" in state["message"]
    described = cluster.kubectl("describe", "node", sick)
    assert "GPUHealthy" in described
    assert "XidCriticalError" in described

    # 2. The gang on it is evicted whole, with the reason, and requeued.
    def evicted_condition() -> dict[str, Any] | None:
        group = objects.pod_group("first") or {}
        return next(
            (
                c
                for c in group.get("status", {}).get("conditions", [])
                if c["type"] == "Evicted" and c["reason"] == "GPUUnhealthy"
            ),
            None,
        )

    # The condition, not status.message: once requeued, that says when it is due again.
    evicted = eventually(evicted_condition, what="the gang evicted with GPUUnhealthy")
    assert f"GPU 3 (GPU-{sick}-3) has XID 79" in evicted["message"]
    eventually(
        lambda: (
            {"Evicted", "Requeued"}
            <= {e.reason for e in cluster.core.list_namespaced_event(namespace).items}
        ),
        what="the Evicted and Requeued events",
    )
    assert (
        controller.metric(
            "queue_controller_evicted_gangs_total",
            queue=f"{namespace}/train",
            reason="GPUUnhealthy",
        )
        >= 1
    )

    # 3. Requeued, it is admitted on the healthy node; a gang that needs all
    #    eight instances of a node cannot use the sick one (7 left) and waits.
    eventually(
        lambda: running_on(cluster, namespace, "first") == {other: 1},
        timeout=60,
        what="the gang running again, elsewhere",
    )
    create(cluster, namespace, mig_job("second", queue="train"))
    waiting = eventually(
        lambda: (
            (g := objects.pod_group("second"))
            and g.get("status", {}).get("reason") == "NoNodeFit"
            and g
        ),
        what="the second gang pending",
    )
    assert f"Insufficient {MIG}" in waiting["status"]["message"]
    # Gauges describe the state a cycle started from: they may trail by one cycle.
    eventually(
        lambda: controller.metric("queue_controller_unhealthy_gpus", node=sick) == 1,
        what="the unhealthy_gpus gauge",
    )

    # 4. plan, over a dump of this moment, decides the same.
    dump = tmp_path / "dump.yaml"
    dump.write_text(
        cluster.kubectl(
            "get",
            "nodes,pods,jobs,priorityclasses,teamquotas,queues,podgroups",
            "-A",
            "-o",
            "yaml",
        )
    )
    result = CliRunner().invoke(cli, ["plan", "-f", str(dump), "-o", "json"])
    assert result.exit_code == 0, result.output
    decisions = {d["workload"]: d for d in json.loads(result.stdout)["decisions"]}
    second = decisions[f"{namespace}/second"]
    assert second["decision"] == "Pending"
    assert second["reason"] == "NoNodeFit"
    assert second["message"] == waiting["status"]["message"]

    # 5. The GPU is reset (XID back to 0): after the clear period the node is
    #    healthy again and the waiting gang is admitted on it.
    dcgm.body = exposition({})
    eventually(
        lambda: (c := condition(cluster, sick)) and c.get("status") == "True",
        what="the node healthy again",
    )
    eventually(
        lambda: running_on(cluster, namespace, "second") == {sick: 1},
        timeout=60,
        what="the waiting gang admitted on the recovered node",
    )


def test_an_operator_reset_clears_a_fault_at_once(
    cluster: Cluster, controller: ControllerProcess, dcgm: FakeDcgmExporter, healthy_again: None
) -> None:
    node = NODES[0]
    dcgm.body = exposition({node: {5: 48}})  # a double-bit ECC error, still on the gauge
    eventually(
        lambda: (c := condition(cluster, node)) and c.get("status") == "False",
        what="the node marked unhealthy",
    )
    cluster.kubectl("annotate", "node", node, f"{nodehealth.RESET_ANNOTATION}=repaired-1")
    eventually(
        lambda: (c := condition(cluster, node)) and c.get("status") == "True",
        what="the reset to take effect while the gauge still shows XID 48",
    )
    cluster.kubectl("annotate", "node", node, f"{nodehealth.RESET_ANNOTATION}-")


def test_a_gang_whose_gpus_idle_is_flagged_and_evicted_only_where_the_queue_opts_in(
    cluster: Cluster,
    namespace: str,
    objects: Objects,
    controller: ControllerProcess,
    dcgm: FakeDcgmExporter,
    healthy_again: None,
) -> None:
    mig_queue(objects, "flag")
    create(cluster, namespace, mig_job("quiet", queue="flag"))
    (pod,) = eventually(
        lambda: (
            (p := pods_of(cluster, namespace, "quiet")) and p[0].status.phase == "Running" and p
        ),
        what="the gang running",
    )
    dcgm.body = exposition({}, {(namespace, pod.metadata.name): 0.0})

    def idle_condition() -> dict[str, Any] | None:
        group = objects.pod_group("quiet") or {}
        conditions = group.get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == "Idle"), None)

    flagged = eventually(
        lambda: (c := idle_condition()) and c["status"] == "True" and c,
        what="the Idle condition",
    )
    assert flagged["reason"] == "GPUIdle"
    eventually(
        lambda: (
            "GPUIdle" in {e.reason for e in cluster.core.list_namespaced_event(namespace).items}
        ),
        what="the GPUIdle event",
    )
    eventually(
        lambda: (
            controller.metric(
                "queue_controller_flagged_gangs", queue=f"{namespace}/flag", condition="Idle"
            )
            == 1
        ),
        what="the flagged_gangs gauge (it trails the condition by up to one cycle)",
    )
    assert objects.phase("quiet", "Running"), "flagging alone leaves the gang running"

    # Busy again: the flag clears.
    dcgm.body = exposition({}, {(namespace, pod.metadata.name): 0.8})
    cleared = eventually(
        lambda: (c := idle_condition()) and c["status"] == "False" and c,
        what="the Idle condition cleared",
    )
    assert cleared["reason"] == "GPUActive"

    # A queue that opts in evicts the idle gang.
    objects.api.patch_namespaced_custom_object(
        "queue-controller.io",
        "v1alpha1",
        namespace,
        "queues",
        "flag",
        {"spec": {"gpuHealth": {"evictIdle": True}}},
    )
    dcgm.body = exposition({}, {(namespace, pod.metadata.name): 0.01})
    # The event, not status.reason: the gang is requeued within a second or two.
    eventually(
        lambda: any(
            e.reason == "Evicted" and e.message.startswith("Idle:")
            for e in cluster.core.list_namespaced_event(namespace).items
        ),
        what="the idle gang evicted",
    )


def test_the_node_agent_sets_the_condition_kubectl_describe_shows_and_taints_the_node(
    cluster: Cluster,
) -> None:
    """The agent's own loop, on the fake NVML, publishing through the real gateway."""
    node = "l4-0000"
    nvml = FakeNvml(4)
    agent = NodeAgent(
        node_name=node,
        publisher=NodeHealthPublisher(
            gateway=Gateway(cluster.api), source="node-agent", taint=True
        ),
        open_nvml=lambda: open_session(nvml),
        limits=Limits(),
        clear_seconds=600,
    )
    try:
        agent.step()
        described = cluster.kubectl("describe", "node", node)
        assert re.search(r"GPUHealthy\s+True .*AllGPUsHealthy\s+all 4 GPUs healthy", described)

        nvml.xid(1, 79)
        agent.step(agent.session.wait(0) if agent.session else [])
        described = cluster.kubectl("describe", "node", node)
        assert re.search(r"GPUHealthy\s+False .*XidCriticalError", described), described
        assert "XID 79" in described
        assert f"{nodehealth.TAINT_KEY}=true:NoSchedule" in described
        time.sleep(3)  # kwok keeps the node's status up: our condition must survive it
        state = condition(cluster, node)
        assert state is not None
        assert state["status"] == "False"

        cluster.kubectl("annotate", "node", node, f"{nodehealth.RESET_ANNOTATION}=swapped")
        agent.step()
        described = cluster.kubectl("describe", "node", node)
        assert re.search(r"GPUHealthy\s+True .*AllGPUsHealthy", described)
        assert nodehealth.TAINT_KEY not in described
    finally:
        agent.close()
        cluster.kubectl("annotate", "node", node, f"{nodehealth.RESET_ANNOTATION}-")
