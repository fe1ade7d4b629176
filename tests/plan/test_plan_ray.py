"""`plan` over a dump with KubeRay's RayJobs and RayClusters (issue 25): the head, each worker
group and the submitter admitted whole, NoNodeFit, an autoscaled cluster refused naming the
field, and the cluster KubeRay made for a RayJob left to it."""

from __future__ import annotations

from tests.plan.harness import plan_json


def test_rayjobs_and_rayclusters_are_planned_as_gangs() -> None:
    decisions = {d["workload"]: d for d in plan_json("rayjob.yaml")}
    tune = decisions["ml/rayjob-tune"]
    assert (tune["decision"], tune["reason"]) == ("Admit", "Admitted")
    assert tune["kind"] == "RayJob"
    assert sum(tune["placement"].values()) == 5
    huge = decisions["ml/rayjob-huge"]
    assert (huge["decision"], huge["reason"]) == ("Pending", "NoNodeFit")
    serve = decisions["ml/raycluster-serve"]
    assert (serve["decision"], serve["kind"]) == ("Admit", "RayCluster")
    assert sum(serve["placement"].values()) == 4
    autoscaled = decisions["ml/raycluster-autoscaled"]
    assert (autoscaled["decision"], autoscaled["reason"]) == ("Invalid", "InvalidSpec")
    assert autoscaled["message"].startswith("spec.enableInTreeAutoscaling: ")
    assert not [w for w in decisions if "x7k2p" in w]
