"""Queueing enforced in managed namespaces: what the webhook adds to an unlabelled object.

Kueue's ``manageJobsWithoutQueueName`` with ``managedJobsNamespaceSelector``, and its
LocalQueue defaulting, in one rule.  In a namespace the administrator marks as managed
(``--managed-namespace-selector``, chart value ``managedJobsNamespaceSelector``), a new
object of a known kind (a Job; a plain Pod that no other kind claims) that carries no
queue label and asks for an accelerator is given ``queue-controller.io/queue: default``
and its kind's usual hold (a Job suspended, a Pod gated).  From there on it is an
ordinary queued workload: translation, the core and the admission policies see nothing
special.  With a Queue named ``default`` in the namespace it is admitted through it;
without one it waits with reason ``QueueNotFound`` until an administrator makes one.

What asks for an accelerator: an extended resource (a domain-prefixed name outside
``kubernetes.io``: ``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, ``amd.com/gpu``) in
any container's or init container's requests or limits, or a DRA ``resourceClaims``
entry.  CPU-only work runs untouched, as it does in an unmanaged namespace.

Where Kueue differs, and why we do not follow it there:

* Kueue manages *every* job without a queue name once the setting is on; we hold only
  those that ask for an accelerator.  The queue exists to share GPUs; CPU-only Jobs
  (builds, data preparation, the tooling a namespace runs) gain nothing from waiting
  in it, and teams would have to label every one of them away.
* Kueue's defaulting adds ``queue-name: default`` only when a LocalQueue ``default``
  exists at creation; otherwise the job is suspended with no queue.  We always write
  the label, so the workload says where it waits (``QueueNotFound`` names ``default``)
  and is admitted as soon as that Queue is made, with nothing to relabel.
* A pod that another kind claims (made by a Job: owner Job, or a ``job-name`` label) is
  never queued on its own: its Job is the gang, held and released as one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from queue_controller.core.model import is_extended
from queue_controller.kube.fields import Obj

__all__ = ["DEFAULT_QUEUE", "asks_for_accelerator", "merge", "raw_mapping"]

# Kueue's default LocalQueue name, which its users already expect.
DEFAULT_QUEUE = "default"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def raw_mapping(obj: Mapping[str, Any], *path: str) -> Mapping[str, Any]:
    """The mapping at ``path`` in a raw object, ``{}`` where anything on the way is not
    one: a webhook's decision must not fail on a malformed object (the API server, or
    the cycle, reports it)."""
    value: Mapping[str, Any] = obj
    for part in path:
        value = _mapping(value.get(part))
    return value


def asks_for_accelerator(spec: Mapping[str, Any]) -> bool:
    """Whether a pod spec asks for an extended resource or a DRA claim.

    Read from the raw object, without parsing a quantity: a malformed one is the API
    server's to refuse, and this decision must not fail on it.  Only an explicit zero
    asks for nothing.
    """
    claims = spec.get("resourceClaims")
    if isinstance(claims, list) and claims:
        return True
    for section in ("containers", "initContainers"):
        containers = spec.get(section)
        for container in containers if isinstance(containers, list) else ():
            resources = _mapping(_mapping(container).get("resources"))
            for amounts in (resources.get("requests"), resources.get("limits")):
                for name, amount in _mapping(amounts).items():
                    if isinstance(name, str) and is_extended(name) and str(amount) != "0":
                        return True
    return False


def merge(base: Obj, extra: Mapping[str, Any]) -> Obj:
    """``base`` with ``extra`` merged in, maps key by key (a JSON merge patch without nulls)."""
    out = dict(base)
    for key, value in extra.items():
        held = out.get(key)
        if isinstance(held, dict) and isinstance(value, Mapping):
            out[key] = merge(held, value)
        else:
            out[key] = value
    return out
