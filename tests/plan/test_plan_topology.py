"""``plan``'s table names the topology domain a gang that asked for one is admitted into."""

from __future__ import annotations

from rich.console import Console

from queue_controller.cli.render import decisions_table
from queue_controller.core import Decision, Reason, Snapshot, Verdict
from tests.plan.harness import plan_json


def test_the_table_names_the_domain() -> None:
    decision = Decision(
        "fabric/nvl-fits",
        "nvlink",
        Verdict.ADMIT,
        Reason.ADMITTED,
        "4 members",
        {"gb200-0004": 1, "gb200-0005": 1},
        kind="Job",
        domains={"main": "gb200-block-0/gb200-nvl-1.1"},
    )
    plain = Decision(
        "fabric/anywhere", "nvlink", Verdict.ADMIT, Reason.ADMITTED, "1", {"n": 1}, kind="Job"
    )
    console = Console(record=True, width=200)
    decisions_table([decision, plain], snapshot=Snapshot(), skipped=0, console=console)
    shown = console.export_text()
    assert "in gb200-block-0/gb200-nvl-1.1: gb200-0004: 1, gb200-0005: 1" in shown
    assert "n: 1" in shown
    assert "in :" not in shown


def test_plan_over_a_dump_keeps_gangs_inside_their_domains() -> None:
    rack_of_3, one_rack, sliced, preferred, unknown = plan_json("topology.yaml")
    assert (rack_of_3["decision"], rack_of_3["reason"]) == ("Pending", "NoNodeFit")
    assert rack_of_3["message"] == (
        "28 nvidia.com/gpu free in total in Topology dc, at most 16 in any one rack "
        "(topology.queue-controller.io/rack); the gang needs 24 in one rack"
    )
    # Kueue's annotation: only r2 holds two whole 8-GPU members.
    assert one_rack["placement"] == {"r2-n0": 1, "r2-n1": 1}
    assert one_rack["domains"] == {"main": "b1/r2"}
    # Slices of two 2-GPU members per node: r1-n1 (8 free) holds both slices.
    assert sliced["placement"] == {"r1-n1": 4}
    assert sliced["slices"] == {"main": [{"r1-n1": 2}, {"r1-n1": 2}]}
    assert preferred["placement"] == {"r1-n0": 1}
    assert preferred["domains"] == {"main": "b1/r1/r1-n0"}
    assert unknown["decision"] == "Invalid"
    assert "'example.com/row' is not a level of Topology dc" in unknown["message"]
    assert "[queue-controller.io/topology-required]" in unknown["message"]


def test_the_last_slice_takes_the_tightest_node_and_a_node_without_a_hostname_is_outside() -> None:
    """Issue 29's two defects (tests/plan/dumps/topology-defects.yaml says how they showed)."""
    sliced, needs_host, six_on_one = plan_json("topology-defects.yaml")
    # Four slices of two fill r1-a; the fifth goes to r1-c, where exactly two GPUs are free,
    # not to r1-b (6 free), which six-on-one needs whole.
    assert sliced["placement"] == {"r1-a": 8, "r1-c": 2}
    assert sliced["slices"]["main"][-1] == {"r1-c": 2}
    assert (six_on_one["decision"], six_on_one["placement"]) == ("Admit", {"r1-b": 1})
    # r2-stray has 8 GPUs free and the rack label, but no hostname label: outside Topology dc.
    assert (needs_host["decision"], needs_host["reason"]) == ("Pending", "NoNodeFit")


def test_a_grouped_head_and_workers_share_one_rack_and_a_malformed_group_is_refused() -> None:
    """Pod-set groups (tests/plan/dumps/topology-groups.yaml says why each goes where)."""
    grouped, mismatch, lonely = plan_json("topology-groups.yaml")
    assert (grouped["decision"], grouped["reason"]) == ("Admit", "Admitted")
    # The workers alone would best-fit r1, but the head's CPUs fit only beside them in r2.
    assert grouped["podSets"] == {"head": {"r2-n0": 1}, "gpu": {"r2-n0": 1, "r2-n1": 1}}
    assert grouped["domains"] == {"head": "b1/r2/r2-n0", "gpu": "b1/r2"}
    assert (mismatch["decision"], mismatch["reason"]) == ("Invalid", "InvalidSpec")
    assert mismatch["message"].startswith(
        "spec.pytorchReplicaSpecs.Master.template.metadata.annotations"
        "[queue-controller.io/topology-group]: group 'ddp'"
    )
    assert (lonely["decision"], lonely["reason"]) == ("Invalid", "InvalidSpec")
    assert (
        "[kueue.x-k8s.io/podset-group-name]: group 'serve' has 1 pod set(s)" in (lonely["message"])
    )


def test_a_balanced_topology_splits_a_preferred_gang_evenly() -> None:
    """Issue 29, item 4 (tests/plan/dumps/topology-balanced.yaml): the same gang under a
    BestFit and a Balanced Topology, and a required gang that Balanced leaves to best fit."""
    packed, even, required = plan_json("topology-balanced.yaml")
    assert packed["placement"] == {"r1-n0": 8, "r2-n0": 4}
    assert packed["domains"] == {"main": "b1"}
    assert even["placement"] == {"r3-n0": 6, "r4-n0": 6}
    assert even["domains"] == {"main": "b2"}
    # Said as balanced, where best fit's split says nothing more.
    assert even["spread"] == {"main": "balanced: 6 + 6 over 2 nodes in 2 racks"}
    assert even["message"].endswith("in domain b2 (balanced: 6 + 6 over 2 nodes in 2 racks)")
    assert "spread" not in packed
    assert required["placement"] == {"r3-n0": 2}
    assert "spread" not in required


def test_layered_slices_nest_host_slices_in_rack_slices_and_a_malformed_layer_is_refused() -> None:
    """Issue 29, item 3 (tests/plan/dumps/topology-layers.yaml says why each goes where)."""
    layered, malformed = plan_json("topology-layers.yaml")
    assert (layered["decision"], layered["reason"]) == ("Admit", "Admitted")
    assert layered["placement"] == {"r1-n0": 2, "r1-n1": 2, "r2-n1": 8}
    assert layered["domains"] == {"main": "b1"}
    # The recorded slices are the host slices, in index order; each two consecutive ones
    # (a rack slice of 4) lie in one rack: r2, r2, then r1 over its two nodes.
    slices = layered["slices"]["main"]
    assert slices == [{"r2-n1": 2}] * 4 + [{"r1-n0": 2}, {"r1-n1": 2}]
    assert [{n[:2] for s in slices[i : i + 2] for n in s} for i in (0, 2, 4)] == [
        {"r2"},
        {"r2"},
        {"r1"},
    ]
    assert (malformed["decision"], malformed["reason"]) == ("Invalid", "InvalidSpec")
    assert malformed["message"] == (
        "spec.template.metadata.annotations[queue-controller.io/topology-slices][1].size: "
        "3 does not divide the size of the layer above (4)"
    )
