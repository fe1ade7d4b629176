"""The pod-set annotation is the webhook's to write (issue 22: a member's role chosen by its
user could pass a big member off as a small one, since a pod set is charged its first
member's requests)."""

from __future__ import annotations

from queue_controller.kube.kinds.plainpods import POD_SET_ANNOTATION, PlainPods
from queue_controller.kube.views import member_pod
from tests.unit.test_kind_plainpods import pod, views

PODS = PlainPods()


def test_the_webhook_writes_the_role_over_one_the_user_gave() -> None:
    small = pod("ring-0", gated=False, gpus=0)
    big = pod("ring-1", gated=False, gpus=8, **{POD_SET_ANNOTATION: "cheap"})
    small_role = PODS.hold_at_creation(small)["metadata"]["annotations"][POD_SET_ANNOTATION]
    # The user names the small member's role on the big one: the webhook writes the big
    # one's own.
    big["metadata"]["annotations"][POD_SET_ANNOTATION] = small_role
    written = PODS.hold_at_creation(big)["metadata"]["annotations"][POD_SET_ANNOTATION]
    assert written != small_role
    small["metadata"].setdefault("annotations", {})[POD_SET_ANNOTATION] = small_role
    big["metadata"]["annotations"][POD_SET_ANNOTATION] = written
    (gang,) = views(small, big).gangs
    assert sorted(p.count for p in gang.workload.pod_sets) == [1, 1]


def test_the_webhook_leaves_a_correct_role_alone() -> None:
    new = pod("ring-0", gated=False)
    role = PODS.hold_at_creation(new)["metadata"]["annotations"][POD_SET_ANNOTATION]
    new["metadata"].setdefault("annotations", {})[POD_SET_ANNOTATION] = role
    assert "metadata" not in PODS.hold_at_creation(new)
    assert member_pod(new).annotations[POD_SET_ANNOTATION] == role
