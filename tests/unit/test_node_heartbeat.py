"""A node's heartbeat changes nothing a cycle reads (issue 26, item 2): kwok, like a
kubelet, gives every node a new resourceVersion and a new lastHeartbeatTime every few
minutes, and the controller translated the node again for it and woke a cycle early.
Now the state keeps the new version but wakes no cycle, and the memo hands back the node
as it was read; any other change is read again."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from queue_controller.controller.state import ClusterState
from queue_controller.kube.memo import TranslationMemo
from queue_controller.kube.snapshot import Located, translate

Obj = dict[str, Any]


def node(version: int, heartbeat: str = "2026-12-01T00:00:00Z", **changes: Any) -> Obj:
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "resourceVersion": str(version),
            "labels": {"nvidia.com/gpu.product": "H100"},
            "managedFields": [{"manager": "kwok", "time": heartbeat}],
        },
        "status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                }
            ],
        },
    }
    for path, value in changes.items():
        where = obj
        *parents, last = path.split("__")
        for part in parents:
            where = where[part]
        where[last] = value
    return obj


def held(state: ClusterState) -> Obj:
    (obj,) = [o for o in state.all() if o.get("kind") == "Node"]
    return obj


def test_a_heartbeat_keeps_the_new_version_but_wakes_no_cycle_and_reads_nothing() -> None:
    state = ClusterState()
    assert state.upsert(node(10))
    state.changed.clear()
    generation = state.generation
    assert state.upsert(node(11, heartbeat="2026-12-01T00:05:00Z"))
    assert held(state)["metadata"]["resourceVersion"] == "11"  # writes are conditional on it
    assert not state.changed.is_set()
    assert state.generation == generation
    memo = TranslationMemo()
    translate([Located(None, node(10))], now=0.0, memo=memo)
    misses = memo.misses
    translate([Located(None, held(state))], now=0.0, memo=memo)
    assert memo.misses == misses  # handed back as read at version 10
    # Another beat later, still the version a cycle read.
    state.upsert(node(12, heartbeat="2026-12-01T00:09:00Z"))
    translate([Located(None, held(state))], now=0.0, memo=memo)
    assert memo.misses == misses


CHANGES = {
    "metadata__labels": {"nvidia.com/gpu.product": "A100"},
    "spec": {"unschedulable": True},
    "status__allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "7"},
    "metadata__annotations": {"example.com/rack-owner": "team-a"},
}


@given(st.sampled_from(sorted(CHANGES)), st.booleans())
def test_any_other_change_is_a_change(path: str, with_heartbeat: bool) -> None:
    state = ClusterState()
    state.upsert(node(10))
    state.changed.clear()
    beat = "2026-12-01T00:05:00Z" if with_heartbeat else "2026-12-01T00:00:00Z"
    changed = node(11, heartbeat=beat, **{path: copy.deepcopy(CHANGES[path])})
    assert state.upsert(changed)
    assert state.changed.is_set()
    memo = TranslationMemo()
    translate([Located(None, node(10))], now=0.0, memo=memo)
    misses = memo.misses
    translate([Located(None, held(state))], now=0.0, memo=memo)
    assert memo.misses == misses + 1  # read again


def test_a_ready_node_that_turns_not_ready_is_a_change() -> None:
    state = ClusterState()
    state.upsert(node(10))
    state.changed.clear()
    down = node(11, heartbeat="2026-12-01T00:05:00Z")
    down["status"]["conditions"][0].update(
        status="False", lastTransitionTime="2026-12-01T00:05:00Z"
    )
    state.upsert(down)
    assert state.changed.is_set()
    assert held(state)["status"]["conditions"][0]["status"] == "False"
