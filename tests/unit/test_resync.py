"""A watch that broke and came back with a relist sends no DELETED for what went
meanwhile: a resync lists every kind and prunes it, so no ghost stays behind."""

from __future__ import annotations

import asyncio
from typing import Any

from queue_controller.controller import settings
from queue_controller.controller.handlers import build_registry, feed
from queue_controller.controller.resync import Resync
from queue_controller.controller.state import ClusterState
from queue_controller.kube import gateway as gw
from queue_controller.kube.resources import JOB, NODE, POD
from tests.fakes.gateway import FakeGateway


def job(name: str, version: str, *, queued: bool = True) -> dict[str, Any]:
    labels = {"queue-controller.io/queue": "q"} if queued else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version, "labels": labels},
    }


def pod(name: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
        "spec": {"nodeName": "n1", "containers": []},
    }


def test_prune_forgets_what_a_listing_lacks_and_keeps_what_came_after_it() -> None:
    state = ClusterState()
    for obj in (job("kept", "5"), job("gone", "10"), job("newer", "30"), pod("p", "11")):
        state.upsert(obj)
    before = state.generation
    gone = state.prune("Job", [("Job", "ns", "kept")], "20")
    assert gone == [("Job", "ns", "gone")]
    assert state.get("Job", "ns", "gone") is None
    assert state.get("Job", "ns", "newer") is not None, "held at a version after the listing"
    assert state.get("Pod", "ns", "p") is not None, "another kind is not touched"
    assert state.generation > before
    # Tombstoned at the listing's version: a late event of the old object stays out,
    # an object of that name made after the listing comes in.
    assert not state.upsert(job("gone", "15"))
    assert state.upsert(job("gone", "21"))


def test_prune_with_nothing_gone_changes_nothing() -> None:
    state = ClusterState()
    state.upsert(job("a", "5"))
    before = state.generation
    assert state.prune("Job", [("Job", "ns", "a")], "9") == []
    assert state.generation == before


def test_a_resync_removes_the_ghosts_a_relist_would_leave() -> None:
    fake = FakeGateway(job("gone", "3"), job("stays", "4"), pod("gone-0", "5"))
    state = ClusterState()
    for obj in fake.all():
        feed(state, JOB if obj["kind"] == "Job" else POD, None, obj)
    # Deleted while the watches were down: no event ever comes for them.
    fake.delete(JOB, "ns", "gone")
    fake.delete(POD, "ns", "gone-0")
    fake.create(JOB, "ns", job("new", ""))
    resync = Resync(fake, state, (JOB, POD, NODE))
    pruned = asyncio.run(resync.once())
    assert sorted(pruned) == [("Job", "ns", "gone"), ("Pod", "ns", "gone-0")]
    assert state.get("Job", "ns", "gone") is None
    assert state.get("Pod", "ns", "gone-0") is None
    assert state.get("Job", "ns", "stays") is not None
    assert state.get("Job", "ns", "new") is not None, "what the listing has comes in"
    assert resync.runs == 1


def test_a_resync_takes_listed_objects_in_as_the_watch_would() -> None:
    fake = FakeGateway(job("held", "3"))
    state = ClusterState()
    feed(state, JOB, None, job("held", "3"))
    # The Job lost its queue label while the watch was down: no longer ours to hold.
    fake.patch(JOB, "ns", "held", {"metadata": {"labels": {"queue-controller.io/queue": None}}})
    asyncio.run(Resync(fake, state, (JOB,)).once())
    assert state.get("Job", "ns", "held") is None


def test_a_failed_listing_prunes_nothing_and_asks_again() -> None:
    fake = FakeGateway(job("a", "3"))
    state = ClusterState()
    state.upsert(job("a", "3"))
    state.upsert(job("ghost", "2"))
    fake.fail_next(gw.GatewayError(503, "the API server is restarting"))
    resync = Resync(fake, state, (JOB,))
    assert asyncio.run(resync.once()) == []
    assert state.get("Job", "ns", "ghost") is not None
    assert resync.runs == 0
    assert resync._wanted.is_set()


def test_requests_in_a_burst_are_answered_by_one_resync_after_a_quiet_moment() -> None:
    fake = FakeGateway(job("a", "3"))
    state = ClusterState()
    state.upsert(job("ghost", "2"))
    resync = Resync(fake, state, (JOB,), quiet_seconds=0.05, period_seconds=3600)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(resync.run(stop, poll_seconds=0.01))
        for _ in range(5):  # kopf's relist: one request per listed object
            resync.request()
            await asyncio.sleep(0.01)
        for _ in range(200):
            if resync.runs:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        stop.set()
        await task

    asyncio.run(scenario())
    assert resync.runs == 1
    assert state.get("Job", "ns", "ghost") is None
    assert state.get("Job", "ns", "a") is not None


def test_a_periodic_resync_runs_without_being_asked() -> None:
    state = ClusterState()
    state.upsert(job("ghost", "2"))
    resync = Resync(FakeGateway(job("a", "3")), state, (JOB,), period_seconds=0.02)

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(resync.run(stop, poll_seconds=0.01))
        for _ in range(200):
            if resync.runs:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(scenario())
    assert resync.runs >= 1
    assert state.get("Job", "ns", "ghost") is None


def test_kopf_listing_events_ask_for_a_resync_and_watch_events_do_not() -> None:
    state = ClusterState()
    asked: list[str] = []
    registry = build_registry(
        state, settings.load(), certificate=None, relisted=lambda: asked.append("relist")
    )
    (on_job,) = [h.fn for h in registry._watching.get_all_handlers() if h.id == "feed-jobs"]
    # A coroutine: the state is fed on the event loop (controller/handlers.py).
    asyncio.run(on_job(event={"type": "MODIFIED", "object": job("a", "3")}))
    assert asked == []
    asyncio.run(on_job(event={"type": None, "object": job("b", "4")}))  # kopf's relist
    assert asked == ["relist"]
    assert state.get("Job", "ns", "a") is not None
    assert state.get("Job", "ns", "b") is not None
