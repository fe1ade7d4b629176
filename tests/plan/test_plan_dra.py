"""``plan`` over dumps with DRA (resource.k8s.io/v1) gangs: members take their GPUs through
ResourceClaimTemplates, matched against the ResourceSlices the nodes publish.

* ``dra.yaml``: a 2x4-H100 gang fits; a gang whose template's selector does not
  parse is Invalid, naming the template and the expression.
* ``dra-trap.yaml``: other pods' allocated claims leave 9 H100s free in total but at
  most 3 on a node, so a 2x4 gang waits with NoNodeFit, naming its template and request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from queue_controller.core import Snapshot
from queue_controller.dump import load_snapshot
from queue_controller.errors import DumpError
from tests.plan.harness import by_workload, dump, outcome, plan_json

BROKEN = 'device.attributes["gpu.nvidia.com"].productName =='


@pytest.fixture(scope="module")
def dra() -> dict[str, dict[str, Any]]:
    return by_workload(plan_json("dra.yaml"))


def test_a_gang_of_four_h100_claims_per_member_is_admitted(
    dra: dict[str, dict[str, Any]],
) -> None:
    fits = dra["ml/fits"]
    assert outcome(fits) == ("Admit", "Admitted"), fits
    placement = fits["placement"]
    assert sum(placement.values()) == 2, placement
    # 2 members of 4 of a node's 8 GPUs: both on one node, or one on each.
    assert set(placement) <= {"h100-0000", "h100-0001"}, placement


def test_a_template_whose_selector_does_not_parse_makes_the_gang_invalid(
    dra: dict[str, dict[str, Any]],
) -> None:
    broken = dra["ml/broken"]
    assert broken["decision"] == "Invalid", broken
    assert "h100-broken" in broken["message"], broken["message"]
    assert BROKEN in broken["message"], broken["message"]
    assert not broken.get("placement"), broken


def test_claims_held_by_other_pods_leave_no_node_room_for_a_member() -> None:
    (trapped,) = plan_json("dra-trap.yaml")
    assert trapped["workload"] == "ml/trapped"
    assert outcome(trapped) == ("Pending", "NoNodeFit"), trapped
    message = trapped["message"]
    assert "ResourceClaimTemplate" in message, message
    assert "h100-x4" in message, message
    assert "request gpus" in message, message
    assert not trapped.get("placement"), trapped


def snapshot_of(path: str) -> Snapshot:
    snapshot, skipped = load_snapshot([(path, Path(path).read_text())], now=0.0)
    assert skipped == 0
    return snapshot


def test_the_dumps_dra_objects_reach_the_snapshot() -> None:
    snapshot = snapshot_of(dump("dra-trap.yaml"))
    assert [c.name for c in snapshot.device_classes] == ["gpu.nvidia.com"]
    assert sorted(s.node for s in snapshot.resource_slices) == [
        "h100-0000",
        "h100-0001",
        "h100-0002",
    ]
    assert all(len(s.devices) == 8 for s in snapshot.resource_slices)
    held = {(a.pool, a.device) for c in snapshot.resource_claims for a in c.allocated}
    assert len(held) == 15
    assert sorted(r for c in snapshot.resource_claims for r in c.reserved_for) == [
        f"ml/filler-h100-000{i}" for i in range(3)
    ]
    assert sorted(t.name for t in snapshot.claim_templates) == ["h100-x4", "h100-x5"]


def test_a_bad_claim_template_fails_plan_naming_its_document_and_field(tmp_path: Path) -> None:
    text = (
        "# a template asking for no device\n"
        "apiVersion: resource.k8s.io/v1\n"
        "kind: ResourceClaimTemplate\n"
        "metadata: {name: none, namespace: ml}\n"
        "spec:\n"
        "  spec:\n"
        "    devices:\n"
        "      requests:\n"
        "      - name: gpus\n"
        "        exactly: {deviceClassName: gpu.nvidia.com, count: 0}\n"
    )
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DumpError) as caught:
        snapshot_of(str(path))
    assert str(caught.value) == (
        f"{path} document 1 (ResourceClaimTemplate/ml/none): "
        "spec.spec.devices.requests[0].exactly.count: must be at least 1, got 0"
    )
    assert caught.value.field == "spec.spec.devices.requests[0].exactly.count"
