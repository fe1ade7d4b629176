"""The node agent's Prometheus metrics, read from its registry and over HTTP."""

from __future__ import annotations

import threading
import urllib.request

import pynvml

from queue_controller.agent.main import run_agent
from queue_controller.agent.metrics import AgentMetrics
from queue_controller.agent.settings import AgentSettings
from queue_controller.kube.healthwriter import NodeHealthPublisher
from tests.agent.harness import NODE, FakeGateway, rig
from tests.fakes.fake_pynvml import FakeNvml


def value(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_gpu_metrics_follow_the_polls() -> None:
    r = rig(FakeNvml(4))
    r.nvml.gpus[2].temperature_c = 63
    r.nvml.gpus[2].power_mw = 412_500
    r.step()
    m = r.metrics
    uuid = r.nvml.gpus[3].uuid
    assert value(m, "queue_controller_node_nvml_up") == 1
    assert value(m, "queue_controller_node_gpu_healthy", gpu="3", uuid=uuid) == 1
    assert value(m, "queue_controller_node_gpu_temperature_celsius", gpu="2") == 63
    assert value(m, "queue_controller_node_gpu_power_watts", gpu="2") == 412.5

    r.nvml.xid(3, 79)
    r.nvml.xid(3, 79)
    r.nvml.xid(1, 13)
    r.step(1)
    assert value(m, "queue_controller_node_gpu_healthy", gpu="3", uuid=uuid) == 0
    assert value(m, "queue_controller_node_gpu_xid_errors_total", gpu="3", xid="79") == 2
    # Ignored XIDs are no fault, but they are counted.
    assert value(m, "queue_controller_node_gpu_xid_errors_total", gpu="1", xid="13") == 1
    uuid1 = r.nvml.gpus[1].uuid
    assert value(m, "queue_controller_node_gpu_healthy", gpu="1", uuid=uuid1) == 1


def test_a_lost_gpu_has_no_stale_readings() -> None:
    r = rig(FakeNvml(2))
    r.step()
    r.nvml.lose(1)
    r.step(10)
    m = r.metrics
    assert value(m, "queue_controller_node_gpu_temperature_celsius", gpu="1") is None
    assert value(m, "queue_controller_node_gpu_temperature_celsius", gpu="0") == 40
    uuid = r.nvml.gpus[1].uuid
    assert value(m, "queue_controller_node_gpu_healthy", gpu="1", uuid=uuid) == 0


def test_nvml_down() -> None:
    r = rig(FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    r.step()
    assert value(r.metrics, "queue_controller_node_nvml_up") == 0
    assert value(r.metrics, "queue_controller_node_gpu_healthy", gpu="0", uuid="") is None


def test_served_over_http() -> None:
    metrics = AgentMetrics()
    metrics.nvml_up.set(1)
    server = metrics.serve("127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert "queue_controller_node_nvml_up 1.0" in text
    assert "# TYPE queue_controller_node_gpu_xid_errors_total counter" in text
    # Its own registry: none of the process-wide default collectors.
    assert "python_gc_objects_collected_total" not in text


def test_run_agent_serves_publishes_and_stops() -> None:
    gateway = FakeGateway()
    stop = threading.Event()
    gateway.on_write = lambda writes: stop.set() if writes >= 2 else None
    publisher = NodeHealthPublisher(gateway=gateway, source="node-agent")  # type: ignore[arg-type]
    settings = AgentSettings(node_name=NODE, metrics_host="127.0.0.1", metrics_port=0)
    fake = FakeNvml(2)
    worker = threading.Thread(
        target=run_agent,
        args=(settings,),
        kwargs={"nvml": fake, "publisher": publisher, "stop": stop},
    )
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert gateway.condition()["reason"] == "AllGPUsHealthy"
    assert not fake.initialised
