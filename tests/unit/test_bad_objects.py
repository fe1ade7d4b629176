"""One bad object is one bad object (issue 22): the cycle goes on for everyone else.

The controller's cycle, from the objects its watches hold to its writes, over healthy
gangs of three teams and one object that cannot be read.  Every healthy gang is
admitted in the same cycle as without it; a bad workload is InvalidSpec on its own
PodGroup, with the Warning event and the condition; a bad cluster object is left out
with a Warning event on it, the objects_left_out gauge, and (a TeamQuota, a Queue) its
gangs waiting with a reason that names it; and cycle_failures_total stays 0.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from queue_controller.controller.apply import Applier
from queue_controller.controller.leader import Leadership
from queue_controller.controller.lifecycle import Planner
from queue_controller.controller.loop import SchedulingLoop
from queue_controller.controller.metrics import Metrics
from queue_controller.controller.server import Health
from queue_controller.controller.settings import Settings
from queue_controller.controller.state import ClusterState
from queue_controller.core import schedule
from queue_controller.core.model.objects import LeftOut
from queue_controller.errors import InputError, UnreadableObject
from queue_controller.kube import objects, pieces, snapshot
from queue_controller.kube.kinds import KindGang
from queue_controller.kube.kinds.batchjob import BatchJob
from queue_controller.kube.memo import TranslationMemo
from queue_controller.kube.snapshot import Located, translate
from queue_controller.kube.unread import PROVISIONAL
from queue_controller.kube.views import MemberPod
from tests.fakes.gateway import FakeGateway

NOW = 1_800_000_000.0
TEAMS = ("a", "b", "c")
API = "queue-controller.io/v1alpha1"
Obj = dict[str, Any]


def node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "3", "labels": {}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def team(name: str) -> list[Obj]:
    """A TeamQuota of 4 GPUs and the Queue ``q`` in namespace ``name`` that draws on it."""
    quota = {
        "apiVersion": API,
        "kind": "TeamQuota",
        "metadata": {"name": f"team-{name}", "resourceVersion": "2"},
        "spec": {"resources": {"nvidia.com/gpu": {"nominal": 4}}},
    }
    queue = {
        "apiVersion": API,
        "kind": "Queue",
        "metadata": {"name": "q", "namespace": name, "resourceVersion": "5"},
        "spec": {"teamQuota": f"team-{name}"},
    }
    return [quota, queue]


def job(namespace: str, name: str, **annotations: str) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "10",
            "creationTimestamp": "2027-01-15T07:50:00Z",
            "labels": {"queue-controller.io/queue": "q"},
            "annotations": dict(annotations),
        },
        "spec": {
            "parallelism": 2,
            "suspend": True,
            "template": {
                "spec": {
                    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
                }
            },
        },
        "status": {},
    }


def healthy() -> list[Obj]:
    """Two nodes, and a 2-GPU Job in each of three teams' queues: all three fit."""
    return [
        node("n1"),
        node("n2"),
        *(o for name in TEAMS for o in team(name)),
        *(job(name, "train") for name in TEAMS),
    ]


class Run:
    """The scheduling loop over a fake API server, cycle by cycle, as the operator turns it."""

    def __init__(self, objs: Iterable[Obj]) -> None:
        objs = [copy.deepcopy(o) for o in objs]
        self.gateway = FakeGateway(*objs)
        self.state = ClusterState()
        for obj in self.gateway.all():
            self.state.upsert(obj)
        self.metrics = Metrics()
        self.loop = SchedulingLoop(
            state=self.state,
            planner=Planner(300),
            applier=Applier(self.gateway, self.state, None, self.metrics, clock=lambda: NOW),
            leadership=Leadership(Settings(leader_election=False), self.metrics),
            metrics=self.metrics,
            health=Health(),
            clock=lambda: NOW,
            tick_seconds=1,
            batch_seconds=0,
            status_writes_per_cycle=100,
        )

    def turn(self) -> bool:
        return asyncio.run(self.loop.turn())

    def group(self, namespace: str, name: str) -> Obj:
        found = self.gateway.held("PodGroup", namespace, name)
        assert found is not None, f"no PodGroup {namespace}/{name}"
        return found

    def admitted(self) -> set[str]:
        return {
            f"{o['metadata']['namespace']}/{o['metadata']['name']}"
            for o in self.gateway.all()
            if o["kind"] == "PodGroup" and (o.get("status") or {}).get("phase") == "Admitted"
        }

    def events(self, reason: str) -> list[Obj]:
        return [e for e in self.gateway.events if e["reason"] == reason]

    def failures(self) -> float:
        return sum(
            sample.value
            for family in self.metrics.registry.collect()
            if family.name == "queue_controller_cycle_failures"
            for sample in family.samples
            if sample.name.endswith("_total")
        )

    def left_out(self, kind: str) -> float | None:
        return self.metrics.registry.get_sample_value(
            "queue_controller_objects_left_out", {"kind": kind}
        )


