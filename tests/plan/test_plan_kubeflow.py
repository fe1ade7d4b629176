"""`plan` over a dump with the training-operator's PyTorchJobs (issue 25): one pod set per
replica type, admitted whole, NoNodeFit, and an elastic job refused naming the field."""

from __future__ import annotations

from tests.plan.harness import plan_json


def test_pytorchjobs_are_planned_as_gangs_of_every_replica() -> None:
    decisions = {d["workload"]: d for d in plan_json("pytorchjob.yaml")}
    ddp = decisions["ml/pytorchjob-ddp"]
    assert (ddp["decision"], ddp["reason"]) == ("Admit", "Admitted")
    assert sum(ddp["placement"].values()) == 4
    assert ddp["kind"] == "PyTorchJob"
    big = decisions["ml/pytorchjob-big"]
    assert (big["decision"], big["reason"]) == ("Pending", "NoNodeFit")
    elastic = decisions["ml/pytorchjob-elastic"]
    assert (elastic["decision"], elastic["reason"]) == ("Invalid", "InvalidSpec")
    assert elastic["message"].startswith("spec.elasticPolicy: ")
