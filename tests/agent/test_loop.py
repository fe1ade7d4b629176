"""The node agent's loop (agent/loop.py): NVML faults in, the Node's GPU health out."""

from __future__ import annotations

import threading

import pynvml
import pytest

from queue_controller.gpuhealth.readings import Limits
from queue_controller.kube import gateway as gw
from queue_controller.kube import nodehealth
from tests.agent.harness import NODE, Clock, FakeGateway, rig
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml, mig

# -- no driver -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED]
)
def test_no_driver_publishes_unknown_and_keeps_going(code: int) -> None:
    r = rig(FakeNvml(init_error=code))
    r.step()
    condition = r.gateway.condition()
    assert condition["status"] == "Unknown"
    assert condition["reason"] == nodehealth.UNAVAILABLE
    assert condition["message"].startswith("NVML unavailable: ")
    assert r.gateway.unhealthy() == {}
    assert r.metrics.registry.get_sample_value("queue_controller_node_nvml_up") == 0
    writes = r.gateway.writes()
    r.step(10)
    assert r.gateway.writes() == writes  # published once: nothing changed since


def test_nvml_is_tried_again_after_the_retry_period() -> None:
    fake = FakeNvml(8, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    r = rig(fake, retry_seconds=300)
    r.step()
    fake.init_error = None  # the driver loads
    r.step(299)
    assert fake.calls.count("nvmlInit") == 1
    assert r.gateway.condition()["status"] == "Unknown"
    r.step(1)
    assert fake.calls.count("nvmlInit") == 2
    assert r.gateway.condition()["reason"] == nodehealth.HEALTHY
    assert r.metrics.registry.get_sample_value("queue_controller_node_nvml_up") == 1


# -- health ----------------------------------------------------------------------------


def test_healthy_eight_gpu_node() -> None:
    r = rig(FakeNvml(8))
    r.step()
    assert r.agent.session is not None
    assert len(r.agent.session.inventory.gpus) == 8
    condition = r.gateway.condition()
    assert (condition["status"], condition["reason"]) == ("True", "AllGPUsHealthy")
    assert condition["message"] == "all 8 GPUs healthy"
    annotation = r.gateway.annotation()
    assert annotation["source"] == "node-agent"
    assert annotation["gpus"] == 8
    assert "unhealthy" not in annotation
    assert nodehealth.gpu_health(r.gateway.node) is None
    assert not r.gateway.node["spec"].get("taints")


def test_xid_79_on_gpu_3() -> None:
    r = rig(FakeNvml(8))
    r.step()
    r.nvml.xid(3, 79)
    r.step(5)
    assert list(r.gateway.unhealthy()) == [3]
    entry = r.gateway.unhealthy()[3]
    assert entry["xids"] == [79]
    assert entry["reason"] == "XidCriticalError"
    assert entry["uuid"] == r.nvml.gpus[3].uuid
    condition = r.gateway.condition()
    assert (condition["status"], condition["reason"]) == ("False", "XidCriticalError")
    assert "GPU 3" in condition["message"]
    assert "7 of 8 GPUs healthy" in condition["message"]
    health = nodehealth.gpu_health(r.gateway.node)
    assert health is not None
    assert [g.index for g in health.unhealthy] == [3]


def test_application_xid_13_is_ignored() -> None:
    r = rig(FakeNvml(8))
    r.step()
    r.nvml.xid(2, 13)
    r.step(5)
    assert r.gateway.condition()["reason"] == nodehealth.HEALTHY
    assert r.gateway.unhealthy() == {}


def test_mig_gpu_fault_carries_its_mig_devices() -> None:
    layout = [mig("1g.10gb")] * 7
    fake = FakeNvml([FakeGpu(mig=list(layout)), FakeGpu()])
    r = rig(fake)
    r.step()
    fake.xid(0, 48)
    r.step(1)
    entry = r.gateway.unhealthy()[0]
    assert entry["migDevices"] == {"1g.10gb": 7}
    health = nodehealth.gpu_health(r.gateway.node)
    assert health is not None
    assert dict(health.unhealthy[0].mig_devices) == {"1g.10gb": 7}


def test_recovery_after_the_clear_period() -> None:
    r = rig(FakeNvml(8), clear_seconds=600)
    r.step()
    r.nvml.xid(3, 79)
    r.step(1)
    r.step(599)
    assert list(r.gateway.unhealthy()) == [3]
    assert r.gateway.condition()["status"] == "False"
    r.step(1)
    assert r.gateway.unhealthy() == {}
    assert r.gateway.condition()["status"] == "True"


def test_a_lost_gpu_stays_unhealthy_while_lost() -> None:
    r = rig(FakeNvml(8), clear_seconds=60)
    r.step()
    r.nvml.lose(6)
    for _ in range(10):
        r.step(10)
    entry = r.gateway.unhealthy()[6]
    assert entry["reason"] == "GPULost"
    assert r.gateway.condition()["reason"] == "GPULost"


def test_temperature_excursion_and_its_end() -> None:
    r = rig(FakeNvml(8), clear_seconds=60, limits=Limits(max_temperature_c=85))
    r.step()
    r.nvml.gpus[4].temperature_c = 88
    r.step(10)
    assert r.gateway.unhealthy()[4]["reason"] == "TemperatureExceeded"
    assert "88 C" in r.gateway.unhealthy()[4]["message"]
    r.nvml.gpus[4].temperature_c = 70
    r.step(59)
    assert 4 in r.gateway.unhealthy()
    r.step(1)
    assert r.gateway.unhealthy() == {}


def test_power_excursion() -> None:
    r = rig(FakeNvml(2), limits=Limits(power_fraction=1.0))
    r.step()
    r.nvml.gpus[1].power_mw = 710_000
    r.step(10)
    assert r.gateway.condition()["reason"] == "PowerExceeded"


def test_reset_annotation_clears_once() -> None:
    r = rig(FakeNvml(8))
    r.step()
    r.nvml.xid(3, 79)
    r.step(1)
    r.gateway.node["metadata"]["annotations"][nodehealth.RESET_ANNOTATION] = "repaired-1"
    r.step(1)
    assert r.gateway.unhealthy() == {}
    assert r.gateway.annotation()["resetSeen"] == "repaired-1"
    # A fault after the reset is not cleared by the same reset again.
    r.nvml.xid(3, 79)
    r.step(1)
    r.step(1)
    assert list(r.gateway.unhealthy()) == [3]


def test_reset_is_not_repeated_when_its_report_failed() -> None:
    r = rig(FakeNvml(8))
    r.step()
    r.nvml.xid(1, 79)
    r.step(1)
    r.gateway.node["metadata"]["annotations"][nodehealth.RESET_ANNOTATION] = "r1"
    r.gateway.failures = [("PATCH", gw.GatewayError(503, "busy"))]
    r.step(1)  # acted on; the report saying so fails
    r.nvml.xid(1, 79)
    r.gateway.failures = [("GET", gw.GatewayError(503, "busy"))]
    r.step(1)  # a new fault, seen while the Node cannot be read
    r.step(1)  # the Node still shows the old resetSeen: the same reset must not clear it
    assert list(r.gateway.unhealthy()) == [1]
    assert r.gateway.annotation()["resetSeen"] == "r1"


def test_restart_keeps_published_faults() -> None:
    gateway, clock = FakeGateway(), Clock()
    first = rig(FakeNvml(8), gateway=gateway, clock=clock, clear_seconds=600)
    first.step()
    first.nvml.xid(3, 79)
    first.step(1)
    first.agent.close()
    # A new process, a new NVML that never saw the XID.
    second = rig(FakeNvml(8), gateway=gateway, clock=clock, clear_seconds=600)
    second.step(100)
    assert gateway.unhealthy()[3]["xids"] == [79]
    second.step(499)
    assert 3 in gateway.unhealthy()
    second.step(1)  # 600 s after the XID was last seen
    assert gateway.unhealthy() == {}


def test_malformed_published_annotation_is_not_fatal() -> None:
    gateway = FakeGateway()
    gateway.node["metadata"]["annotations"][nodehealth.ANNOTATION] = "{not json"
    r = rig(FakeNvml(2), gateway=gateway)
    r.step()
    assert r.gateway.condition()["reason"] == nodehealth.HEALTHY


def test_api_errors_are_retried_next_poll() -> None:
    r = rig(FakeNvml(4))
    r.gateway.failures = [("GET", gw.GatewayError(503, "etcd is busy"))]
    r.step()  # the GET fails: nothing published, no exception
    assert nodehealth.ANNOTATION not in r.gateway.node["metadata"]["annotations"]
    r.nvml.xid(0, 79)
    r.step(10)
    assert list(r.gateway.unhealthy()) == [0]


def test_missing_node_is_not_fatal() -> None:
    r = rig(FakeNvml(2))
    r.agent.node_name = "no-such-node"
    r.step()
    r.step(10)
    assert r.gateway.writes() == 0


def test_taint_follows_health_when_asked() -> None:
    r = rig(FakeNvml(2), taint=True, clear_seconds=60)
    r.step()
    r.nvml.xid(0, 79)
    r.step(1)
    assert r.gateway.node["spec"]["taints"] == [
        {"key": nodehealth.TAINT_KEY, "value": "true", "effect": "NoSchedule"}
    ]
    r.step(60)
    assert r.gateway.node["spec"]["taints"] == []


# -- the loop itself -------------------------------------------------------------------


def test_run_waits_for_events_then_stops_and_shuts_nvml_down() -> None:
    clock = Clock()
    fake = FakeNvml(4, on_wait=clock.advance)
    r = rig(fake, clock=clock)
    r.agent.poll_seconds = 0.05
    stop = threading.Event()
    r.gateway.on_write = lambda writes: stop.set() if writes >= 2 else None
    r.agent.run(stop)
    assert r.gateway.condition()["reason"] == nodehealth.HEALTHY
    assert not fake.initialised  # nvmlShutdown
    assert fake.event_sets_open == 0
    assert r.gateway.requests[0] == ("GET", NODE)


def test_a_new_xid_cuts_the_wait_short_but_a_repeat_does_not() -> None:
    r = rig(FakeNvml(2))
    r.step()
    r.agent.poll_seconds = 3600.0
    stop = threading.Event()
    r.nvml.xid(1, 79)
    assert [e.xid for e in r.agent.wait(stop)] == [79]  # returns at once
    r.step()
    r.agent.poll_seconds = 0.2
    r.nvml.xid(1, 79)
    r.nvml.xid(0, 13)
    assert [e.xid for e in r.agent.wait(stop)] == [79, 13]  # after the full 0.2 s
