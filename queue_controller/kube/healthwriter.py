"""Publish one node's GPU health through the gateway (the agent and the DCGM reader share it)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from queue_controller.core.model import UnhealthyGpu
from queue_controller.kube import gateway as gw
from queue_controller.kube import nodehealth
from queue_controller.kube.fields import Obj

log = logging.getLogger(__name__)


@dataclass
class NodeHealthPublisher:
    """Writes the ``GPUHealthy`` condition, the health annotation and (optionally) the taint.

    Writes happen only when what readers use changes, so a steady node costs
    one GET per report.  The condition goes through a strategic merge patch of
    ``nodes/status``: a merge patch would replace the kubelet's conditions.
    """

    gateway: gw.Gateway
    source: str  # node-agent | dcgm
    taint: bool = False

    def read(self, node_name: str) -> Obj:
        return self.gateway.get(gw.NODE, "", node_name)

    def publish(
        self,
        node: Obj,
        *,
        unhealthy: Iterable[UnhealthyGpu],
        gpus: int | None,
        now: float,
        reset_seen: str = "",
        acknowledged_xids: Mapping[str, int] | None = None,
        status: tuple[str, str, str] | None = None,
    ) -> bool:
        """Publish on ``node`` (as last read); returns whether anything was written."""
        faulty = tuple(unhealthy)
        name = nodehealth.node_name(node)
        meta, status_patch = nodehealth.report_patches(
            node,
            source=self.source,
            unhealthy=faulty,
            gpus=gpus,
            now=now,
            reset_seen=reset_seen,
            acknowledged_xids=acknowledged_xids,
            status=status,
        )
        taints = None
        if self.taint or nodehealth.has_our_taint(node):
            taints = nodehealth.taints_with(node, tainted=self.taint and bool(faulty))
        if taints is None and not nodehealth.changed(node, meta, status_patch):
            return False
        version = None
        if taints is not None:
            # Taints are a list that others write too: replace it only as last read.
            meta["spec"] = {"taints": taints}
            version = (node.get("metadata") or {}).get("resourceVersion")
        self.gateway.patch(gw.NODE, "", name, meta, resource_version=version)
        self.gateway.patch(gw.NODE, "", name, status_patch, subresource="status", strategic=True)
        log.info("node %s: %s", name, status_patch["status"]["conditions"][0]["message"])
        return True
