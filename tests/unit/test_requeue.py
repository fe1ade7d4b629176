import pytest

from queue_controller.core.model.objects import RequeuePolicy
from queue_controller.core.rules.requeue import backoff_seconds, pods_ready_timeout, requeue


@pytest.mark.parametrize(
    ("count", "delay"), [(0, 0), (1, 60), (2, 120), (3, 240), (6, 1920), (7, 3600), (50, 3600)]
)
def test_backoff_doubles_up_to_the_maximum(count: int, delay: float) -> None:
    assert backoff_seconds(RequeuePolicy(60, 3600), count) == delay


def test_requeue_counts_and_schedules_the_next_attempt() -> None:
    first = requeue(RequeuePolicy(10, 100, backoff_limit=2), previous=0, now=1000.0)
    assert (first.count, first.at, first.deactivated) == (1, 1010.0, False)
    second = requeue(RequeuePolicy(10, 100, backoff_limit=2), previous=1, now=2000.0)
    assert (second.count, second.at, second.deactivated) == (2, 2020.0, False)
    third = requeue(RequeuePolicy(10, 100, backoff_limit=2), previous=2, now=3000.0)
    assert third.deactivated


def test_no_limit_means_requeue_forever() -> None:
    assert not requeue(RequeuePolicy(1, 2, backoff_limit=None), previous=10_000, now=0).deactivated


def test_zero_limit_deactivates_on_first_eviction() -> None:
    assert requeue(RequeuePolicy(1, 2, backoff_limit=0), previous=0, now=0).deactivated


def test_timeout_precedence() -> None:
    assert pods_ready_timeout(pod_group_seconds=30, queue_seconds=60, default_seconds=300) == 30
    assert pods_ready_timeout(pod_group_seconds=None, queue_seconds=60, default_seconds=300) == 60
    assert (
        pods_ready_timeout(pod_group_seconds=None, queue_seconds=None, default_seconds=300) == 300
    )
    assert pods_ready_timeout(pod_group_seconds=0, queue_seconds=60, default_seconds=300) == 0
