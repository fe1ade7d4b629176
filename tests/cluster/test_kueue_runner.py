"""Kueue v0.17.0 as `make bench-e2e` runs it (tests/bench/e2e/kueue.py), end to end.

Opt-in (QC_BENCH_KUEUE=1): it builds Kueue from its Go module (minutes on 2 cores), so the
regular cluster tests do not.  It uses a local cluster of its own, never the session's, on
which our controller runs and would take Kueue's queue label for its own.
"""

from __future__ import annotations

import os

import pytest

from tests.bench.e2e.kueueselftest import selftest

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        os.environ.get("QC_BENCH_KUEUE") != "1",
        reason="builds Kueue from source; set QC_BENCH_KUEUE=1 to run",
    ),
]


def test_kueue_admits_a_gang_within_quota_and_holds_one_beyond_it() -> None:
    timings = selftest()
    assert timings["admitted_s"] < 60
