"""A cycle in Cohort spec.parentName (issue 24): refused naming the cycle, the rest goes on."""

from __future__ import annotations

import pytest

from queue_controller.errors import InputError
from queue_controller.kube.snapshot import Located, build_snapshot
from tests.unit.test_bad_objects import API, HEALTHY, NOW, Obj, Run, healthy


def cohort(name: str, parent: str) -> Obj:
    return {
        "apiVersion": API,
        "kind": "Cohort",
        "metadata": {"name": name, "resourceVersion": "4"},
        "spec": {"parentName": parent},
    }


def with_cycle() -> list[Obj]:
    """The healthy cluster, team-b in cohort x, and x -> y -> x."""
    objs = healthy()
    for obj in objs:
        if obj["kind"] == "TeamQuota" and obj["metadata"]["name"] == "team-b":
            obj["spec"]["cohort"] = "x"
    return [*objs, cohort("x", "y"), cohort("y", "x"), cohort("root", "")]


def test_a_cycle_is_said_on_its_cohorts_and_the_quotas_below_wait_naming_it() -> None:
    run = Run(with_cycle())
    assert run.turn()
    assert run.turn()
    assert run.admitted() == HEALTHY - {"b/train"}
    status = run.group("b", "train")["status"]
    assert status["reason"] == "TeamQuotaInvalid"
    assert "its cohort tree has a cycle: x -> y -> x" in status["message"]
    warned = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"]): e["message"]
        for e in run.events("InvalidObject")
    }
    assert set(warned) == {("Cohort", "x"), ("Cohort", "y"), ("TeamQuota", "team-b")}
    assert "spec.parentName: cohort parents make a cycle: x -> y -> x" in warned[("Cohort", "y")]
    assert run.left_out("Cohort") == 2
    assert run.failures() == 0


def test_plan_refuses_a_dump_with_a_cycle_naming_it() -> None:
    items = [Located(f"document {i}", obj) for i, obj in enumerate(with_cycle(), 1)]
    with pytest.raises(InputError) as raised:
        build_snapshot(items, now=NOW)
    assert "cohort parents make a cycle: x -> y -> x" in str(raised.value)
    assert raised.value.field == "spec.parentName"
