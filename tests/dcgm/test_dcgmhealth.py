"""Node health from the XID gauge: faults, holding, clearing, acknowledgements, restarts."""

from __future__ import annotations

import pytest

from queue_controller.core.model.objects import UnhealthyGpu
from queue_controller.errors import InputError
from queue_controller.gpuhealth.dcgm import GpuSample, parse
from queue_controller.gpuhealth.dcgmhealth import DcgmHealth
from queue_controller.gpuhealth.tracker import XID
from tests.dcgm.conftest import recorded

NODE = "gpu-h100-07"
CLEAR = 300.0


def gauges(*xids: int | None, host: str = NODE) -> list[GpuSample]:
    """One sample per GPU, GPU i showing xids[i]."""
    return [GpuSample(host=host, gpu=i, uuid=f"GPU-{i}", xid=x) for i, x in enumerate(xids)]


def sick(health: DcgmHealth, now: float, node: str = NODE) -> dict[int, tuple[int, ...]]:
    return {gpu.index: gpu.xids for gpu in health.unhealthy(node, now=now)}


def test_an_xid_on_a_recorded_node_is_a_fault_at_once_with_its_pods() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    health.observe(parse(recorded("xid79-h100.txt"), source="f").samples, now=1000.0)
    (gpu,) = health.unhealthy(NODE, now=1000.0)
    assert (gpu.index, gpu.reason, gpu.xids, gpu.since, gpu.last_seen) == (
        3,
        XID,
        (79,),
        1000,
        1000,
    )
    assert gpu.uuid.startswith("GPU-")
    assert gpu.pods == ("vision/eval-sweep-3-launcher-xk2p9",)
    assert "79" in gpu.message
    assert (health.gpu_count(NODE), health.hosts()) == (8, [NODE])


def test_an_application_xid_is_ignored() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    health.observe(parse(recorded("xid13-l40s.txt"), source="f").samples, now=0.0)
    assert health.unhealthy("gpu-l40s-02", now=0.0) == ()
    assert health.gpu_count("gpu-l40s-02") == 4


def test_the_ignored_set_can_be_chosen() -> None:
    health = DcgmHealth(clear_seconds=CLEAR, ignored_xids=frozenset({79}))
    health.observe(gauges(13, 79), now=0.0)
    assert sick(health, 0.0) == {0: (13,)}


def test_the_fault_persists_while_the_gauge_shows_it() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    for now in range(0, 3000, 60):
        health.observe(gauges(0, 0, 0, 79), now=float(now))
    (gpu,) = health.unhealthy(NODE, now=2940.0)
    assert (gpu.index, gpu.since, gpu.last_seen) == (3, 0.0, 2940.0)


def test_once_the_gauge_is_back_to_zero_the_clear_period_runs_out() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    health.observe(gauges(0, 0, 0, 79), now=0.0)
    health.observe(gauges(0, 0, 0, 79), now=60.0)
    health.observe(gauges(0, 0, 0, 0), now=120.0)  # the GPU was reset
    health.observe(gauges(0, 0, 0, 0), now=300.0)
    assert sick(health, 359.0) == {3: (79,)}
    assert sick(health, 360.0) == {}


def test_a_gpu_the_scrape_does_not_show_keeps_its_fault() -> None:
    # XID 79: the GPU fell off the bus, and DCGM may list it no more.
    health = DcgmHealth(clear_seconds=CLEAR)
    health.observe(gauges(0, 0, 0, 79), now=0.0)
    health.observe(gauges(0, 0, 0), now=600.0)
    assert sick(health, 600.0) == {3: (79,)}
    health.observe([], now=1200.0)  # the node's exporter is down
    (gpu,) = health.unhealthy(NODE, now=1200.0)
    assert (gpu.since, gpu.last_seen) == (0.0, 1200.0)
    assert health.gpu_count(NODE) == 3  # as of the last scrape that showed the node


def test_a_gpu_without_the_xid_field_neither_raises_nor_clears() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    health.observe(gauges(79), now=0.0)
    health.observe(gauges(None), now=1000.0)
    assert sick(health, 1000.0) == {0: (79,)}


