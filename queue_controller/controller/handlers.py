"""kopf wiring: thin handlers that feed the state, and the webhook that holds Jobs.

Handlers decide nothing.  ``@kopf.on.event`` stores nothing on the objects
(no annotations, no finalizers), which matters on Pods and Jobs we do not own.
The mutating webhook only sets ``spec.suspend: true`` on queued Jobs as they
are created, so none starts before its gang is admitted.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes import client

from queue_controller.controller.settings import Settings
from queue_controller.controller.state import ClusterState, key_of
from queue_controller.kube import gateway as gw
from queue_controller.kube.jobs import KUEUE_QUEUE_LABEL, QUEUE_LABEL, queue_name
from queue_controller.tls import ServingCertificate

log = logging.getLogger(__name__)
WEBHOOK_CONFIGURATION = "queue-controller.io"


def _group_version(kind: gw.Kind) -> tuple[str, str]:
    group, _, version = kind.api_version.rpartition("/")
    return group, version


def build_registry(
    state: ClusterState, config: Settings, *, certificate: ServingCertificate | None
) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        # The client configuration main() loaded (kubeconfig or in-cluster), as kopf wants it.
        loaded = client.Configuration.get_default_copy()
        header = loaded.get_api_key_with_prefix("BearerToken") or ""
        scheme, _space, token = header.partition(" ")
        return kopf.ConnectionInfo(
            server=loaded.host,
            ca_path=loaded.ssl_ca_cert,
            insecure=not loaded.verify_ssl,
            scheme=scheme or None,
            token=token or None,
            certificate_path=loaded.cert_file,
            private_key_path=loaded.key_file,
        )

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # our own Events, with stable reasons
        settings.watching.server_timeout = 270
        settings.watching.client_timeout = 300
        settings.watching.connect_timeout = 10
        settings.watching.reconnect_backoff = 1.0
        if certificate is not None:
            settings.admission.server = kopf.WebhookServer(
                # In a pod the Service reaches us on any address; outside, loopback only.
                addr="127.0.0.1" if config.webhook == "local" else "0.0.0.0",
                port=config.webhook_port,
                host=config.webhook_host,
                certfile=str(certificate.certfile),
                pkeyfile=str(certificate.keyfile),
                cafile=str(certificate.cafile),
            )
            if config.webhook == "local":
                settings.admission.managed = WEBHOOK_CONFIGURATION

    for kind in gw.WATCHED:
        _feed(registry, state, kind)

    if certificate is not None:
        for label in (QUEUE_LABEL, KUEUE_QUEUE_LABEL):

            @kopf.on.mutate(
                "batch",
                "v1",
                "jobs",
                operations=["CREATE"],
                labels={label: kopf.PRESENT},
                # Outside the cluster, a stopped controller must not block every queued
                # Job: such Jobs start, and the suspend fallback catches them on restart.
                # In the cluster the chart registers the webhook with failurePolicy Fail.
                ignore_failures=config.webhook == "local",
                id=f"suspend-queued-{label.split('/')[0]}",
                registry=registry,
            )
            def suspend(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
                # Created suspended, a Job creates no pod until the controller admits it.
                if not (body.get("spec") or {}).get("suspend"):
                    patch.setdefault("spec", {})["suspend"] = True

    return registry


def _feed(registry: kopf.OperatorRegistry, state: ClusterState, kind: gw.Kind) -> None:
    group, version = _group_version(kind)

    def on_event(event: kopf.RawEvent, **_: Any) -> None:
        obj = dict(event["object"])
        obj.setdefault("kind", kind.kind)
        obj.setdefault("apiVersion", kind.api_version)
        if event["type"] == "DELETED":
            state.delete(obj)
        elif kind is gw.JOB and not queue_name(obj):
            if state.get(*key_of(obj)) is not None:
                state.delete(obj)  # no longer queued: not ours to hold
        else:
            state.upsert(obj)

    kopf.on.event(group, version, kind.plural, registry=registry, id=f"feed-{kind.plural}")(
        on_event
    )
