"""The controller's translation keeps what unchanged objects gave from one cycle to the next
(kube/memo.py): whatever changes, it must translate exactly as a fresh reading does."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from queue_controller.kube.memo import TranslationMemo
from queue_controller.kube.snapshot import Located, Translation, translate
from tests.unit.test_kind_plainpods import group as pod_group
from tests.unit.test_kind_plainpods import pod as ring_pod
from tests.unit.test_lifecycle import NOW, QUEUE, group, job, pod
from tests.unit.test_one_translation import NODE, TEAM

Obj = dict[str, Any]


def world() -> dict[tuple[str, str], Obj]:
    second = copy.deepcopy(NODE)
    second["metadata"]["name"] = "n2"
    objects = [
        NODE,
        second,
        TEAM,
        QUEUE,
        job("train", suspend=False),
        group("train", phase="Admitted", placement={"n1": 2}),
        pod("train-0", node="n1"),
        pod("train-1", phase="Pending", gated=True),
        job("wait"),
        group("wait", phase="Pending"),
        ring_pod("ring-0"),
        ring_pod("ring-1"),
        pod_group("Pending"),
    ]
    return {(o["kind"], o["metadata"]["name"]): copy.deepcopy(o) for o in objects}


def read(objects: dict[tuple[str, str], Obj], memo: TranslationMemo | None = None) -> Translation:
    errors: list[str] = []
    seen = translate(
        (Located(None, o) for o in objects.values()),
        now=NOW,
        skip=lambda e: errors.append(str(e)),
        memo=memo,
    )
    assert not errors, errors
    return seen


def bump(obj: Obj) -> None:
    meta = obj["metadata"]
    meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 100)


def test_an_unchanged_world_is_read_once_and_translated_the_same() -> None:
    objects, memo = world(), TranslationMemo()
    first = read(objects, memo)
    misses = memo.misses
    again = read(objects, memo)
    assert again == first
    assert memo.misses == misses  # nothing was read afresh
    assert memo.hits >= len(objects)


def test_a_changed_object_is_read_again_at_its_new_version() -> None:
    objects, memo = world(), TranslationMemo()
    read(objects, memo)
    node = objects[("Node", "n2")]
    node["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    bump(node)
    seen = read(objects, memo)
    (n2,) = [n for n in seen.snapshot.nodes if n.name == "n2"]
    assert seen == read(objects)
    assert n2.allocatable["nvidia.com/gpu"] == 4000


def test_a_member_bound_and_a_pod_group_written_change_their_gang() -> None:
    objects, memo = world(), TranslationMemo()
    read(objects, memo)
    member = objects[("Pod", "train-1")]
    member["spec"]["nodeName"] = "n1"
    member["spec"].pop("schedulingGates")
    bump(member)
    waiting = objects[("PodGroup", "wait")]
    waiting["status"]["phase"] = "Admitted"
    waiting["status"]["placement"] = {"n2": 2}
    bump(waiting)
    seen = read(objects, memo)
    assert seen == read(objects)
    gangs = {g.key: g for g in seen.gangs}
    assert all(p.node for p in gangs["Job/ns/train"].live_pods)
    group_view = gangs["Job/ns/wait"].group
    assert group_view is not None
    assert group_view.phase == "Admitted"


def test_a_deleted_object_leaves_the_memo() -> None:
    objects, memo = world(), TranslationMemo()
    read(objects, memo)
    held = len(memo)
    del objects[("Pod", "ring-1")]
    seen = read(objects, memo)
    assert seen == read(objects)
    assert len(memo) < held


def test_an_object_without_a_version_is_always_read_afresh() -> None:
    objects, memo = world(), TranslationMemo()
    node = objects[("Node", "n2")]
    del node["metadata"]["resourceVersion"]
    read(objects, memo)
    node["status"]["allocatable"]["nvidia.com/gpu"] = "2"  # changed, and nothing says so
    (n2,) = [n for n in read(objects, memo).snapshot.nodes if n.name == "n2"]
    assert n2.allocatable["nvidia.com/gpu"] == 2000


def test_a_bad_object_is_reported_at_every_cycle_not_kept() -> None:
    objects, memo = world(), TranslationMemo()
    objects[("Node", "n2")]["status"]["allocatable"]["nvidia.com/gpu"] = "lots"
    for _ in range(2):
        errors: list[str] = []
        translate(
            (Located(None, o) for o in objects.values()),
            now=NOW,
            skip=lambda e, errors=errors: errors.append(str(e)),
            memo=memo,
        )
        assert len(errors) == 1
        assert "Node/n2" in errors[0]


# -- whatever happens between cycles, the memo translates as a fresh reading does -------

CHANGES = ("node gpus", "pod bound", "pod finished", "group phase", "job suspend", "delete")


def change(objects: dict[tuple[str, str], Obj], what: str, pick: int) -> None:
    def of(kind: str) -> list[tuple[str, str]]:
        return sorted(k for k in objects if k[0] == kind)

    def one(kind: str) -> Obj | None:
        keys = of(kind)
        return objects[keys[pick % len(keys)]] if keys else None

    target: Obj | None
    if what == "node gpus":
        target = one("Node")
        if target is not None:
            target["status"]["allocatable"]["nvidia.com/gpu"] = str(pick % 9)
    elif what == "pod bound":
        target = one("Pod")
        if target is not None:
            target["spec"]["nodeName"] = "n1" if pick % 2 else "n2"
            target["spec"].pop("schedulingGates", None)
    elif what == "pod finished":
        target = one("Pod")
        if target is not None:
            target["status"]["phase"] = "Succeeded"
    elif what == "group phase":
        target = one("PodGroup")
        if target is not None:
            target["status"]["phase"] = ("Pending", "Admitted", "Running")[pick % 3]
    elif what == "job suspend":
        target = one("Job")
        if target is not None:
            target["spec"]["suspend"] = not target["spec"].get("suspend", False)
    else:
        keys = sorted(objects)
        if keys:  # every object may be gone already
            del objects[keys[pick % len(keys)]]
        return
    if target is not None:
        bump(target)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 50)), max_size=4)))
def test_the_memo_translates_as_a_fresh_reading_does(cycles: list[list[tuple[str, int]]]) -> None:
    objects, memo = world(), TranslationMemo()
    assert read(objects, memo) == read(objects)
    for changes in cycles:
        for what, pick in changes:
            change(objects, what, pick)
        assert read(objects, memo) == read(objects)


def test_an_unchanged_object_is_handed_back_by_identity_and_what_is_made_of_it_too() -> None:
    objects, memo = world(), TranslationMemo()
    first = read(objects, memo)
    hits = memo.hits
    second = read(objects, memo)
    assert second == first
    assert memo.hits > hits
    # The bound pods the core sees are the very ones made last cycle, not made again.
    assert second.snapshot.pods
    assert all(a is b for a, b in zip(first.snapshot.pods, second.snapshot.pods, strict=True))


def test_what_is_made_of_a_piece_is_made_again_when_the_extra_differs() -> None:
    memo, source = TranslationMemo(), object()
    made = memo.derived(source, "Job/ns/a", lambda: ["a"])
    memo.end_cycle()
    assert memo.derived(source, "Job/ns/a", lambda: ["again"]) is made
    memo.end_cycle()
    assert memo.derived(source, "Job/ns/b", lambda: ["b"]) == ["b"]
    memo.end_cycle()
    assert memo.derived(object(), "Job/ns/b", lambda: ["c"]) == ["c"]