HEALTHY = {f"{name}/train" for name in TEAMS}


def _healthy_admitted_alone() -> set[str]:
    alone = Run(healthy())
    assert alone.turn()
    return alone.admitted()


def test_the_healthy_gangs_alone_are_all_admitted_in_one_cycle() -> None:
    # The baseline every test below compares with.
    assert _healthy_admitted_alone() == HEALTHY


def _invalid_spec(run: Run, namespace: str, name: str) -> tuple[str, Obj]:
    """The PodGroup's InvalidSpec message, and the Warning event on the Job that says it."""
    status = run.group(namespace, name)["status"]
    assert (status["phase"], status["reason"]) == ("Pending", "InvalidSpec")
    (condition,) = [c for c in status["conditions"] if c["type"] == "Admitted"]
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec")
    assert condition["message"] == status["message"]
    on_job = [
        e
        for e in run.events("Invalid")
        if e["involvedObject"]["kind"] == "Job" and e["involvedObject"]["name"] == name
    ]
    assert len(on_job) == 1, run.gateway.events
    assert on_job[0]["type"] == "Warning"
    assert on_job[0]["message"] == f"InvalidSpec: {status['message']}"
    return str(status["message"]), on_job[0]


def test_a_job_with_a_superscript_min_member_is_invalid_and_the_others_are_admitted() -> None:
    # "²" passes str.isdigit() and int() refuses it: before the boundary, the ValueError
    # ended every cycle and no gang of any team was admitted.
    run = Run([*healthy(), job("a", "bad", **{"queue-controller.io/min-member": "²"})])
    assert run.turn()
    assert run.admitted() == _healthy_admitted_alone() == HEALTHY
    message, _ = _invalid_spec(run, "a", "bad")
    assert "queue-controller.io/min-member" in message
    assert run.failures() == 0


def _raising(bug: Exception, names: Sequence[str]) -> Any:
    real = BatchJob.read

    def read(
        self: BatchJob,
        *,
        namespace: str,
        name: str,
        head: Obj | None,
        members: Sequence[MemberPod],
    ) -> KindGang:
        if name in names:
            raise bug
        return real(self, namespace=namespace, name=name, head=head, members=members)

    return read


@pytest.mark.parametrize(
    "bug",
    [
        RecursionError("maximum recursion depth exceeded"),
        ValueError("invalid literal"),
        KeyError("x"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_reader_bug_on_one_job_makes_that_gang_alone_invalid(
    bug: Exception, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Whatever a reader raises (not only what the parsers are fixed for): here the Job
    # kind's read itself raises for one Job.
    monkeypatch.setattr(BatchJob, "read", _raising(bug, ["bad"]))
    run = Run([*healthy(), job("b", "bad")])
    with caplog.at_level(logging.ERROR):
        assert run.turn()
        assert run.turn()  # the next cycle: nothing is posted or logged again
    assert run.admitted() == HEALTHY
    message, _ = _invalid_spec(run, "b", "bad")
    assert message.startswith(f"Job/b/bad: could not be read (bug: {type(bug).__name__}")
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[1] is bug]
    assert len(logged) == 1, "the traceback is logged once, not at every cycle"
    assert run.failures() == 0


def test_a_running_job_that_cannot_be_read_is_held_again_not_let_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Unreadable is never a way around the queue: an unsuspended Job with a live pod
    # that its kind cannot read is suspended, as any unadmitted running gang is.
    monkeypatch.setattr(BatchJob, "read", _raising(ValueError("bug"), ["rogue"]))
    rogue = job("c", "rogue")
    rogue["spec"]["suspend"] = False
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "rogue-0",
            "namespace": "c",
            "resourceVersion": "12",
            "ownerReferences": [{"kind": "Job", "name": "rogue", "controller": True}],
        },
        "spec": {"containers": [{"name": "main"}], "nodeName": "n1"},
        "status": {"phase": "Running"},
    }
    run = Run([*healthy(), rogue, pod])
    assert run.turn()
    held = run.gateway.held("Job", "c", "rogue")
    assert held is not None
    assert held["spec"]["suspend"] is True
    assert run.gateway.held("Pod", "c", "rogue-0") is None
    assert run.failures() == 0


def _unreadable(kind_reader: str, bug: Exception, name: str) -> Any:
    real = getattr(objects, kind_reader)

    def read(obj: Obj) -> Any:
        if obj["metadata"]["name"] == name:
            raise bug
        return real(obj)

    return read


def test_a_team_quota_left_out_is_said_on_it_and_its_gangs_wait_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        objects, "team_quota", _unreadable("team_quota", OverflowError("x"), "team-b")
    )
    run = Run(healthy())
    assert run.turn()
    assert run.turn()
    assert run.admitted() == HEALTHY - {"b/train"}
    status = run.group("b", "train")["status"]
    assert status["reason"] == "TeamQuotaInvalid"
    assert status["message"].startswith(
        "TeamQuota team-b was left out: TeamQuota/team-b: could not be read (bug: OverflowError"
    )
    (warning,) = run.events("InvalidObject")  # once, not at every cycle
    assert warning["type"] == "Warning"
    assert warning["involvedObject"]["kind"] == "TeamQuota"
    assert warning["involvedObject"]["name"] == "team-b"
    assert run.left_out("TeamQuota") == 1
    assert run.failures() == 0


