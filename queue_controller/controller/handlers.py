"""kopf wiring: thin handlers that feed the state, and the webhooks that hold new gangs.

Handlers decide nothing.  ``@kopf.on.event`` stores nothing on the objects
(no annotations, no finalizers), which matters on Pods and Jobs we do not own.
What is watched and which webhooks hold what come from the registry of
workload kinds (kube/kinds): each kind's webhook applies the kind's own hold
(``spec.suspend`` on a Job, a scheduling gate on a Pod) as the object is
created, so nothing of a queued gang starts before it is admitted.

With managed namespaces (``--managed-namespace-selector``, Kueue's
``managedJobsNamespaceSelector``) a second webhook per kind takes the objects with
*no* queue label: in a managed namespace, one that asks for an accelerator gets the
queue label ``default`` and its kind's hold (kube/kinds/managed.py), so it queues like
any other.  In the cluster the chart registers that webhook with the selector as its
``namespaceSelector``; outside it (``--webhook local``) kopf registers it with no
namespace selector, so the handler itself asks :class:`ManagedNamespaces`, which a
watch of Namespaces keeps current.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import kopf
from kubernetes import client

from queue_controller.controller.adopt import Adopter
from queue_controller.controller.settings import Settings
from queue_controller.controller.state import ClusterState, key_of
from queue_controller.kube import kinds
from queue_controller.kube.fields import strings
from queue_controller.kube.gateway import LIST_PAGE_SIZE
from queue_controller.kube.kinds.selectors import LabelSelector
from queue_controller.kube.resources import JOB, Resource
from queue_controller.tls import ServingCertificate

log = logging.getLogger(__name__)
WEBHOOK_CONFIGURATION = "queue-controller.io"


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's change detection, kept empty: we have no create or update handlers.

    On every watch event kopf builds a "diff base", a deep copy of the object, to tell
    what changed for such handlers, and then never uses it here.  At 1,000 nodes in
    ``make bench-e2e`` that copying was about a sixth of the controller's CPU (py-spy),
    on a machine where the API server and the Job controller wait for the same cores.
    """

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[object] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


