"""Listing what the controller watches, where a workload kind's API may be absent.

An operator's kind (the training-operator's jobs) is registered whether or not its
CRD is installed: a cluster without the operator has no such objects, and a listing
the API server answers 404 means just that, not a broken cluster.  Any other kind's
404 is still an error.
"""

from __future__ import annotations

import logging

from queue_controller.kube import gateway as gw
from queue_controller.kube.kinds import OPTIONAL, WATCHED

log = logging.getLogger(__name__)


def list_all(gateway: gw.Gateway, keep: gw.Keep | None = None) -> list[gw.Obj]:
    """Every object of every watched kind; none of an optional kind that is not served.
    ``keep``: what to hold of each, taken as each page comes (Gateway.list)."""
    objects: list[gw.Obj] = []
    for resource in WATCHED:
        try:
            objects.extend(gateway.list(resource, keep=keep))
        except gw.NotFound:
            if resource not in OPTIONAL:
                raise
            log.info(
                "%s (%s) is not served: its CRD is not installed, so none can queue",
                resource.kind,
                resource.api_version,
            )
    return objects