def test_a_queue_left_out_is_said_on_it_and_its_gangs_wait_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = objects.queue

    def queue(obj: Obj) -> Any:
        if obj["metadata"]["namespace"] == "c":
            raise InputError("expected a string, got 7", field="spec.teamQuota")
        return real(obj)

    monkeypatch.setattr(objects, "queue", queue)
    run = Run(healthy())
    assert run.turn()
    assert run.admitted() == HEALTHY - {"c/train"}
    status = run.group("c", "train")["status"]
    assert status["reason"] == "QueueInvalid"
    assert status["message"] == (
        "Queue c/q was left out: Queue/c/q: spec.teamQuota: expected a string, got 7"
    )
    (warning,) = run.events("InvalidObject")
    assert warning["involvedObject"]["kind"] == "Queue"
    assert warning["involvedObject"]["namespace"] == "c"
    assert run.left_out("Queue") == 1


def test_a_node_left_out_is_said_on_it_and_the_gauge_drops_once_it_is_fixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = pieces.read_node
    broken = {"n2"}

    def read_node(obj: Obj) -> Any:
        if obj["metadata"]["name"] in broken:
            raise RecursionError("maximum recursion depth exceeded")
        return real(obj)

    monkeypatch.setattr(snapshot, "read_node", read_node)
    run = Run(healthy())
    assert run.turn()
    assert run.admitted() == HEALTHY  # 8 GPUs of n1 hold all three
    (warning,) = run.events("InvalidObject")
    assert warning["involvedObject"]["kind"] == "Node"
    assert "n2" in warning["message"]
    assert run.left_out("Node") == 1
    broken.clear()
    # Read at its version again: the failure was kept with it, so a fixed reader is
    # only read anew for a new version (as the fixed object would be) that changed what a
    # cycle reads: one a heartbeat alone moved is not read again (test_node_heartbeat.py).
    fixed = node("n2")
    fixed["metadata"]["resourceVersion"] = "99"
    fixed["metadata"].setdefault("labels", {})["example.com/fixed"] = "yes"
    run.state.upsert(fixed)
    assert run.turn()
    assert run.left_out("Node") is None
    assert run.failures() == 0


def test_a_failed_cycle_is_counted_by_its_exception_class(monkeypatch: pytest.MonkeyPatch) -> None:
    # What the boundary cannot catch (a bug past the translation) still ends only that
    # cycle, and is counted: the metric the tests above keep at 0 does move.
    run = Run(healthy())

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug in the core")

    monkeypatch.setattr("queue_controller.controller.loop.schedule", broken)
    assert not run.turn()
    assert (
        run.metrics.registry.get_sample_value(
            "queue_controller_cycle_failures_total", {"reason": "ZeroDivisionError"}
        )
        == 1
    )


# -- translate alone ---------------------------------------------------------------------


def test_translate_leaves_out_an_object_whose_reader_raises_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(objects, "cohort", lambda obj: [][1])  # IndexError: a reader's bug
    cohort = {"apiVersion": API, "kind": "Cohort", "metadata": {"name": "all"}, "spec": {}}
    skipped: list[InputError] = []
    seen = translate([Located(None, o) for o in [*healthy(), cohort]], now=NOW, skip=skipped.append)
    (error,) = skipped
    assert isinstance(error, UnreadableObject)
    assert str(error).startswith("Cohort/all: could not be read (bug: IndexError")
    assert [(o.kind, o.name) for o in seen.snapshot.left_out] == [("Cohort", "all")]
    assert len(seen.gangs) == 3


