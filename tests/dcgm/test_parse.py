"""Parsing dcgm-exporter output into one sample per physical GPU."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_controller.errors import InputError
from queue_controller.gpuhealth.dcgm import GpuSample, parse, pod_activity
from tests.dcgm.conftest import recorded

SOURCE = "http://10.42.3.17:9400/metrics"


def by_gpu(samples: list[GpuSample]) -> dict[int, GpuSample]:
    return {s.gpu: s for s in samples}


def test_a_healthy_node_gives_every_gpu_in_order_with_its_identity_and_values() -> None:
    parsed = parse(recorded("healthy-a100.txt"), source=SOURCE)
    assert parsed.skipped == 0
    assert [(s.host, s.gpu) for s in parsed.samples] == [("gpu-a100-01", i) for i in range(8)]
    first = parsed.samples[0]
    assert first.model == "NVIDIA A100-SXM4-80GB"
    assert first.uuid.startswith("GPU-")
    assert len({s.uuid for s in parsed.samples}) == 8
    assert {s.xid for s in parsed.samples} == {0}
    assert first.gr_engine_active == pytest.approx(0.912345)
    assert first.fb_used_mib == 71234
    assert first.pods == ("ml-research/llama-ft-worker-0",)
    assert dict(first.pod_activity) == {"ml-research/llama-ft-worker-0": pytest.approx(0.912345)}


def test_gpus_no_pod_uses_have_no_pods() -> None:
    gpus = by_gpu(parse(recorded("healthy-a100.txt"), source=SOURCE).samples)
    assert gpus[4].pods == ()
    assert gpus[4].pod_activity == ()
    assert gpus[4].gr_engine_active == 0.0


def test_the_newer_hostname_spelling_and_an_xid_on_gpu_3() -> None:
    gpus = by_gpu(parse(recorded("xid79-h100.txt"), source=SOURCE).samples)
    assert {s.host for s in gpus.values()} == {"gpu-h100-07"}
    assert [i for i, s in gpus.items() if s.xid] == [3]
    assert gpus[3].xid == 79
    assert gpus[3].pods == ("vision/eval-sweep-3-launcher-xk2p9",)


def test_an_application_xid_is_read_like_any_other() -> None:
    # Whether it counts is the health rules' business, not the parser's.
    gpus = by_gpu(parse(recorded("xid13-l40s.txt"), source=SOURCE).samples)
    assert (gpus[0].xid, gpus[0].pods) == (13, ("team-nlp/jupyter-alice",))
    assert len(gpus) == 4


def test_mig_instances_fold_into_their_parent_gpu() -> None:
    gpus = by_gpu(parse(recorded("mig-a100.txt"), source=SOURCE).samples)
    assert sorted(gpus) == [0, 1]
    # Busy if any instance is busy.
    assert gpus[0].gr_engine_active == pytest.approx(0.78)
    assert gpus[1].gr_engine_active == pytest.approx(0.66)
    # Memory of the instances adds up when no whole-GPU series says it.
    assert gpus[0].fb_used_mib == 13 + 9800
    assert gpus[1].pods == (
        "team-nlp/tiny-infer-0",
        "team-nlp/tiny-infer-1",
        "team-nlp/tiny-infer-2",
    )
    # Each pod keeps its own instance's activity.
    assert dict(gpus[1].pod_activity) == {
        "team-nlp/tiny-infer-0": 0.0,
        "team-nlp/tiny-infer-1": 0.0,
        "team-nlp/tiny-infer-2": pytest.approx(0.66),
    }


def test_a_pod_is_as_busy_as_its_busiest_gpu() -> None:
    # llama-ft-worker-1 has GPU 2 at 0.90 and GPU 3 at 0.015.
    samples = parse(recorded("healthy-a100.txt"), source=SOURCE).samples
    activity = pod_activity(samples)
    assert activity["ml-research/llama-ft-worker-1"] == pytest.approx(0.903112)
    assert set(activity) == {"ml-research/llama-ft-worker-0", "ml-research/llama-ft-worker-1"}


def test_federated_series_use_the_exported_pod_labels_and_skip_unplaceable_ones() -> None:
    parsed = parse(recorded("federate-h100.txt"), source="http://prometheus:9090/federate")
    assert parsed.skipped == 1  # the legacy exporter without a host label
    assert [(s.host, s.gpu) for s in parsed.samples] == [
        ("gpu-h100-01", 0),
        ("gpu-h100-01", 1),
        ("gpu-h100-02", 0),
        ("gpu-h100-02", 1),
    ]
    first, _, sick, _ = parsed.samples
    assert first.pods == ("ml-research/gpt-pretrain-worker-0",)
    assert (sick.xid, sick.pods) == (94, ("ml-research/gpt-pretrain-worker-1",))
    assert first.fb_used_mib is None  # not federated


def series(name: str, value: str, **labels: str) -> str:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{text}}} {value}\n"


def test_series_without_a_host_or_a_usable_gpu_label_are_counted_and_skipped() -> None:
    text = (
        series("DCGM_FI_DEV_XID_ERRORS", "0", gpu="0")
        + series("DCGM_FI_DEV_XID_ERRORS", "0", Hostname="n1")
        + series("DCGM_FI_DEV_XID_ERRORS", "0", Hostname="n1", gpu="nvidia0")
        + series("DCGM_FI_DEV_XID_ERRORS", "0", Hostname="", gpu="1")
        + series("DCGM_FI_DEV_XID_ERRORS", "48", Hostname="n1", gpu="2")
        + series("go_goroutines", "12")
        + series("process_open_fds", "9", Hostname="n1", gpu="7")
    )
    parsed = parse(text, source=SOURCE)
    assert parsed.skipped == 4
    assert parsed.samples == [GpuSample(host="n1", gpu=2, xid=48)]


def test_empty_pod_labels_from_older_exporters_name_no_pod() -> None:
    text = series(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0.5", Hostname="n", gpu="0", pod="", namespace=""
    )
    (sample,) = parse(text, source=SOURCE).samples
    assert (sample.pods, sample.pod_activity) == ((), ())


def test_a_blank_value_says_nothing() -> None:
    text = series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "NaN", Hostname="n", gpu="0")
    text += series("DCGM_FI_DEV_XID_ERRORS", "NaN", Hostname="n", gpu="0")
    assert parse(text, source=SOURCE).samples == [GpuSample(host="n", gpu=0)]


def test_a_whole_gpu_memory_series_wins_over_its_instances() -> None:
    text = series("DCGM_FI_DEV_FB_USED", "30000", Hostname="n", gpu="0")
    text += series("DCGM_FI_DEV_FB_USED", "1000", Hostname="n", gpu="0", GPU_I_ID="1")
    assert parse(text, source=SOURCE).samples[0].fb_used_mib == 30000


def test_the_highest_xid_wins_among_series_of_one_gpu() -> None:
    text = series("DCGM_FI_DEV_XID_ERRORS", "0", Hostname="n", gpu="0", GPU_I_ID="1")
    text += series("DCGM_FI_DEV_XID_ERRORS", "79", Hostname="n", gpu="0", GPU_I_ID="2")
    assert parse(text, source=SOURCE).samples[0].xid == 79


def test_families_not_read_are_skipped_before_parsing() -> None:
    # Some 40 families a GPU, of which three are read: the rest are never parsed,
    # even when a line of theirs would not parse.
    text = series("DCGM_FI_DEV_GPU_TEMP", "40", Hostname="n", gpu="5", UUID="GPU-x")
    text += 'DCGM_FI_DEV_POWER_USAGE{gpu="5" 1\n'
    assert parse(text, source=SOURCE).samples == []
    text += series("DCGM_FI_DEV_FB_USED", "100", Hostname="n", gpu="5", UUID="GPU-x")
    assert parse(text, source=SOURCE).samples == [
        GpuSample(host="n", gpu=5, uuid="GPU-x", fb_used_mib=100.0)
    ]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("<!DOCTYPE html>\n<html><body>Grafana</body></html>\n", 1),
        ('{"status":"success","data":{"resultType":"vector"}}\n', 1),
        ('# HELP DCGM_FI_DEV_XID_ERRORS x\nDCGM_FI_DEV_XID_ERRORS{gpu="0" 1\n', 2),
    ],
)
def test_text_that_is_not_the_exposition_format_names_the_source_and_line(
    text: str, line: int
) -> None:
    with pytest.raises(InputError) as caught:
        parse(text, source=SOURCE)
    assert caught.value.where == SOURCE
    assert caught.value.field == f"line {line}"
    assert str(caught.value).startswith(f"{SOURCE}: line {line}: not the Prometheus text")


def test_openmetrics_text_is_read_with_its_own_parser() -> None:
    text = "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
    text += series("DCGM_FI_DEV_XID_ERRORS", "31", Hostname="n", gpu="0") + "# EOF\n"
    assert parse(text, source=SOURCE, openmetrics=True).samples[0].xid == 31
    with pytest.raises(InputError, match="OpenMetrics"):
        parse(text.replace("# EOF\n", ""), source=SOURCE, openmetrics=True)


def test_empty_text_is_no_gpus() -> None:
    assert parse("", source=SOURCE).samples == []


# --- ordering independence -------------------------------------------------

_series = st.tuples(
    st.sampled_from(
        ["DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"]
    ),
    st.sampled_from(["node-a", "node-b"]),
    st.integers(0, 3),
    st.one_of(st.none(), st.integers(1, 4)),  # MIG instance
    st.one_of(st.none(), st.sampled_from(["p0", "p1", "p2"])),
    st.integers(0, 100),
)


@given(st.lists(_series, max_size=30), st.randoms(use_true_random=False))
def test_the_order_of_the_series_never_changes_the_result(
    rows: list[tuple[str, str, int, int | None, str | None, int]], rnd: random.Random
) -> None:
    def line(row: tuple[str, str, int, int | None, str | None, int]) -> str:
        name, host, gpu, instance, pod, value = row
        labels = {"Hostname": host, "gpu": str(gpu)}
        if instance is not None:
            labels["GPU_I_ID"] = str(instance)
        if pod is not None:
            labels |= {"namespace": "ns", "pod": pod}
        shown = value / 100 if name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" else value
        return series(name, str(shown), **labels)

    shuffled = rows[:]
    rnd.shuffle(shuffled)
    first = parse("".join(map(line, rows)), source=SOURCE)
    again = parse("".join(map(line, shuffled)), source=SOURCE)
    assert first == again
    assert [(s.host, s.gpu) for s in first.samples] == sorted({(r[1], r[2]) for r in rows})
    for sample in first.samples:
        assert all(not math.isnan(v) for _, v in sample.pod_activity)
