"""GPU health on the Node object: one format, written by the reporters, read by admission.

What a reporter (the node agent, or the controller reading DCGM) publishes:

* the condition ``GPUHealthy`` (``kubectl describe node`` shows it), with a
  stable reason: ``AllGPUsHealthy``, ``XidCriticalError``, ``GPULost``,
  ``TemperatureExceeded``, ``PowerExceeded``; or ``Unknown`` with
  ``NVMLUnavailable`` when there is no driver to ask;
* the annotation ``queue-controller.io/gpu-health``: JSON naming each
  unhealthy GPU by index and UUID, with its XIDs and since when;
* optionally the taint ``queue-controller.io/gpu-unhealthy:NoSchedule``.

An operator clears the faults early by setting the annotation
``queue-controller.io/gpu-health-reset`` to any new value.

Admission (``plan`` and the controller alike) reads the annotation through
:func:`gpu_health`.  A ``GPUHealthy=False`` condition without a readable list
(set by hand, or by another tool) takes every GPU of the node out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from queue_controller.core.model import GpuHealth, UnhealthyGpu
from queue_controller.core.rules import GPU_COUNT_LABEL
from queue_controller.errors import InputError
from queue_controller.kube.fields import Obj, epoch_seconds, get, iso, objects, strings

CONDITION = "GPUHealthy"
ANNOTATION = "queue-controller.io/gpu-health"
RESET_ANNOTATION = "queue-controller.io/gpu-health-reset"
TAINT_KEY = "queue-controller.io/gpu-unhealthy"
TAINT_EFFECT = "NoSchedule"
HEALTHY = "AllGPUsHealthy"
UNAVAILABLE = "NVMLUnavailable"
_FIELD = f"metadata.annotations[{ANNOTATION}]"


def _epoch(text: str) -> float:
    return epoch_seconds(datetime.fromisoformat(text))


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GpuEntry(_Wire):
    index: int = Field(ge=0)
    uuid: str = ""
    reason: str = Field(min_length=1)
    xids: list[int] = Field(default_factory=list)
    since: str
    lastSeen: str
    message: str = ""
    migDevices: dict[str, int] = Field(default_factory=dict)
    pods: list[str] = Field(default_factory=list)


class HealthAnnotation(_Wire):
    source: str = Field(min_length=1)  # node-agent | dcgm
    gpus: int | None = Field(default=None, ge=0)
    updated: str
    unhealthy: list[GpuEntry] = Field(default_factory=list)
    # The reset annotation's value last acted on, so one reset clears once.
    resetSeen: str = ""
    # DCGM only: the XID gauge value per GPU that a reset acknowledged.
    acknowledgedXids: dict[str, int] = Field(default_factory=dict)


def _entry(gpu: UnhealthyGpu) -> GpuEntry:
    return GpuEntry(
        index=gpu.index,
        uuid=gpu.uuid,
        reason=gpu.reason,
        xids=list(gpu.xids),
        since=iso(gpu.since),
        lastSeen=iso(gpu.last_seen or gpu.since),
        message=gpu.message,
        migDevices=dict(gpu.mig_devices),
        pods=list(gpu.pods),
    )


def _gpu(entry: GpuEntry) -> UnhealthyGpu:
    return UnhealthyGpu(
        index=entry.index,
        uuid=entry.uuid,
        reason=entry.reason,
        xids=tuple(entry.xids),
        since=_epoch(entry.since),
        last_seen=_epoch(entry.lastSeen),
        message=entry.message,
        mig_devices=dict(entry.migDevices),
        pods=tuple(entry.pods),
    )


def read_annotation(node: Obj) -> HealthAnnotation | None:
    """The node's health annotation, or None; :class:`InputError` names the field if malformed."""
    raw = strings(node, "metadata.annotations").get(ANNOTATION)
    if raw is None:
        return None
    try:
        parsed = HealthAnnotation.model_validate(json.loads(raw))
        for entry in parsed.unhealthy:  # the times must parse too
            _gpu(entry)
    except json.JSONDecodeError as error:
        raise InputError(f"not JSON: {error.msg}", field=_FIELD) from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{where}: {first['msg']}", field=_FIELD) from None
    except ValueError as error:
        raise InputError(f"bad time: {error}", field=_FIELD) from None
    return parsed


def condition(node: Obj) -> Mapping[str, Any] | None:
    return next((c for c in objects(node, "status.conditions") if c.get("type") == CONDITION), None)