def test_without_skip_an_unreadable_object_is_one_input_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # plan: one line naming the object, never a traceback.
    monkeypatch.setattr(objects, "team_quota", _unreadable("team_quota", ValueError("x"), "team-a"))
    with pytest.raises(InputError, match=r"^dump.yaml document 3: could not be read \(bug: "):
        translate(
            [Located(f"dump.yaml document {i}", o) for i, o in enumerate(healthy(), 1)], now=NOW
        )


def test_the_memo_keeps_a_failure_at_its_version_and_reads_a_new_version_afresh() -> None:
    memo = TranslationMemo()
    reads: list[int] = []

    def bad() -> int:
        reads.append(1)
        raise RecursionError("deep")

    obj = node("n1")
    for _ in range(3):
        with pytest.raises(UnreadableObject, match=r"^Node/n1: could not be read"):
            memo.piece(obj, bad)
        memo.end_cycle()
    assert len(reads) == 1, "a reading that failed is not run again at the same version"
    newer = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "4"}}
    assert memo.piece(newer, lambda: 7) == 7


def test_a_gang_readable_again_gets_a_pod_group_of_its_own_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The PodGroup made while the Job could not be read has no size of the gang's; left
    # in place, its minMember would set the gang's minimum once the Job reads again.
    with monkeypatch.context() as patched:
        patched.setattr(BatchJob, "read", _raising(ValueError("bug"), ["bad"]))
        run = Run([*healthy(), job("a", "bad")])
        assert run.turn()
        assert run.group("a", "bad")["metadata"]["annotations"] == {PROVISIONAL: "true"}
    fixed = job("a", "bad")
    fixed["metadata"]["resourceVersion"] = "50"
    run.state.upsert(fixed)
    assert run.turn()
    assert run.gateway.held("PodGroup", "a", "bad") is None  # made anew, below
    provisional = run.state.get("PodGroup", "a", "bad")
    assert provisional is not None
    run.state.delete(provisional)  # as the watch says it
    assert run.turn()
    made = run.group("a", "bad")
    assert made["spec"]["minMember"] == 2
    assert PROVISIONAL not in made["metadata"].get("annotations", {})
    assert made["status"]["phase"] == "Admitted"


def test_the_core_names_a_left_out_team_quota_and_queue_and_keeps_not_found_apart() -> None:
    seen = translate([Located(None, o) for o in healthy()], now=NOW)
    quotas = tuple(q for q in seen.snapshot.quotas if q.name != "team-a")
    queues = tuple(q for q in seen.snapshot.queues if q.namespace != "b")
    left = (
        LeftOut("TeamQuota", "", "team-a", "TeamQuota/team-a: spec: bad"),
        LeftOut("Queue", "b", "q", "Queue/b/q: spec: bad"),
    )
    for left_out, expected in [
        (left, {"a": "TeamQuotaInvalid", "b": "QueueInvalid", "c": "Admitted"}),
        ((), {"a": "TeamQuotaNotFound", "b": "QueueNotFound", "c": "Admitted"}),
    ]:
        snap = replace(seen.snapshot, quotas=quotas, queues=queues, left_out=left_out)
        decided = {d.workload.split("/")[0]: d for d in schedule(snap).decisions}
        assert {ns: d.reason.value for ns, d in decided.items()} == expected
    snap = replace(seen.snapshot, quotas=quotas, queues=queues, left_out=left)
    decided = {d.workload.split("/")[0]: d for d in schedule(snap).decisions}
    assert decided["a"].message == "TeamQuota team-a was left out: TeamQuota/team-a: spec: bad"
    assert decided["b"].message == "Queue b/q was left out: Queue/b/q: spec: bad"


def test_a_gang_of_nobody_gets_a_provisional_pod_group_of_one_until_it_says_its_size() -> None:
    # The CRD refuses minMember 0, so a Job whose min-member is 0 gets a PodGroup of
    # one, marked provisional: it is not taken as the gang's size, and it is kept
    # (not remade every cycle) while the Job stays invalid.
    run = Run([*healthy(), job("a", "nobody", **{"queue-controller.io/min-member": "0"})])
    for _ in range(3):
        assert run.turn()
        group = run.group("a", "nobody")
        assert group["spec"]["minMember"] == 1
        assert group["metadata"]["annotations"] == {PROVISIONAL: "true"}
        assert group["status"]["phase"] != "Admitted"
        assert group["status"]["conditions"][0]["reason"] == "InvalidSpec"
    assert run.admitted() == HEALTHY
    fixed = job("a", "nobody", **{"queue-controller.io/min-member": "2"})
    fixed["metadata"]["resourceVersion"] = "50"
    run.state.upsert(fixed)
    assert run.turn()
    assert run.gateway.held("PodGroup", "a", "nobody") is None  # made anew with its size
