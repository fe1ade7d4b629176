"""Kubernetes resource quantities (``500m``, ``1Gi``, ``2``, ``1e3``).

Quantities are parsed exactly (as :class:`fractions.Fraction`) so that the
whole-number rule for extended resources can be checked without float error,
and then carried through the scheduler as integers in milli-units, rounded up
the way ``resource.Quantity.MilliValue()`` rounds.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

from queue_controller.errors import QuantityError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# Same grammar as apimachinery's quantity: a signed decimal number, then a
# binary-SI suffix, a decimal-SI suffix, or a decimal exponent.
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$"
)
# Resources whose amounts are byte counts read best with binary suffixes.
_BYTE_RESOURCES = ("memory", "ephemeral-storage", "storage")

QuantityInput = str | int | float


def parse_quantity(value: QuantityInput) -> Fraction:
    """Parse a quantity exactly; raise :class:`QuantityError` if it is not one."""
    if isinstance(value, bool):  # bool is an int subclass; `true` is never a quantity
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a quantity")
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity (expected a string or a number)")
    return _parse_text(value)


# Manifests repeat the same few strings ("8", "64Gi") thousands of times.
@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    match = _QUANTITY.match(value)  # no surrounding spaces, as in apimachinery
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (examples: 2, 500m, 16Gi, 1e3)")
    number = Fraction(match["number"])
    if match["sign"] == "-":
        number = -number
    suffix = match["suffix"]
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":  # a bare "E" is the exa suffix
        return number * Fraction(10) ** int(suffix[1:])
    return number * _DECIMAL[suffix]


@lru_cache(maxsize=8192)
def _exact_and_milli(value: QuantityInput) -> tuple[Fraction, int]:
    amount = parse_quantity(value)
    return amount, to_milli(amount)


def exact_and_milli(value: QuantityInput) -> tuple[Fraction, int]:
    """The exact amount and its milli-units, memoised: manifests repeat a few values."""
    try:
        return _exact_and_milli(value)
    except TypeError:  # unhashable (a list where a quantity belongs): not a quantity
        raise QuantityError(f"{value!r} is not a quantity") from None


def to_milli(amount: Fraction) -> int:
    """Milli-units, rounded up as Kubernetes does (``1n`` of CPU costs ``1m``)."""
    return math.ceil(amount * 1000)


def parse_milli(value: QuantityInput) -> int:
    """Parse a quantity straight into integer milli-units."""
    return to_milli(parse_quantity(value))


def format_milli(milli: int, resource: str = "") -> str:
    """Render milli-units the way a person would write the quantity."""
    if milli % 1000:
        return f"{milli}m"
    whole = milli // 1000
    if whole and (resource in _BYTE_RESOURCES or resource.startswith("hugepages-")):
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if whole % factor == 0:
                return f"{whole // factor}{suffix}"
    return str(whole)
