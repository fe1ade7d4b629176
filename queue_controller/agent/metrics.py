"""The node agent's Prometheus metrics, in a registry of its own.

A few health facts per GPU, not a second dcgm-exporter: whether each GPU
counts as healthy, the XIDs seen, temperature and power as last polled, and
whether NVML answers at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from queue_controller.core.model import UnhealthyGpu
from queue_controller.gpuhealth.inventory import Inventory
from queue_controller.gpuhealth.readings import Reading, XidEvent


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.healthy = Gauge(
            "queue_controller_node_gpu_healthy",
            "1 while the GPU counts as healthy, 0 while it is reported unhealthy.",
            ["gpu", "uuid"],
            registry=self.registry,
        )
        self.xid_errors = Counter(
            "queue_controller_node_gpu_xid_errors",
            "XID events seen on the GPU, ignored (application) XIDs included.",
            ["gpu", "xid"],
            registry=self.registry,
        )
        self.temperature = Gauge(
            "queue_controller_node_gpu_temperature_celsius",
            "GPU temperature at the last poll.",
            ["gpu"],
            registry=self.registry,
        )
        self.power = Gauge(
            "queue_controller_node_gpu_power_watts",
            "GPU power draw at the last poll.",
            ["gpu"],
            registry=self.registry,
        )
        self.nvml_up = Gauge(
            "queue_controller_node_nvml_up",
            "1 while NVML answers, 0 while it is unavailable (no driver, no GPUs).",
            registry=self.registry,
        )

    def count_xids(self, events: Iterable[XidEvent]) -> None:
        for event in events:
            self.xid_errors.labels(gpu=str(event.index), xid=str(event.xid)).inc()

    def update(
        self, inventory: Inventory, reading: Reading, unhealthy: Iterable[UnhealthyGpu]
    ) -> None:
        self.nvml_up.set(1)
        faulty = {gpu.index for gpu in unhealthy}
        for gpu in inventory.gpus:
            label = str(gpu.index)
            self.healthy.labels(gpu=label, uuid=gpu.uuid).set(0 if gpu.index in faulty else 1)
            if gpu.index in reading.temperatures_c:
                self.temperature.labels(gpu=label).set(reading.temperatures_c[gpu.index])
            else:  # a stale value would read as a live one
                self._forget(self.temperature, label)
            if gpu.index in reading.power_watts:
                self.power.labels(gpu=label).set(reading.power_watts[gpu.index])
            else:
                self._forget(self.power, label)

    def unavailable(self) -> None:
        self.nvml_up.set(0)
        for gauge in (self.healthy, self.temperature, self.power):
            gauge.clear()

    @staticmethod
    def _forget(gauge: Gauge, label: str) -> None:
        with contextlib.suppress(KeyError):  # never set
            gauge.remove(label)

    def serve(self, host: str, port: int) -> WSGIServer:
        """/metrics on ``host:port`` (port 0 picks one), in a daemon thread."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return server