def test_an_acknowledged_value_no_longer_counts_and_a_different_one_does() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    health.observe(gauges(0, 0, 0, 79), now=0.0)
    health.acknowledge(NODE)
    assert sick(health, 0.0) == {}
    assert health.acknowledged(NODE) == {"3": 79}
    health.observe(gauges(0, 0, 0, 79), now=60.0)  # the gauge keeps showing it
    assert sick(health, 60.0) == {}
    health.observe(gauges(0, 0, 0, 48), now=120.0)
    assert sick(health, 120.0) == {3: (48,)}
    assert health.acknowledged(NODE) == {}


def test_after_a_reset_to_zero_the_same_xid_counts_again() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    health.observe(gauges(79), now=0.0)
    health.acknowledge(NODE)
    health.observe(gauges(0), now=60.0)
    assert health.acknowledged(NODE) == {}
    health.observe(gauges(79), now=120.0)
    assert sick(health, 120.0) == {0: (79,)}


def test_acknowledging_leaves_other_nodes_alone() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    health.observe(gauges(79) + gauges(94, host="other"), now=0.0)
    health.acknowledge(NODE)
    assert sick(health, 0.0, "other") == {0: (94,)}
    assert health.acknowledged("other") == {}


def test_a_restart_loads_faults_and_acknowledgements_back() -> None:
    published = UnhealthyGpu(index=3, uuid="GPU-3", xids=(63, 79), since=10.0, last_seen=500.0)
    health = DcgmHealth(clear_seconds=CLEAR)
    assert not health.loaded(NODE)
    health.load(NODE, known=[published], acknowledged={"5": 48})
    assert health.loaded(NODE)
    health.observe(gauges(0, 0, 0, 79, 0, 48), now=600.0)
    (gpu,) = health.unhealthy(NODE, now=600.0)
    assert (gpu.index, gpu.xids, gpu.since, gpu.last_seen) == (3, (63, 79), 10.0, 600.0)
    assert health.acknowledged(NODE) == {"5": 48}


def test_a_loaded_fault_is_kept_while_its_node_is_not_scraped_even_past_the_clear_period() -> None:
    published = UnhealthyGpu(index=1, xids=(79,), since=10.0, last_seen=20.0)
    health = DcgmHealth(clear_seconds=CLEAR)
    health.load(NODE, known=[published], acknowledged={})
    health.observe(gauges(0, host="elsewhere"), now=5000.0)
    (gpu,) = health.unhealthy(NODE, now=5000.0)
    assert (gpu.since, gpu.xids, gpu.last_seen) == (10.0, (79,), 5000.0)
    assert health.hosts() == ["elsewhere"]


def test_a_loaded_fault_still_shown_after_a_long_downtime_keeps_its_history() -> None:
    published = UnhealthyGpu(index=0, xids=(63, 79), since=10.0, last_seen=20.0)
    health = DcgmHealth(clear_seconds=CLEAR)
    health.load(NODE, known=[published], acknowledged={})
    health.observe(gauges(79), now=5000.0)
    (gpu,) = health.unhealthy(NODE, now=5000.0)
    assert (gpu.since, gpu.xids, gpu.last_seen) == (10.0, (63, 79), 5000.0)


def test_acknowledging_a_loaded_fault_not_yet_scraped_acknowledges_its_last_xid() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    health.load(NODE, known=[UnhealthyGpu(index=2, xids=(48, 79))], acknowledged={})
    health.acknowledge(NODE)
    assert health.acknowledged(NODE) == {"2": 79}
    health.observe(gauges(0, 0, 79), now=100.0)
    assert sick(health, 100.0) == {}


@pytest.mark.parametrize("key", ["gpu3", "-1", "", " 3"])
def test_a_published_acknowledgement_with_a_bad_index_is_one_clear_error(key: str) -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    with pytest.raises(InputError) as caught:
        health.load(NODE, known=[], acknowledged={key: 79})
    assert (caught.value.where, caught.value.field) == (f"Node/{NODE}", f"acknowledgedXids[{key}]")


def test_unknown_nodes_have_nothing_to_say() -> None:
    health = DcgmHealth(clear_seconds=CLEAR)
    assert health.unhealthy("nowhere", now=0.0) == ()
    assert health.acknowledged("nowhere") == {}
    assert health.gpu_count("nowhere") is None
    assert health.hosts() == []


def test_a_negative_clear_period_is_refused() -> None:
    with pytest.raises(InputError, match="clear_seconds"):
        DcgmHealth(clear_seconds=-1)
