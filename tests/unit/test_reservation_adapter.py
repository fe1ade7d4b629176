"""Reservation's adapter side: the CRD fields, the Queue's policy, runtime estimates as
the kinds read them, the PodGroup's reservation read back, and the journal's history."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from queue_controller.controller.runtimes import HistoryCache
from queue_controller.core.model import Overrun, ReservationPolicy, RuntimeSource
from queue_controller.journal import Entry, Journal, JournalEvent, finished_runtimes
from queue_controller.kube import objects
from queue_controller.kube.kinds.runtime import history_key
from queue_controller.kube.snapshot import Located, translate
from tests.unit.test_crds import crd_errors, pydantic_errors, queue
from tests.unit.test_lifecycle import NOW, QUEUE, group, iso, job

RUNTIME = "queue-controller.io/expected-runtime-seconds"


# --- the CRDs and the models -----------------------------------------------------------------


@pytest.mark.parametrize(
    "reservation",
    [
        {},
        {"afterSeconds": 600},
        {"afterSeconds": 0, "maxPerTeamQuota": 0, "overrun": "Preempt"},
        {"afterSeconds": 60, "backfillMarginSeconds": 0, "overrun": "Wait"},
    ],
)
def test_both_accept_a_reservation(reservation: dict[str, Any]) -> None:
    obj = queue({"teamQuota": "research", "reservation": reservation})
    assert crd_errors(obj) == []
    assert pydantic_errors(obj) == []


@pytest.mark.parametrize(
    "reservation",
    [
        {"afterSeconds": -1},
        {"afterSeconds": "600"},
        {"maxPerTeamQuota": -1},
        {"overrun": "Evict"},
        {"backfillMarginSeconds": -5},
        {"after": 600},
    ],
)
def test_both_reject_a_reservation_written_wrong(reservation: dict[str, Any]) -> None:
    obj = queue({"teamQuota": "research", "reservation": reservation})
    assert crd_errors(obj) != []
    assert pydantic_errors(obj) != []


def test_a_pod_group_holds_its_reservation_fields() -> None:
    status = {
        "phase": "Pending",
        "reason": "Reserved",
        "reservedPlacement": {"main": {"n0": 1, "n1": 1}},
        "reservedStart": "2027-01-15T09:00:00Z",
        "reservationMadeAt": "2027-01-15T08:00:00Z",
        "noFitSince": "2027-01-15T07:50:00Z",
        "runtimeEstimate": {"seconds": 90.5, "source": "History", "detail": "median of 3"},
    }
    body = group(phase="Pending") | {"status": status}
    assert crd_errors(body) == []
    assert pydantic_errors(body) == []
    bad = group(phase="Pending") | {"status": {"runtimeEstimate": {"source": "Guess"}}}
    assert crd_errors(bad) != []
    assert pydantic_errors(bad) != []


def test_the_queue_policy_is_off_unless_after_seconds_is_set() -> None:
    assert objects.queue(QUEUE).reservation == ReservationPolicy()
    on = QUEUE | {"spec": {**QUEUE["spec"], "reservation": {"afterSeconds": 120}}}
    assert objects.queue(on).reservation == ReservationPolicy(after_seconds=120)
    full = {
        "afterSeconds": 0,
        "maxPerTeamQuota": 2,
        "overrun": "Preempt",
        "backfillMarginSeconds": 5,
    }
    policy = objects.queue(QUEUE | {"spec": {**QUEUE["spec"], "reservation": full}}).reservation
    assert policy == ReservationPolicy(0, 2, Overrun.PREEMPT, 5)


# --- runtime estimates as the kinds read them ------------------------------------------------


def workload(*items: dict[str, Any], **options: Any) -> Any:
    seen = translate([Located(None, o) for o in (QUEUE, *items)], now=NOW, **options)
    (gang,) = seen.gangs
    return gang.workload


def annotated(body: dict[str, Any], where: str, value: str) -> dict[str, Any]:
    if where == "template":
        body["spec"]["template"]["metadata"] = {"annotations": {RUNTIME: value}}
    else:
        body["metadata"]["annotations"] = {RUNTIME: value}
    return body


def test_the_template_annotation_comes_first() -> None:
    body = annotated(annotated(job(), "object", "900"), "template", "120")
    runtime = workload(body).runtime
    assert (runtime.seconds, runtime.source) == (120.0, RuntimeSource.ANNOTATION)
    assert workload(annotated(job(), "object", "900")).runtime.seconds == 900.0


@pytest.mark.parametrize("value", ["soon", "-5", "0", "1e9", "", "99999999999999"])
def test_a_bad_runtime_annotation_is_invalid_spec_naming_it(value: str) -> None:
    found = workload(annotated(job(), "template", value))
    assert f"spec.template.metadata.annotations[{RUNTIME}]" in found.spec_error


def test_the_deadline_bounds_the_estimate() -> None:
    body = annotated(job(), "template", "7200")
    body["spec"]["activeDeadlineSeconds"] = 3600
    runtime = workload(body).runtime
    assert (runtime.seconds, runtime.source) == (3600.0, RuntimeSource.DEADLINE)
    plain = job()
    plain["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 600
    assert workload(plain).runtime.seconds == 600.0
    bad = job()
    bad["spec"]["activeDeadlineSeconds"] = "1h"
    assert "spec.activeDeadlineSeconds" in workload(bad).spec_error


def test_history_is_the_median_of_like_gangs_once_there_are_enough() -> None:
    body = job("sweep-7f9c2")
    key = ("ns", "q", history_key("", "sweep-7f9c2"))
    assert key[2] == "name:sweep"
    runtime = workload(body, history={key: (100.0, 300.0, 200.0)}).runtime
    assert (runtime.seconds, runtime.source) == (200.0, RuntimeSource.HISTORY)
    assert "sweep-*" in runtime.detail
    few = workload(body, history={key: (100.0, 300.0)}).runtime
    assert few.source is RuntimeSource.UNKNOWN
    assert workload(body, history={key: (100.0, 300.0)}, min_history=2).runtime.seconds == 200.0


def test_a_runtime_class_shares_history_across_names() -> None:
    body = job("anything")
    body["metadata"]["labels"]["queue-controller.io/runtime-class"] = "bert-eval"
    history = {("ns", "q", "class:bert-eval"): (60.0, 60.0, 90.0)}
    runtime = workload(body, history=history).runtime
    assert (runtime.seconds, runtime.source) == (60.0, RuntimeSource.HISTORY)
    assert "bert-eval" in runtime.detail


def test_the_pod_group_carries_the_reservation_and_the_wait() -> None:
    status = {
        "reason": "Reserved",
        "reservedPlacement": {"main": {"n0": 2}},
        "reservedStart": iso(-300),
        "reservationMadeAt": iso(60),
        "noFitSince": iso(600),
    }
    found = workload(job(), group(phase="Pending", **status))
    assert found.reservation is not None
    assert found.reservation.placement == {"main": {"n0": 2}}
    assert (found.reservation.start, found.reservation.made) == (NOW + 300, NOW - 60)
    assert found.no_fit_since == NOW - 600
    # Waiting for quota: no wait for room is counted.
    quota = workload(job(), group(phase="Pending", reason="QuotaExceeded", noFitSince=iso(9)))
    assert quota.no_fit_since is None


def test_a_wait_from_before_no_fit_since_was_kept_reads_the_condition() -> None:
    condition = {
        "type": "Admitted",
        "status": "False",
        "reason": "NoNodeFit",
        "lastTransitionTime": iso(120),
    }
    found = workload(job(), group(phase="Pending", reason="NoNodeFit", conditions=[condition]))
    assert found.no_fit_since == NOW - 120


def test_the_reservation_limit_reaches_the_snapshot() -> None:
    seen = translate([Located(None, QUEUE)], now=NOW, reservation_limit=3)
    assert seen.snapshot.reservation_limit == 3


# --- the journal's history -----------------------------------------------------------------


def entry(name: str, event: JournalEvent, at: datetime, **extra: Any) -> Entry:
    reason = extra.pop("reason", "Admitted" if event is JournalEvent.ADMITTED else "Succeeded")
    return Entry(
        at=at, namespace="ns", name=name, queue="q", event=event, reason=reason, uid=name, **extra
    )


def test_finished_runtimes_pairs_admissions_with_successes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    journal = Journal(url, flush_interval=0.01)
    journal.start()
    t0 = datetime(2027, 1, 1, tzinfo=UTC)
    for i, seconds in enumerate((100, 300, 200)):
        start = t0 + timedelta(hours=i)
        journal.record(entry(f"sweep-a{i}x2", JournalEvent.ADMITTED, start))
        journal.record(
            entry(f"sweep-a{i}x2", JournalEvent.FINISHED, start + timedelta(seconds=seconds))
        )
    failed = t0 + timedelta(hours=5)
    journal.record(entry("sweep-zz9q", JournalEvent.ADMITTED, failed))
    journal.record(
        entry("sweep-zz9q", JournalEvent.FINISHED, failed + timedelta(seconds=5), reason="Failed")
    )
    journal.record(entry("eval", JournalEvent.ADMITTED, t0, runtime_class="bert"))
    journal.record(
        entry("eval", JournalEvent.FINISHED, t0 + timedelta(seconds=42), runtime_class="bert")
    )
    journal.close()
    runtimes = finished_runtimes(url, key_of=history_key)
    assert runtimes == {
        ("ns", "q", "name:sweep"): (100.0, 300.0, 200.0),
        ("ns", "q", "class:bert"): (42.0,),
    }


def test_a_journal_with_no_table_has_no_history(tmp_path: Path) -> None:
    assert finished_runtimes(f"sqlite:///{tmp_path / 'none.db'}", key_of=history_key) == {}


def test_the_history_cache_never_blocks_and_says_a_failure_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[float] = []

    def broken() -> Any:
        calls.append(time.monotonic())
        raise OSError("disk gone")

    cache = HistoryCache(read=broken, refresh_seconds=10)
    with caplog.at_level(logging.WARNING):
        for now in (0.0, 1.0, 11.0):
            cache.refresh_if_due(now)
            deadline = time.monotonic() + 5
            while cache._running and time.monotonic() < deadline:
                time.sleep(0.01)
    assert len(calls) == 2  # at 0 and 11: not again within 10s
    assert dict(cache.current) == {}
    assert [r.message for r in caplog.records].count(
        "runtime history unavailable, estimates go without it: disk gone"
    ) == 1


def test_the_history_cache_holds_what_it_read() -> None:
    cache = HistoryCache(read=lambda: {("ns", "q", "name:a"): (1.0,)}, refresh_seconds=10)
    cache.refresh()
    assert dict(cache.current) == {("ns", "q", "name:a"): (1.0,)}
    assert HistoryCache(read=None, refresh_seconds=1).refresh_if_due(0) is False
