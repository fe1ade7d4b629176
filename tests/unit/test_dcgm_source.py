"""The controller's DCGM reader: what it publishes on which Node, and what it tells the planner.

The reader gets recorded scrapes and a gateway that keeps Nodes in memory;
its publisher and trackers are the real ones.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from queue_controller.controller.dcgmsource import DcgmSource
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.state import ClusterState
from queue_controller.gpuhealth.dcgm import GpuSample
from queue_controller.gpuhealth.dcgmhealth import DcgmHealth
from queue_controller.gpuhealth.idle import IdleTracker
from queue_controller.gpuhealth.scrape import Scrape
from queue_controller.kube import gateway as gw
from queue_controller.kube import nodehealth
from queue_controller.kube.gangs import GangView
from queue_controller.kube.healthwriter import NodeHealthPublisher
from queue_controller.kube.kinds import QUEUE_LABEL as QUEUE
from tests.views import seen

T0 = 1_800_000_000.0


class Nodes:
    """The two gateway calls the publisher makes, on Nodes held in memory."""

    def __init__(self, *names: str) -> None:
        self.nodes = {
            n: {"metadata": {"name": n, "annotations": {}}, "spec": {}, "status": {}} for n in names
        }
        self.fail_next = False

    def patch(
        self, kind: gw.Resource, namespace: str, name: str, patch: dict[str, Any], **options: Any
    ) -> dict[str, Any]:
        if self.fail_next:
            self.fail_next = False
            raise gw.GatewayError(500, "etcd is down")
        node = self.nodes[name]
        if options.get("subresource") == "status":
            node["status"]["conditions"] = copy.deepcopy(patch["status"]["conditions"])
        else:
            node["metadata"]["annotations"].update(patch["metadata"]["annotations"])
        return node

    def condition(self, name: str) -> dict[str, Any] | None:
        return nodehealth.condition(self.nodes[name])  # type: ignore[return-value]


def sample(host: str, gpu: int, xid: int = 0, **extra: Any) -> GpuSample:
    return GpuSample(host=host, gpu=gpu, uuid=f"GPU-{host}-{gpu}", xid=xid, **extra)


class Feed:
    def __init__(self) -> None:
        self.scrape = Scrape(samples=[], errors=[])

    def __call__(self, urls: tuple[str, ...]) -> Scrape:
        return self.scrape

    def show(self, *samples: GpuSample, errors: tuple[str, ...] = ()) -> None:
        self.scrape = Scrape(samples=list(samples), errors=list(errors))


def source(gateway: Nodes, feed: Feed, metrics: Metrics | None = None) -> DcgmSource:
    return DcgmSource(
        urls=("http://dcgm/metrics",),
        publisher=NodeHealthPublisher(gateway=gateway, source="dcgm"),  # type: ignore[arg-type]
        health=DcgmHealth(clear_seconds=60),
        idle=IdleTracker(threshold=0.05, window_seconds=300),
        metrics=metrics or Metrics(),
        clock=lambda: T0,
        interval_seconds=30,
        read=feed,
    )


def test_each_known_node_gets_its_report_and_unknown_hosts_are_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nodes, feed = Nodes("n1", "n2"), Feed()
    reader = source(nodes, feed)
    feed.show(*(sample("n1", g) for g in range(8)), sample("n2", 0, xid=79), sample("ghost", 0))
    reader.poll(nodes.nodes, T0)
    # The very first read publishes the fault (loading a node's state must not wipe it).
    sick = nodes.condition("n2")
    assert sick is not None
    assert (sick["status"], sick["reason"]) == ("False", "XidCriticalError")
    reader.poll(nodes.nodes, T0 + 30)
    assert nodes.condition("n1")["status"] == "True"  # type: ignore[index]
    assert [r.message for r in caplog.records].count(
        "DCGM reports host 'ghost', which is no Node: ignored"
    ) == 1


def test_a_new_leader_keeps_published_faults_and_an_api_error_is_not_fatal() -> None:
    nodes, feed = Nodes("n1"), Feed()
    first = source(nodes, feed)
    feed.show(sample("n1", 3, xid=79))
    first.poll(nodes.nodes, T0)
    # The GPU was reset while no leader read DCGM; the new one still trusts the report
    # until the clear period has passed with the gauge at 0.
    second = source(nodes, feed)
    feed.show(sample("n1", 3, xid=0))
    second.poll(nodes.nodes, T0 + 10)
    annotation = json.loads(nodes.nodes["n1"]["metadata"]["annotations"][nodehealth.ANNOTATION])
    assert [g["index"] for g in annotation["unhealthy"]] == [3]
    assert nodes.condition("n1")["status"] == "False"  # type: ignore[index]
    nodes.fail_next = True
    second.poll(nodes.nodes, T0 + 90)  # the write fails: logged, tried again next time
    assert nodes.condition("n1")["status"] == "False"  # type: ignore[index]
    second.poll(nodes.nodes, T0 + 120)
    assert nodes.condition("n1")["status"] == "True"  # type: ignore[index]


def test_an_operator_reset_acknowledges_the_xid_on_the_gauge() -> None:
    nodes, feed = Nodes("n1"), Feed()
    reader = source(nodes, feed)
    feed.show(sample("n1", 5, xid=48))
    reader.poll(nodes.nodes, T0)
    nodes.nodes["n1"]["metadata"]["annotations"][nodehealth.RESET_ANNOTATION] = "fixed"
    reader.poll(nodes.nodes, T0 + 1)
    assert nodes.condition("n1")["status"] == "True"  # type: ignore[index]
    annotation = json.loads(nodes.nodes["n1"]["metadata"]["annotations"][nodehealth.ANNOTATION])
    assert annotation["resetSeen"] == "fixed"
    assert annotation["acknowledgedXids"] == {"5": 48}
    feed.show(sample("n1", 5, xid=79))  # a different XID counts again
    reader.poll(nodes.nodes, T0 + 2)
    assert nodes.condition("n1")["status"] == "False"  # type: ignore[index]


def test_unreadable_targets_are_counted_and_named_once(caplog: pytest.LogCaptureFixture) -> None:
    nodes, feed, metrics = Nodes("n1"), Feed(), Metrics()
    reader = source(nodes, feed, metrics)
    feed.show(errors=("http://dcgm/metrics: connection refused",))
    reader.poll(nodes.nodes, T0)
    reader.poll(nodes.nodes, T0 + 30)
    assert metrics.dcgm_targets_down._value.get() == 1
    assert sum("connection refused" in r.message for r in caplog.records) == 1


def gang(phase: str, *pods: str) -> GangView:
    """A gang named g with ``pods``, through the translation the controller makes."""
    state = ClusterState()
    state.upsert(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "g", "namespace": "ns", "uid": "u", "labels": {QUEUE: "q"}},
            "spec": {"suspend": False, "template": {"spec": {"containers": [{"name": "m"}]}}},
        }
    )
    state.upsert(
        {
            "apiVersion": "queue-controller.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {
                "name": "g",
                "namespace": "ns",
                "ownerReferences": [{"kind": "Job", "name": "g", "uid": "u"}],
            },
            "spec": {"queue": "q", "minMember": len(pods)},
            "status": {"phase": phase},
        }
    )
    for name in pods:
        state.upsert(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": "ns",
                    "ownerReferences": [{"kind": "Job", "name": "g", "controller": True}],
                },
                "spec": {"containers": [{"name": "m"}]},
                "status": {"phase": "Running"},
            }
        )
    (view,) = seen(state, T0).gangs
    return view


def test_running_gangs_whose_every_gpu_pod_idles_for_the_window_are_reported() -> None:
    nodes, feed = Nodes("n1"), Feed()
    reader = source(nodes, feed)
    quiet = (("ns/a", 0.01),)
    busy = (("ns/b", 0.9),)
    feed.show(sample("n1", 0, pod_activity=quiet), sample("n1", 1, pod_activity=busy))
    reader.poll(nodes.nodes, T0)
    reader.poll(nodes.nodes, T0 + 301)
    gangs = [gang("Running", "a"), gang("Running", "a", "b"), gang("Admitted", "a")]
    assert reader.idle_gangs(gangs, now=T0 + 301) == {"Job/ns/g": T0}
    assert reader.idle_gangs(gangs[1:], now=T0 + 301) == {}