class ManagedNamespaces:
    """Which namespaces enforce queueing: the selector, over each namespace's labels.

    Kept from a watch of Namespaces.  A namespace not seen yet (made a moment before
    the object being created in it) is read once with ``read``; if that fails, the
    answer is ``unknown`` (True behind the chart's webhook, whose namespaceSelector the
    API server has already matched; False for the local one, which has none).
    """

    def __init__(
        self,
        selector: LabelSelector,
        read: Callable[[str], Mapping[str, Any] | None],
        *,
        unknown: bool,
    ) -> None:
        self.selector, self.read, self.unknown = selector, read, unknown
        self._labels: dict[str, Mapping[str, str]] = {}
        self._lock = threading.Lock()  # kopf's handler threads: the watch and the webhook

    def observe(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if not name:
            return
        with self._lock:
            if event_type == "DELETED":
                self._labels.pop(name, None)
            else:
                self._labels[name] = strings(dict(obj), "metadata.labels")

    def managed(self, namespace: str) -> bool:
        with self._lock:
            labels = self._labels.get(namespace)
        if labels is None:
            obj = self.read(namespace)
            if obj is None:
                return self.unknown
            self.observe("ADDED", obj)
            labels = strings(dict(obj), "metadata.labels")
        return self.selector.matches(labels)


def build_registry(
    state: ClusterState,
    config: Settings,
    *,
    certificate: ServingCertificate | None,
    relisted: Callable[[], None] | None = None,
    namespaces: ManagedNamespaces | None = None,
    adopter: Adopter | None = None,
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
        settings.persistence.diffbase_storage = NoDiffBase()
        settings.watching.server_timeout = 270
        settings.watching.client_timeout = 300
        settings.watching.connect_timeout = 10
        settings.watching.reconnect_backoff = 1.0
        # kopf lists each watched resource in one response unless told a page size: at
        # 20,000 pods that response, decoded, was two thirds of the controller's peak
        # memory (memray, `make bench-scale --profile`).
        settings.watching.chunk_size = LIST_PAGE_SIZE
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

    for resource in kinds.WATCHED:
        _feed(registry, state, resource, relisted, adopter if resource == JOB else None)

    if certificate is not None:
        for kind in kinds.KINDS:
            _hold(registry, kind.webhook, config)

    if namespaces is not None:
        _watch_namespaces(registry, namespaces)
        if certificate is not None:
            for kind in kinds.KINDS:
                _queue_by_default(registry, kind.webhook, config, namespaces)

    return registry


def _watch_namespaces(registry: kopf.OperatorRegistry, namespaces: ManagedNamespaces) -> None:
    def on_namespace(event: kopf.RawEvent, **_: Any) -> None:
        namespaces.observe(event["type"], event["object"])

    kopf.on.event("", "v1", "namespaces", registry=registry, id="feed-namespaces")(on_namespace)


def _queue_by_default(
    registry: kopf.OperatorRegistry,
    rule: kinds.WebhookRule,
    config: Settings,
    namespaces: ManagedNamespaces,
) -> None:
    """The mutating webhook that queues a kind's unlabelled objects in managed namespaces."""
    resource = rule.resource

    def queue(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        namespace = str(body.metadata.namespace or "")
        if not namespace or not namespaces.managed(namespace):
            return
        for key, value in kinds.queue_by_default(resource, dict(body)).items():
            patch[key] = value

    kopf.on.mutate(
        resource.group,
        resource.version,
        resource.plural,
        operations=list(rule.operations),
        # Neither queue label: the labelled are the hold webhooks' (one per label).
        labels=dict.fromkeys(kinds.QUEUE_LABELS, kopf.ABSENT),
        ignore_failures=config.webhook == "local",
        id=f"default-{resource.plural}",
        registry=registry,
    )(queue)


def _hold(registry: kopf.OperatorRegistry, rule: kinds.WebhookRule, config: Settings) -> None:
    """The mutating webhook that holds a kind's new objects (a suspend, a scheduling gate)."""
    resource = rule.resource
    for label in kinds.QUEUE_LABELS:

        def hold(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
            # Held from creation, nothing of the gang runs until the controller admits it.
            for key, value in kinds.hold_at_creation(resource, dict(body)).items():
                patch[key] = value

        kopf.on.mutate(
            resource.group,
            resource.version,
            resource.plural,
            operations=list(rule.operations),
            labels={label: kopf.PRESENT},
            # Outside the cluster, a stopped controller must not block every queued
            # object: such objects start, and the hold fallback catches them on restart.
            # In the cluster the chart registers the webhook with failurePolicy Fail.
            ignore_failures=config.webhook == "local",
            id=f"hold-{resource.plural}-{label.split('/')[0]}",
            registry=registry,
        )(hold)


def feed(
    state: ClusterState, kind: Resource, event_type: str | None, raw: Mapping[str, Any]
) -> None:
    """Take one watch event (or one object of a listing, ``event_type`` None) into ``state``."""
    head = kinds.BY_HEAD.get(kind.kind)
    obj = dict(raw)
    obj.setdefault("kind", kind.kind)
    obj.setdefault("apiVersion", kind.api_version)
    if event_type == "DELETED":
        state.delete(obj)
    elif head is not None and not head.is_queued(obj):
        if state.get(*key_of(obj)) is not None:
            state.delete(obj)  # no longer queued: not ours to hold
    else:
        state.upsert(obj)


def _feed(
    registry: kopf.OperatorRegistry,
    state: ClusterState,
    kind: Resource,
    relisted: Callable[[], None] | None,
    adopter: Adopter | None = None,
) -> None:
    # On the event loop, not on kopf's worker threads: holding an object is a few dict
    # operations, cheaper than the hop to a thread and back; and the state's wake-ups
    # (asyncio events) may only be set from the loop's own thread, or they come late.
    async def on_event(event: kopf.RawEvent, **_: Any) -> None:
        feed(state, kind, event["type"], event["object"])
        if adopter is not None and event["type"] != "DELETED":
            adopter.offer(event["object"])  # one that got past the webhook (adopt.py)
        if event["type"] is None and relisted is not None:
            # kopf listed the kind again (start-up, or a watch that broke or met 410
            # Gone): it says what is there, never what went, so we list and prune.
            relisted()

    kopf.on.event(
        kind.group, kind.version, kind.plural, registry=registry, id=f"feed-{kind.plural}"
    )(on_event)
