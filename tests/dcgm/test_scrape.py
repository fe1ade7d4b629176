"""Scraping real HTTP targets end to end: live, dead, hung and garbage-serving exporters."""

from __future__ import annotations

import pytest

from queue_controller.errors import InputError
from queue_controller.gpuhealth.scrape import Fetched, scrape
from tests.dcgm.conftest import Exporters, recorded

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def test_every_target_s_gpus_come_back_in_host_order(exporters: Exporters) -> None:
    urls = [
        exporters.serve("/n2/metrics", recorded("xid79-h100.txt")),
        exporters.serve("/n1/metrics", recorded("healthy-a100.txt")),
    ]
    result = scrape(urls)
    assert result.errors == []
    assert result.skipped == 0
    hosts = [s.host for s in result.samples]
    assert hosts == ["gpu-a100-01"] * 8 + ["gpu-h100-07"] * 8
    assert [s.gpu for s in result.samples if s.xid] == [3]


def test_a_dead_target_is_an_error_line_and_the_others_still_count(
    exporters: Exporters, dead_url: str
) -> None:
    live = exporters.serve("/metrics", recorded("healthy-a100.txt"))
    result = scrape([dead_url, live])
    assert result.errors == [f"{dead_url}: connection refused"]
    assert len(result.samples) == 8


def test_a_target_serving_garbage_is_an_error_line_naming_it(exporters: Exporters) -> None:
    garbage = exporters.serve("/grafana", "<!DOCTYPE html>\n<html>login</html>\n")
    live = exporters.serve("/metrics", recorded("xid13-l40s.txt"))
    result = scrape([garbage, live])
    (error,) = result.errors
    assert error.startswith(f"{garbage}: line 1: not the Prometheus text exposition format")
    assert len(result.samples) == 4


def test_http_errors_and_hung_targets_are_error_lines(exporters: Exporters) -> None:
    missing = exporters.base + "/nothing-here"
    broken = exporters.serve("/broken", "oops", status=500)
    hung = exporters.serve("/hung", recorded("healthy-a100.txt"), delay=1.0)
    result = scrape([missing, broken, hung], timeout=0.2)
    assert result.errors == [
        f"{missing}: HTTP 404 Not Found",
        f"{broken}: HTTP 500 Internal Server Error",
        f"{hung}: no answer within 0.2s",
    ]
    assert result.samples == []


def test_a_later_target_wins_for_the_same_gpu(exporters: Exporters) -> None:
    old = recorded("xid79-h100.txt")
    fixed = old.replace("} 79\n", "} 0\n")  # the GPU was reset since
    urls = [exporters.serve("/federate", old), exporters.serve("/direct", fixed)]
    assert {s.xid for s in scrape(urls).samples} == {0}
    assert {s.xid for s in scrape(urls[::-1]).samples} == {0, 79}


def test_federate_counts_skipped_series(exporters: Exporters) -> None:
    url = exporters.serve("/federate", recorded("federate-h100.txt"))
    result = scrape([url + "?match[]=%7B__name__%3D~%22DCGM_FI_.%2A%22%7D"])
    assert (result.skipped, len(result.samples), result.errors) == (1, 4, [])


def test_an_openmetrics_answer_is_read_as_openmetrics(exporters: Exporters) -> None:
    body = "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
    body += 'DCGM_FI_DEV_XID_ERRORS{Hostname="n",gpu="0"} 48\n# EOF\n'
    url = exporters.serve("/om", body, content_type=OPENMETRICS)
    assert [s.xid for s in scrape([url]).samples] == [48]
    # The same text without its # EOF is not OpenMetrics.
    cut = exporters.serve("/om-cut", body.replace("# EOF\n", ""), content_type=OPENMETRICS)
    (error,) = scrape([cut]).errors
    assert "OpenMetrics" in error


def test_a_malformed_url_is_an_error_line_too() -> None:
    (error,) = scrape(["gpu-node-1:9400/metrics"]).errors
    assert error == "gpu-node-1:9400/metrics: unknown url type: gpu-node-1"


def test_no_targets_no_samples() -> None:
    assert scrape([]).samples == []


def test_the_opener_can_be_replaced() -> None:
    def opener(url: str, timeout: float) -> Fetched:
        return Fetched(text=f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{url}",gpu="1"}} 0\n')

    assert [s.host for s in scrape(["a", "b"], opener=opener).samples] == ["a", "b"]


def test_a_timeout_must_be_positive() -> None:
    with pytest.raises(InputError, match="timeout"):
        scrape([], timeout=0)
