"""Idle gangs from GR_ENGINE_ACTIVE: threshold, window, any-busy, forgetting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_controller.errors import InputError
from queue_controller.gpuhealth.dcgm import GpuSample, parse
from queue_controller.gpuhealth.idle import IdleTracker
from tests.dcgm.conftest import recorded

WINDOW = 600.0
GANG = ["ml/w-0", "ml/w-1"]


def activity(**pods: float) -> list[GpuSample]:
    """One GPU per pod (keyword w0 -> pod ml/w-0)."""
    return [
        GpuSample(
            host="n",
            gpu=i,
            gr_engine_active=value,
            pods=(pod,),
            pod_activity=((pod, value),),
        )
        for i, (name, value) in enumerate(pods.items())
        for pod in [f"ml/{name[0]}-{name[1:]}"]
    ]


def tracker() -> IdleTracker:
    return IdleTracker(threshold=0.05, window_seconds=WINDOW)


def test_a_gang_quiet_for_a_whole_window_is_idle_since_its_quiet_began() -> None:
    idle = tracker()
    for now in range(0, 660, 60):
        idle.observe(activity(w0=0.01, w1=0.0), now=float(now))
    assert idle.idle_since(GANG, now=599.0) is None  # not a whole window yet
    assert idle.idle_since(GANG, now=600.0) == 0.0


def test_the_stretch_starts_when_the_last_pod_went_quiet() -> None:
    idle = tracker()
    idle.observe(activity(w0=0.0, w1=0.9), now=0.0)
    idle.observe(activity(w0=0.0, w1=0.0), now=100.0)
    assert idle.idle_since(GANG, now=650.0) is None
    assert idle.idle_since(GANG, now=700.0) == 100.0


def test_one_busy_pod_keeps_the_gang_busy() -> None:
    idle = tracker()
    idle.observe(activity(w0=0.0, w1=0.0), now=0.0)
    idle.observe(activity(w0=0.0, w1=0.3), now=700.0)
    assert idle.idle_since(GANG, now=700.0) is None


def test_the_threshold_itself_is_busy() -> None:
    idle = tracker()
    idle.observe(activity(w0=0.05), now=0.0)
    assert idle.idle_since(["ml/w-0"], now=1000.0) is None


def test_busy_again_restarts_the_stretch() -> None:
    idle = tracker()
    idle.observe(activity(w0=0.0), now=0.0)
    idle.observe(activity(w0=0.8), now=300.0)
    idle.observe(activity(w0=0.0), now=400.0)
    idle.observe(activity(w0=0.0), now=900.0)
    assert idle.idle_since(["ml/w-0"], now=900.0) is None
    assert idle.idle_since(["ml/w-0"], now=1000.0) == 400.0


def test_a_pod_on_several_gpus_is_busy_if_any_is() -> None:
    # llama-ft-worker-1 has GPU 3 nearly idle but GPU 2 busy.
    idle = tracker()
    idle.observe(parse(recorded("healthy-a100.txt"), source="f").samples, now=0.0)
    assert idle.idle_since(["ml-research/llama-ft-worker-1"], now=WINDOW) is None


def test_a_busy_mig_instance_does_not_make_its_neighbours_busy() -> None:
    idle = tracker()
    samples = parse(recorded("mig-a100.txt"), source="f").samples
    idle.observe(samples, now=0.0)
    idle.observe(samples, now=WINDOW)
    quiet = ["team-nlp/tiny-infer-0", "team-nlp/tiny-infer-1"]
    assert idle.idle_since(quiet, now=WINDOW) == 0.0
    assert idle.idle_since([*quiet, "team-nlp/tiny-infer-2"], now=WINDOW) is None


def test_pods_without_samples_are_left_out_and_none_at_all_is_not_idle() -> None:
    idle = tracker()
    idle.observe(activity(w0=0.0), now=0.0)
    assert idle.idle_since(GANG, now=WINDOW) == 0.0  # w-1 has no GPU samples
    assert idle.idle_since(["ml/other"], now=WINDOW) is None
    assert idle.idle_since([], now=WINDOW) is None


def test_a_pod_missing_from_a_scrape_keeps_its_state() -> None:
    idle = tracker()
    idle.observe(activity(w0=0.0, w1=0.0), now=0.0)
    idle.observe(activity(w0=0.0), now=300.0)  # w-1's exporter missed a beat
    idle.observe(activity(w0=0.0, w1=0.0), now=600.0)
    assert idle.idle_since(GANG, now=600.0) == 0.0


def test_a_pod_gone_for_longer_than_the_window_is_forgotten() -> None:
    idle = tracker()
    idle.observe(activity(w0=0.0, w1=0.9), now=0.0)
    idle.observe(activity(w0=0.0), now=601.0)  # w-1 (busy when last seen) is gone
    assert idle.idle_since(GANG, now=601.0) == 0.0
    # A new pod of the same name starts afresh.
    idle.observe(activity(w1=0.0), now=700.0)
    assert idle.idle_since(["ml/w-1"], now=700.0 + WINDOW) == 700.0


def test_forgetting_also_holds_between_scrapes() -> None:
    idle = tracker()
    idle.observe(activity(w0=0.0, w1=0.9), now=0.0)
    idle.observe(activity(w0=0.0), now=500.0)
    assert idle.idle_since(GANG, now=500.0) is None
    assert idle.idle_since(GANG, now=601.0) == 0.0


@pytest.mark.parametrize(
    ("threshold", "window", "field"),
    [(-0.1, 1.0, "threshold"), (1.5, 1.0, "threshold"), (0.1, -1.0, "window_seconds")],
)
def test_settings_out_of_range_are_refused(threshold: float, window: float, field: str) -> None:
    with pytest.raises(InputError) as caught:
        IdleTracker(threshold=threshold, window_seconds=window)
    assert caught.value.field == field


_scrape = st.dictionaries(
    st.sampled_from(["w0", "w1", "w2"]), st.floats(0, 1, allow_nan=False), max_size=3
)


@given(
    st.lists(st.tuples(st.floats(0, 100), _scrape), max_size=20),
    st.floats(0, 0.5),
    st.floats(0, 300),
    st.floats(0, 100),
)
def test_idle_since_is_never_later_than_a_window_ago(
    scrapes: list[tuple[float, dict[str, float]]],
    threshold: float,
    window: float,
    query_gap: float,
) -> None:
    idle = IdleTracker(threshold=threshold, window_seconds=window)
    now = 0.0
    first_quiet: float | None = None
    for gap, pods in scrapes:
        now += gap
        idle.observe(activity(**pods), now=now)
        if first_quiet is None and pods:
            first_quiet = now
    now += query_gap
    since = idle.idle_since(["ml/w-0", "ml/w-1", "ml/w-2"], now=now)
    if since is not None:
        assert since <= now - window
        assert first_quiet is not None
        assert since >= first_quiet
