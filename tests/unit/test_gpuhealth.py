"""Unhealthy GPUs in admission: what each one takes away, and where gangs go instead."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from queue_controller.core import Reason, Verdict, schedule
from queue_controller.core.model.objects import GpuHealth, Node, UnhealthyGpu
from queue_controller.core.rules.gpuhealth import all_gpus_unhealthy, lost_capacity, unhealthy_note
from queue_controller.core.rules.nodes import exclusion, usable_allocatable
from tests.builders import GPU, gang, gpu_node, snapshot, template

MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"


def sick(node: Node, *indices: int, **kwargs: object) -> Node:
    gpus = tuple(UnhealthyGpu(index=i, xids=(79,)) for i in indices)
    return replace(node, gpu_health=GpuHealth(unhealthy=gpus, **kwargs))  # type: ignore[arg-type]


def with_count(node: Node, count: int) -> Node:
    return replace(node, labels={**node.labels, "nvidia.com/gpu.count": str(count)})


def test_each_unhealthy_whole_gpu_removes_one_device() -> None:
    node = sick(with_count(gpu_node("n", 8), 8), 3)
    assert usable_allocatable(node)[GPU] == 7000
    assert usable_allocatable(sick(with_count(gpu_node("n", 8), 8), 3, 5, 5))[GPU] == 6000


def test_without_a_gpu_count_one_unhealthy_gpu_is_one_device() -> None:
    assert usable_allocatable(sick(gpu_node("n", 8), 0))[GPU] == 7000


def test_a_time_sliced_gpu_takes_all_its_replicas() -> None:
    node = sick(with_count(gpu_node("n", 16), 4), 1)  # 4 GPUs x 4 replicas
    assert usable_allocatable(node)[GPU] == 12000


def test_mig_instances_on_the_unhealthy_parent_go_uniform_layout() -> None:
    node = gpu_node("n", 0, extra={MIG_1G: "16", MIG_3G: "8"})
    node = sick(with_count(node, 4), 2)
    offered = usable_allocatable(node)
    assert (offered[MIG_1G], offered[MIG_3G]) == (12000, 6000)


def test_mig_instances_the_reporter_listed_are_the_ones_removed() -> None:
    node = with_count(gpu_node("n", 0, extra={MIG_1G: "16", MIG_3G: "8"}), 4)
    gpu = UnhealthyGpu(index=2, mig_devices={"1g.10gb": 7})
    node = replace(node, gpu_health=GpuHealth(unhealthy=(gpu,)))
    offered = usable_allocatable(node)
    assert (offered[MIG_1G], offered[MIG_3G]) == (9000, 8000)


def test_single_strategy_mig_instances_are_counted_as_gpus() -> None:
    node = with_count(gpu_node("n", 28), 4)
    node = replace(node, labels={**node.labels, "nvidia.com/mig.strategy": "single"})
    gpu = UnhealthyGpu(index=0, mig_devices={"1g.10gb": 7})
    node = replace(node, gpu_health=GpuHealth(unhealthy=(gpu,)))
    assert usable_allocatable(node)[GPU] == 21000


def test_a_gpu_the_device_plugin_already_dropped_is_not_taken_twice() -> None:
    node = with_count(gpu_node("n", 7), 8)
    node = replace(node, capacity={**node.allocatable, GPU: 8000})
    assert usable_allocatable(sick(node, 3))[GPU] == 7000
    assert usable_allocatable(sick(node, 3, 4))[GPU] == 6000


def test_other_resources_are_untouched() -> None:
    node = sick(with_count(gpu_node("n", 8), 8), 1)
    assert usable_allocatable(node)["cpu"] == node.allocatable["cpu"]


def test_a_fully_unhealthy_node_offers_nothing_and_says_why() -> None:
    node = sick(with_count(gpu_node("n", 2), 2), 0, 1)
    assert all_gpus_unhealthy(node)
    assert usable_allocatable(node)[GPU] == 0
    reason = exclusion(node, template(1))
    assert reason is not None
    assert reason.describe() == "GPUUnhealthy all 2 GPUs"


def test_a_condition_without_a_list_takes_the_whole_node() -> None:
    node = replace(gpu_node("n", 8), gpu_health=GpuHealth(whole_node=True))
    assert all_gpus_unhealthy(node)
    assert exclusion(node, template(1)) is not None


def test_no_report_changes_nothing() -> None:
    node = gpu_node("n", 8)
    assert usable_allocatable(node) == node.allocatable
    assert lost_capacity(replace(node, gpu_health=GpuHealth())) == {}


def test_the_next_gang_goes_to_the_healthy_node() -> None:
    nodes = [sick(with_count(gpu_node("a", 8), 8), 3), with_count(gpu_node("b", 8), 8)]
    result = schedule(snapshot(nodes=nodes, workloads=[gang("g", members=1, gpus=8)]))
    (decision,) = result.decisions
    assert decision.verdict is Verdict.ADMIT
    assert dict(decision.placement) == {"b": 1}


def test_a_gang_that_needs_the_unhealthy_gpu_waits_and_the_message_names_the_node() -> None:
    nodes = [sick(with_count(gpu_node("a", 2), 2), 0, 1), with_count(gpu_node("b", 2), 2)]
    result = schedule(snapshot(nodes=nodes, workloads=[gang("g", members=2, gpus=2)]))
    (decision,) = result.decisions
    assert decision.verdict is Verdict.PENDING
    assert decision.reason is Reason.NO_NODE_FIT
    assert "GPUUnhealthy" in decision.message


def test_a_pending_message_names_partly_unhealthy_nodes_the_gang_could_use() -> None:
    nodes = [
        sick(with_count(gpu_node("a", 8), 8), 3, 4),
        sick(with_count(gpu_node("b", 8, labels={"pool": "other"}), 8), 0),
        with_count(gpu_node("c", 8), 8),
    ]
    wanted = template(8, node_selector={"kubernetes.io/hostname": "a"})
    result = schedule(snapshot(nodes=nodes, workloads=[gang("g", 1, 8, pod_template=wanted)]))
    (decision,) = result.decisions
    assert decision.message.endswith("; 2 unhealthy GPUs not offered (on a)")
    assert unhealthy_note(nodes, {"cpu": 1000}) == "", "a gang without GPUs lost nothing"


@given(
    gpus=st.integers(min_value=1, max_value=8),
    replicas=st.sampled_from([1, 2, 4]),
    unhealthy=st.sets(st.integers(min_value=0, max_value=7)),
    plugin_dropped=st.integers(min_value=0, max_value=3),
)
def test_health_never_adds_capacity_and_each_gpu_lost_costs_its_share(
    gpus: int, replicas: int, unhealthy: set[int], plugin_dropped: int
) -> None:
    unhealthy = {i for i in unhealthy if i < gpus}
    total = gpus * replicas
    dropped = min(plugin_dropped, gpus) * replicas
    node = with_count(gpu_node("n", total - dropped), gpus)
    node = replace(
        node,
        allocatable={**node.allocatable, GPU: (total - dropped) * 1000},
        capacity={**node.allocatable, GPU: total * 1000},
    )
    offered = usable_allocatable(sick(node, *sorted(unhealthy)))[GPU]
    assert 0 <= offered <= node.allocatable[GPU]
    assert offered == min(total - dropped, total - len(unhealthy) * replicas) * 1000
