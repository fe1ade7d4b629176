"""The kopf settings the controller starts with (controller/handlers.py)."""

from __future__ import annotations

from unittest import mock

import kopf

from queue_controller.controller import settings
from queue_controller.controller.handlers import NoDiffBase, build_registry
from queue_controller.controller.state import ClusterState


def _configured() -> kopf.OperatorSettings:
    registry = build_registry(ClusterState(), settings.load(), certificate=None)
    (configure,) = [
        h.fn for h in registry._activities.get_all_handlers() if h.id.endswith(".configure")
    ]
    operator = kopf.OperatorSettings()
    configure(settings=operator)
    return operator


def test_kopf_posts_no_events_of_its_own() -> None:
    assert _configured().posting.enabled is False


def test_kopf_keeps_no_diff_base_and_copies_no_object() -> None:
    storage = _configured().persistence.diffbase_storage
    assert isinstance(storage, NoDiffBase)
    pod = kopf.Body({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": [1] * 1000}})
    with mock.patch("copy.deepcopy", side_effect=AssertionError("copied")):
        assert storage.build(body=pod) == {}
    assert storage.fetch(body=pod) is None
    # kopf's own storage copies the object: what the controller no longer pays per event.
    assert kopf.AnnotationsDiffBaseStorage().build(body=pod)["spec"] == pod["spec"]


def test_kopf_lists_in_pages_as_the_gateway_does() -> None:
    """One page of full objects at a time, not the whole listing of 20,000 pods at once."""
    from queue_controller.kube.gateway import LIST_PAGE_SIZE

    assert _configured().watching.chunk_size == LIST_PAGE_SIZE == 500
