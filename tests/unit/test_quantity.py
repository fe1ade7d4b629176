from fractions import Fraction

import pytest

from queue_controller.core.model.quantity import format_milli, parse_milli, parse_quantity
from queue_controller.errors import QuantityError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2", Fraction(2)),
        ("500m", Fraction(1, 2)),
        ("1Gi", Fraction(2**30)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("16Ki", Fraction(16 * 1024)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1E", Fraction(10**18)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("5e-1", Fraction(1, 2)),
        ("100n", Fraction(1, 10**7)),
        ("250u", Fraction(1, 4000)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("+3", Fraction(3)),
        ("-1", Fraction(-1)),
        (8, Fraction(8)),
        (0.25, Fraction(1, 4)),
    ],
)
def test_parses_kubernetes_quantities_exactly(text: str | int | float, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "ten", "1.5.3", "1Gb", "Gi", "1 Gi x", "1e", "--1", "0x10"])
def test_rejects_what_is_not_a_quantity(text: str) -> None:
    with pytest.raises(QuantityError, match="is not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("value", [True, None, [1], float("nan"), float("inf")])
def test_rejects_non_quantity_types(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "milli"),
    [("1", 1000), ("500m", 500), ("1n", 1), ("0.0001", 1), ("1Ki", 1024_000), ("0", 0)],
)
def test_milli_units_round_up_like_kubernetes(text: str, milli: int) -> None:
    assert parse_milli(text) == milli


@pytest.mark.parametrize(
    ("milli", "resource", "shown"),
    [
        (500, "cpu", "500m"),
        (2000, "cpu", "2"),
        (8000, "nvidia.com/gpu", "8"),
        (2**30 * 1000, "memory", "1Gi"),
        (3 * 2**20 * 1000, "memory", "3Mi"),
        (1000 * 1000, "memory", "1000"),
        (2**40 * 1000, "ephemeral-storage", "1Ti"),
        (0, "memory", "0"),
    ],
)
def test_formats_quantities_as_people_write_them(milli: int, resource: str, shown: str) -> None:
    assert format_milli(milli, resource) == shown
    assert parse_milli(shown) == milli
