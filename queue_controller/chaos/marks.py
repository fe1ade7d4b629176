"""What a chaos run leaves on what it touches, and how any run's changes are undone.

Every change carries its undo on the object itself, so that the run that made
it and ``chaos cleanup`` (after a run that was killed) undo it the same way:

* a node it changed: the label ``queue-controller.io/chaos-run=<run>`` and the
  annotation ``queue-controller.io/chaos-undo``, JSON of what to put back (its
  taint ``queue-controller.io/chaos``, its GPU health as it was);
* a pod it made (a placeholder holding GPUs): the label; undone by deleting it;
* a node it deleted: a ConfigMap with the label, holding the Node as it was;
  undone by creating the Node again if nothing (its kubelet) has meanwhile.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from queue_controller.kube import gateway as gw
from queue_controller.kube import nodehealth
from queue_controller.kube.fields import Obj, get, objects, strings

Body = dict[str, Any]  # what the gateway writes

LABEL = "queue-controller.io/chaos-run"
UNDO = "queue-controller.io/chaos-undo"
TAINT_KEY = "queue-controller.io/chaos"
NODE_KEY = "node.json"  # in the ConfigMap that keeps a deleted Node
_CONDITION_KEY = "gpuHealthCondition"
_ANNOTATION_KEY = "gpuHealthAnnotation"


def new_run_id(experiment: str) -> str:
    return f"{experiment}-{secrets.token_hex(3)}"


@dataclass(frozen=True, slots=True)
class Marks:
    """Writes for one run, each recorded on the object it changes before it changes it."""

    gateway: gw.Gateway
    run: str

    def taint(self, node: str) -> None:
        """``queue-controller.io/chaos=<run>:NoSchedule`` on the node: nothing new lands."""
        obj = self.gateway.get(gw.NODE, "", node)
        taints = [dict(t) for t in objects(obj, "spec.taints") if t.get("key") != TAINT_KEY]
        taints.append({"key": TAINT_KEY, "value": self.run, "effect": "NoSchedule"})
        undo = {**_undo_of(obj), "taint": True}
        self._patch_node(obj, {"spec": {"taints": taints}}, undo)

    def untaint(self, node: str) -> list[str]:
        """Put the node back as it was before this run (the taint off, the label gone)."""
        return _restore(self.gateway, self.gateway.get(gw.NODE, "", node), dry_run=False)

    def gpu_fault(self, node: str, *, meta: Body, status: Body) -> None:
        """Publish a health report (``nodehealth.report_patches``), keeping what it replaces."""
        obj = self.gateway.get(gw.NODE, "", node)
        undo = _undo_of(obj)
        if _ANNOTATION_KEY not in undo:  # the first fault of the run keeps the original
            undo[_ANNOTATION_KEY] = strings(obj, "metadata.annotations").get(nodehealth.ANNOTATION)
            undo[_CONDITION_KEY] = dict(nodehealth.condition(obj) or {}) or None
        self._patch_node(obj, meta, undo)
        self.gateway.patch(gw.NODE, "", node, status, subresource="status", strategic=True)

    def keep_deleted_node(self, obj: Obj, namespace: str) -> str:
        """A ConfigMap in ``namespace`` with the Node as it is, to create it again from."""
        name = f"chaos-{self.run}-{get(obj, 'metadata.name', str, 'node')}"[:253]
        kept = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": get(obj, "metadata.name", str, ""),
                "labels": strings(obj, "metadata.labels"),
                "annotations": strings(obj, "metadata.annotations"),
            },
            "spec": {k: v for k, v in get(obj, "spec", dict, {}).items() if k != "providerID"},
            "status": {
                k: v
                for k, v in get(obj, "status", dict, {}).items()
                if k in ("capacity", "allocatable")
            },
        }
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {LABEL: self.run}},
            "data": {NODE_KEY: json.dumps(kept, sort_keys=True)},
        }
        self.gateway.create(gw.CONFIG_MAP, namespace, body)
        return name

    def pod(self, namespace: str, body: Body) -> Obj:
        """Create a pod (a placeholder) with the run's label on it."""
        meta = body.setdefault("metadata", {})
        meta.setdefault("labels", {})[LABEL] = self.run
        return self.gateway.create(gw.POD, namespace, body)

    def _patch_node(self, obj: Obj, patch: Body, undo: Mapping[str, Any]) -> None:
        meta = patch.setdefault("metadata", {})
        meta.setdefault("labels", {})[LABEL] = self.run
        meta.setdefault("annotations", {})[UNDO] = json.dumps(undo, sort_keys=True)
        version = get(obj, "metadata.resourceVersion", str, "") or None
        # Taints are a list others write too: replace it only as last read.
        self.gateway.patch(
            gw.NODE,
            "",
            get(obj, "metadata.name", str, ""),
            patch,
            resource_version=version if "spec" in patch else None,
        )


