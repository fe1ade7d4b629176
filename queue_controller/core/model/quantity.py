"""Kubernetes resource quantities (``500m``, ``1Gi``, ``2``, ``1e3``).

Quantities are parsed exactly (as :class:`fractions.Fraction`) so that the
whole-number rule for extended resources can be checked without float error,
and then carried through the scheduler as integers in milli-units, rounded up
the way ``resource.Quantity.MilliValue()`` rounds.

Bounded as apimachinery's ``ParseQuantity`` bounds it, so that no quantity a
tenant writes costs more than a constant to read:

* the grammar is apimachinery's: a signed decimal number, then a binary-SI
  suffix, a decimal-SI suffix, or ``e``/``E`` and a signed exponent that
  ``strconv.ParseInt`` reads as an int64 (anything longer is refused there
  too, as ``ErrSuffix``);
* a non-zero amount finer than a nano-unit is rounded up (away from zero) to
  the nano grid, as apimachinery rounds every parsed amount (``1e-999999999``
  is ``1n``); the amount stays an exact Fraction on that grid;
* an amount whose magnitude is above int64 (9223372036854775807, apimachinery's
  ``maxAllowed``) is refused.  apimachinery caps a binary-SI amount there and
  keeps a larger decimal one as an ``inf.Dec`` that its own int64 accessors
  (``Value``, ``MilliValue``) cannot return; nothing real is that large, and a
  refusal is plainer than a silent cap.  It is found from the exponent and the
  count of digits, before any power of ten is computed, so ``1e999999999``
  costs what ``1`` does (``Fraction(10) ** 999999999`` never finishes);
* a quantity is at most :data:`MAX_QUANTITY_CHARS` characters, checked first:
  apimachinery has no such limit, but a canonical quantity is under 30
  characters, and ``Fraction()`` of thousands of digits is slow or refused by
  Python itself (its 4,300-digit limit on ``int()``);
* an int or float given as a quantity (JSON and YAML numbers) is within
  int64 too, and a float is finite.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache

from queue_controller.errors import QuantityError, shown

# Same grammar as apimachinery's quantity: a signed decimal number, then a
# binary-SI suffix, a decimal-SI suffix, or a decimal exponent.
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<whole>[0-9]+)?(?:\.(?P<fraction>[0-9]*))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE]?)$"
)
# See the module's docstring for why each bound.
MAX_QUANTITY_CHARS = 100
MAX_AMOUNT = 2**63 - 1  # apimachinery's maxAllowed: int64
_INT64_DIGITS = 19
_NANO = 10**9
_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9}
_DECIMAL_EXPONENTS |= {"T": 12, "P": 15, "E": 18}
# Resources whose amounts are byte counts read best with binary suffixes.
_BYTE_RESOURCES = ("memory", "ephemeral-storage", "storage")

QuantityInput = str | int | float


def parse_quantity(value: QuantityInput) -> Fraction:
    """Parse a quantity exactly; raise :class:`QuantityError` if it is not one."""
    if isinstance(value, bool):  # bool is an int subclass; `true` is never a quantity
        raise QuantityError(f"{shown(value)} is not a quantity")
    if isinstance(value, int):
        if abs(value) > MAX_AMOUNT:
            raise QuantityError(f"{shown(value)} is out of range (at most {MAX_AMOUNT})")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{shown(value)} is not a quantity")
        if abs(value) > MAX_AMOUNT:
            raise QuantityError(f"{shown(value)} is out of range (at most {MAX_AMOUNT})")
        return _on_nano_grid(Fraction(repr(value)))
    if not isinstance(value, str):
        raise QuantityError(f"{shown(value)} is not a quantity (expected a string or a number)")
    if len(value) > MAX_QUANTITY_CHARS:
        raise QuantityError(
            f"{shown(value)} is not a quantity: longer than {MAX_QUANTITY_CHARS} characters"
        )
    return _parse_text(value)


def _on_nano_grid(amount: Fraction) -> Fraction:
    """Rounded up, away from zero, to a whole number of nano-units, as apimachinery rounds."""
    if (_NANO % amount.denominator) == 0:
        return amount
    nanos = math.ceil(abs(amount) * _NANO)
    return Fraction(nanos if amount > 0 else -nanos, _NANO)


# Manifests repeat the same few strings ("8", "64Gi") thousands of times.
@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    match = _QUANTITY.match(value)  # no surrounding spaces, as in apimachinery
    if match is None or (match["whole"] is None and not match["fraction"]):
        raise QuantityError(f"{shown(value)} is not a quantity (examples: 2, 500m, 16Gi, 1e3)")
    whole, fraction = match["whole"] or "", match["fraction"] or ""
    # The amount is digits * 10**exponent * 2**binary, with digits a whole number.
    digits = int(whole + fraction)
    exponent, binary = -len(fraction), 0
    suffix = match["suffix"]
    if suffix in _BINARY_EXPONENTS:
        binary = _BINARY_EXPONENTS[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE":  # a bare "E" is the exa suffix
        written = suffix[1:].lstrip("+-").lstrip("0")
        # strconv.ParseInt(exponent, 10, 64) would fail: apimachinery's ErrSuffix.
        if len(written) > _INT64_DIGITS or not -MAX_AMOUNT - 1 <= int(suffix[1:]) <= MAX_AMOUNT:
            raise QuantityError(f"{shown(value)} is not a quantity: its exponent is not an int64")
        exponent += int(suffix[1:])
    else:
        exponent += _DECIMAL_EXPONENTS[suffix]
    if digits == 0:
        return Fraction(0)
    # Bounds from the count of digits before any power is taken:
    # 10**(size - 1 + exponent) <= digits * 10**exponent < 10**(size + exponent).
    size = len(str(digits))
    if size - 1 + exponent > _INT64_DIGITS - 1:  # at least 10**19, above int64
        raise QuantityError(f"{shown(value)} is out of range (at most {MAX_AMOUNT})")
    sign = -1 if match["sign"] == "-" else 1
    if size + exponent < -9 and not binary:  # below one nano-unit: rounded up to it
        return Fraction(sign, _NANO)
    amount = Fraction(sign * digits * 2**binary) * Fraction(10) ** exponent
    if abs(amount) > MAX_AMOUNT:
        raise QuantityError(f"{shown(value)} is out of range (at most {MAX_AMOUNT})")
    return _on_nano_grid(amount)


@lru_cache(maxsize=8192)
def _exact_and_milli(value: QuantityInput) -> tuple[Fraction, int]:
    amount = parse_quantity(value)
    return amount, to_milli(amount)


def exact_and_milli(value: QuantityInput) -> tuple[Fraction, int]:
    """The exact amount and its milli-units, memoised: manifests repeat a few values."""
    try:
        return _exact_and_milli(value)
    except TypeError:  # unhashable (a list where a quantity belongs): not a quantity
        raise QuantityError(f"{shown(value)} is not a quantity") from None


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