def gpu_health(node: Obj) -> GpuHealth | None:
    """What admission needs to know about the node's GPU health (None: nothing reported)."""
    annotation = read_annotation(node)
    state = condition(node)
    status = None if state is None else state.get("status")
    if annotation is not None and annotation.unhealthy:
        return GpuHealth(
            unhealthy=tuple(_gpu(e) for e in annotation.unhealthy), gpu_count=annotation.gpus
        )
    if status == "False":
        label = strings(node, "metadata.labels").get(GPU_COUNT_LABEL, "")
        count = annotation.gpus if annotation else (int(label) if label.isdigit() else None)
        return GpuHealth(whole_node=True, gpu_count=count)
    return None


def unhealthy_gpus(annotation: HealthAnnotation | None) -> tuple[UnhealthyGpu, ...]:
    return () if annotation is None else tuple(_gpu(e) for e in annotation.unhealthy)


def reset_requested(node: Obj, annotation: HealthAnnotation | None) -> str | None:
    """The reset annotation's value if it is new since the last report, else None."""
    value = strings(node, "metadata.annotations").get(RESET_ANNOTATION)
    seen = annotation.resetSeen if annotation is not None else ""
    return value if value and value != seen else None


def summary(unhealthy: Iterable[UnhealthyGpu], gpus: int | None) -> tuple[str, str, str]:
    """(status, reason, message) of the ``GPUHealthy`` condition."""
    faulty = list(unhealthy)
    if not faulty:
        total = f"all {gpus} GPUs" if gpus else "all GPUs"
        return "True", HEALTHY, f"{total} healthy"
    parts = []
    for gpu in faulty:
        what = f"XID {', '.join(map(str, gpu.xids))}" if gpu.xids else gpu.reason
        parts.append(f"GPU {gpu.index} ({gpu.uuid or 'uuid unknown'}): {what}")
    healthy = f"; {gpus - len(faulty)} of {gpus} GPUs healthy" if gpus else ""
    return "False", faulty[0].reason, "; ".join(parts) + healthy


def report_patches(
    node: Obj,
    *,
    source: str,
    unhealthy: Iterable[UnhealthyGpu],
    gpus: int | None,
    now: float,
    reset_seen: str = "",
    acknowledged_xids: Mapping[str, int] | None = None,
    status: tuple[str, str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata merge patch, status strategic-merge patch) publishing one report on ``node``.

    ``status`` overrides the condition (the agent's ``Unknown``/``NVMLUnavailable``).
    The condition's ``lastTransitionTime`` moves only when its status changes.
    """
    faulty = list(unhealthy)
    annotation = HealthAnnotation(
        source=source,
        gpus=gpus,
        updated=iso(now),
        unhealthy=[_entry(g) for g in faulty],
        resetSeen=reset_seen,
        acknowledgedXids=dict(acknowledged_xids or {}),
    )
    text = json.dumps(annotation.model_dump(exclude_defaults=True), sort_keys=True)
    state, reason, message = status or summary(faulty, gpus)
    meta: dict[str, Any] = {"metadata": {"annotations": {ANNOTATION: text}}}
    status_patch = {
        "status": {
            "conditions": [
                {
                    "type": CONDITION,
                    "status": state,
                    "reason": reason,
                    "message": message[:1024],
                    "lastHeartbeatTime": iso(now),
                    "lastTransitionTime": _transition(state, now, previous=condition(node)),
                }
            ]
        }
    }
    return meta, status_patch


def _transition(state: str, now: float, *, previous: Mapping[str, Any] | None) -> str:
    if previous is not None and previous.get("status") == state:
        return str(previous.get("lastTransitionTime") or iso(now))
    return iso(now)


def has_our_taint(node: Obj) -> bool:
    return any(t.get("key") == TAINT_KEY for t in objects(node, "spec.taints"))


def taints_with(node: Obj, *, tainted: bool) -> list[dict[str, Any]] | None:
    """The node's taints with ours added or removed; None when nothing changes."""
    taints = [dict(t) for t in objects(node, "spec.taints")]
    ours = [t for t in taints if t.get("key") == TAINT_KEY]
    if tainted and not ours:
        return [*taints, {"key": TAINT_KEY, "value": "true", "effect": TAINT_EFFECT}]
    if not tainted and ours:
        return [t for t in taints if t.get("key") != TAINT_KEY]
    return None


def changed(node: Obj, meta_patch: Obj, status_patch: Obj) -> bool:
    """Whether publishing would change anything a reader uses (heartbeats aside)."""
    current = strings(node, "metadata.annotations").get(ANNOTATION)
    new = meta_patch["metadata"]["annotations"][ANNOTATION]
    if current is None or _without_updated(current) != _without_updated(new):
        return True
    previous = condition(node)
    entry = status_patch["status"]["conditions"][0]
    return previous is None or any(
        previous.get(k) != entry[k] for k in ("status", "reason", "message")
    )


def _without_updated(text: str) -> object:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text
    if isinstance(data, dict):
        data.pop("updated", None)
    return data


def node_name(node: Obj) -> str:
    return get(node, "metadata.name", str, "")