def _undo_of(node: Obj) -> dict[str, Any]:
    raw = strings(node, "metadata.annotations").get(UNDO)
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _ours(obj: Obj, run: str | None) -> bool:
    value = strings(obj, "metadata.labels").get(LABEL)
    return value is not None and (run is None or value == run)


def undo(gateway: gw.Gateway, *, run: str | None = None, dry_run: bool = False) -> list[str]:
    """Undo every change of ``run`` (of every run: None) still in the cluster; what was done.

    Nodes that were deleted come back first, so that the rest finds them.
    """
    done: list[str] = []
    for kept in gateway.list(gw.CONFIG_MAP):
        if _ours(kept, run):
            done.extend(_restore_node(gateway, kept, dry_run=dry_run))
    for pod in gateway.list(gw.POD):
        if _ours(pod, run):
            namespace = get(pod, "metadata.namespace", str, "")
            name = get(pod, "metadata.name", str, "")
            if not dry_run:
                gateway.delete(gw.POD, namespace, name)
            done.append(f"delete placeholder Pod {namespace}/{name}")
    for node in gateway.list(gw.NODE):
        if _ours(node, run):
            done.extend(_restore(gateway, node, dry_run=dry_run))
    return done


def _restore_node(gateway: gw.Gateway, kept: Obj, *, dry_run: bool) -> list[str]:
    namespace = get(kept, "metadata.namespace", str, "")
    name = get(kept, "metadata.name", str, "")
    node = json.loads(strings(kept, "data").get(NODE_KEY, "{}"))
    node_name = get(node, "metadata.name", str, "")
    out = []
    try:
        gateway.get(gw.NODE, "", node_name)
        out.append(f"Node {node_name} is back already (its kubelet registered it)")
    except gw.NotFound:
        if not dry_run:
            gateway.create(gw.NODE, "", node)
        out.append(f"create Node {node_name} again, as it was")
    if not dry_run:
        gateway.delete(gw.CONFIG_MAP, namespace, name)
    out.append(f"delete ConfigMap {namespace}/{name}")
    return out


def _restore(gateway: gw.Gateway, node: Obj, *, dry_run: bool) -> list[str]:
    name = get(node, "metadata.name", str, "")
    undo_ = _undo_of(node)
    out = []
    patch: Body = {"metadata": {"labels": {LABEL: None}, "annotations": {UNDO: None}}}
    version = None
    if undo_.get("taint"):
        taints = [t for t in objects(node, "spec.taints") if t.get("key") != TAINT_KEY]
        patch["spec"] = {"taints": taints or None}
        version = get(node, "metadata.resourceVersion", str, "") or None
        out.append(f"remove taint {TAINT_KEY} from Node {name}")
    if _ANNOTATION_KEY in undo_:
        patch["metadata"]["annotations"][nodehealth.ANNOTATION] = undo_[_ANNOTATION_KEY]
        out.append(f"restore the GPU health of Node {name}")
    out.append(f"remove label {LABEL} from Node {name}")
    if dry_run:
        return out
    gateway.patch(gw.NODE, "", name, patch, resource_version=version)
    if _ANNOTATION_KEY in undo_:
        was = undo_.get(_CONDITION_KEY)
        entry = dict(was) if was else {"type": nodehealth.CONDITION, "$patch": "delete"}
        status = {"status": {"conditions": [entry]}}
        gateway.patch(gw.NODE, "", name, status, subresource="status", strategic=True)
    return out
