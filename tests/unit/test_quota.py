from queue_controller.core.quota.ledger import QuotaLedger
from tests.builders import GPU, gpus, quota


def test_resource_not_named_is_unlimited() -> None:
    ledger = QuotaLedger([quota("a", gpu=gpus(4))], {})
    assert ledger.available("a", "cpu") is None
    assert ledger.shortfall("a", {"cpu": 10**9}) is None


def test_quota_without_cohort_stops_at_nominal() -> None:
    ledger = QuotaLedger([quota("a", gpu=gpus(8))], {"a": {GPU: 6000}})
    assert ledger.available("a", GPU) == 2000
    short = ledger.shortfall("a", {GPU: 3000})
    assert short is not None
    assert (short.resource, short.needed, short.available) == (GPU, 3000, 2000)
    assert "needs 3, only 2 available (nominal 8, 6 in use)" in short.describe()


def test_cohort_lends_unused_nominal() -> None:
    ledger = QuotaLedger(
        [quota("a", "pool", gpu=gpus(8)), quota("b", "pool", gpu=gpus(8))], {"a": {GPU: 8000}}
    )
    assert ledger.available("a", GPU) == 8000
    assert ledger.available("b", GPU) == 8000


def test_borrowing_limit_caps_the_borrower() -> None:
    ledger = QuotaLedger(
        [quota("a", "pool", gpu=gpus(8, borrowing=2)), quota("b", "pool", gpu=gpus(8))], {}
    )
    assert ledger.available("a", GPU) == 10000
    short = ledger.shortfall("a", {GPU: 11000})
    assert short is not None
    assert "borrowing limit 2 from cohort pool" in short.describe()


def test_lending_limit_caps_what_a_lender_gives() -> None:
    ledger = QuotaLedger(
        [quota("a", "pool", gpu=gpus(8)), quota("b", "pool", gpu=gpus(8, lending=3))],
        {"a": {GPU: 8000}},
    )
    assert ledger.available("a", GPU) == 3000


def test_lender_keeps_its_guaranteed_part_but_not_what_was_lent() -> None:
    ledger = QuotaLedger(
        [quota("a", "pool", gpu=gpus(8)), quota("b", "pool", gpu=gpus(8, lending=3))],
        {"a": {GPU: 10000}},  # a borrowed 2 of b's lendable 3
    )
    # b is guaranteed 5; of its lendable 3, 2 are out on loan.
    assert ledger.available("b", GPU) == 6000


def test_reservations_update_the_pool() -> None:
    ledger = QuotaLedger([quota("a", "pool", gpu=gpus(4)), quota("b", "pool", gpu=gpus(4))], {})
    ledger.reserve("a", {GPU: 6000})
    assert ledger.used("a")[GPU] == 6000
    assert ledger.available("b", GPU) == 2000
    assert ledger.available("a", GPU) == 2000
    ledger.reserve("b", {GPU: 2000})
    assert ledger.available("a", GPU) == 0
    assert ledger.available("b", GPU) == 0


def test_overdrawn_pool_still_leaves_guaranteed_capacity() -> None:
    # Quotas shrank after admissions: a is far over, the pool is negative.
    ledger = QuotaLedger(
        [quota("a", "pool", gpu=gpus(2)), quota("b", "pool", gpu=gpus(8, lending=2))],
        {"a": {GPU: 10000}},
    )
    assert ledger.available("b", GPU) == 6000
    assert ledger.available("a", GPU) == 0


def test_shortfall_reports_the_scarcest_resource_first() -> None:
    ledger = QuotaLedger([quota("a", gpu=gpus(1), cpu=gpus(1))], {})
    short = ledger.shortfall("a", {"cpu": 5000, GPU: 5000})
    assert short is not None
    assert short.resource == GPU


def test_quotas_in_different_cohorts_do_not_share() -> None:
    ledger = QuotaLedger(
        [quota("a", "x", gpu=gpus(4)), quota("b", "y", gpu=gpus(4))], {"b": {GPU: 0}}
    )
    assert ledger.available("a", GPU) == 4000
