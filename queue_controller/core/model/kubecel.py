"""The Kubernetes CEL libraries that DRA selectors use: quantities and semantic versions.

Kubernetes adds these to CEL as types with member functions
(``device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi"))``,
``semver("1.2.3").major()``).  Here they are plain Python values plus a table of
functions for the CEL interpreter: a member call ``x.f(y)`` reaches ``f(x, y)``,
so one name serves every type that has the method, and each function checks its
operands itself (a wrong operand is a runtime error, as in Kubernetes).

Quantities are held in milli-units, the scheduler's unit everywhere else (see
:mod:`queue_controller.core.model.quantity`); a quantity finer than a milli-unit is
rounded up, which no device capacity needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import total_ordering
from typing import Any

from celpy import celtypes

from queue_controller.core.model.quantity import format_milli, parse_milli
from queue_controller.errors import QuantityError


@dataclass(frozen=True, order=True)
class Quantity:
    """A Kubernetes quantity inside a CEL expression; compared by amount (1Gi == 1024Mi)."""

    milli: int

    def __str__(self) -> str:
        return format_milli(self.milli)


# semver.org 2.0.0, as blang/semver (which Kubernetes uses) parses it: no leading
# zeros in numbers, dot-separated pre-release identifiers, build metadata ignored
# when comparing.
_NUMBER = r"0|[1-9][0-9]*"
_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = re.compile(
    rf"^(?P<major>{_NUMBER})\.(?P<minor>{_NUMBER})\.(?P<patch>{_NUMBER})"
    rf"(?:-(?P<pre>{_PRE_ID}(?:\.{_PRE_ID})*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


# A DRA version attribute is at most 64 characters (resource.k8s.io's limit).
_MAX_SEMVER_CHARS = 64


@total_ordering
@dataclass(frozen=True)
class Semver:
    """A semantic version; ordered by precedence (build metadata does not count)."""

    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()
    build: str = ""

    @classmethod
    def parse(cls, text: str) -> Semver:
        """Parse a version; raise ValueError if it is not semver 2.0.0 (``550.54.15``)."""
        # blang/semver reads each number with strconv.ParseUint(.., 64): at most 20
        # digits, and a longer text is no version (int() refuses 4,300 digits itself).
        match = _SEMVER.match(text) if len(text) <= _MAX_SEMVER_CHARS else None
        if match is None or any(len(match[k]) > 20 for k in ("major", "minor", "patch")):
            raise ValueError(f"{text[:64]!r} is not a semantic version (example: 1.2.3)")
        pre = tuple(match["pre"].split(".")) if match["pre"] else ()
        return cls(
            int(match["major"]), int(match["minor"]), int(match["patch"]), pre, match["build"] or ""
        )

    def precedence(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        # A release outranks its pre-releases; numeric identifiers rank below
        # alphanumeric ones and compare as numbers.
        ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 0 if self.pre else 1, ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.precedence() == other.precedence()

    def __lt__(self, other: Semver) -> bool:
        return self.precedence() < other.precedence()

    def __hash__(self) -> int:
        return hash(self.precedence())

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(self.pre)
        return text + (f"+{self.build}" if self.build else "")


def _sign(difference: int) -> celtypes.IntType:
    return celtypes.IntType((difference > 0) - (difference < 0))


def _keys(name: str, a: object, b: object) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """Sort keys of both operands, which must be of one of the two types; TypeError otherwise."""
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return (a.milli,), (b.milli,)
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.precedence(), b.precedence()
    raise TypeError(f"no such overload: {type(a).__name__}.{name}({type(b).__name__})")


def _compare_to(a: object, b: object) -> celtypes.IntType:
    x, y = _keys("compareTo", a, b)
    return celtypes.IntType(-1 if x < y else int(x != y))


def _is_greater_than(a: object, b: object) -> celtypes.BoolType:
    x, y = _keys("isGreaterThan", a, b)
    return celtypes.BoolType(x > y)


def _is_less_than(a: object, b: object) -> celtypes.BoolType:
    x, y = _keys("isLessThan", a, b)
    return celtypes.BoolType(x < y)


def _quantity(text: object) -> Quantity:
    if not isinstance(text, str):
        raise TypeError(f"quantity() takes a string, not {type(text).__name__}")
    try:
        return Quantity(parse_milli(text))
    except QuantityError as error:
        raise ValueError(error.detail) from None


def _is_quantity(text: object) -> celtypes.BoolType:
    try:
        _quantity(text)
    except (TypeError, ValueError):
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _as_quantity(value: object, name: str) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Quantity(value * 1000)
    raise TypeError(f"no such overload: Quantity.{name}({type(value).__name__})")


def _add(a: object, b: object) -> Quantity:
    return Quantity(_as_quantity(a, "add").milli + _as_quantity(b, "add").milli)


def _sub(a: object, b: object) -> Quantity:
    return Quantity(_as_quantity(a, "sub").milli - _as_quantity(b, "sub").milli)


def _as_integer(q: object) -> celtypes.IntType:
    milli = _as_quantity(q, "asInteger").milli
    if milli % 1000:
        # Kubernetes: "cannot convert value to integer" for a fractional quantity.
        raise ValueError(f"{format_milli(milli)} is not a whole number")
    return celtypes.IntType(milli // 1000)


def _is_integer(q: object) -> celtypes.BoolType:
    return celtypes.BoolType(_as_quantity(q, "isInteger").milli % 1000 == 0)


def _as_approximate_float(q: object) -> celtypes.DoubleType:
    return celtypes.DoubleType(_as_quantity(q, "asApproximateFloat").milli / 1000)


def _quantity_sign(q: object) -> celtypes.IntType:
    return _sign(_as_quantity(q, "sign").milli)


def _semver(text: object) -> Semver:
    if not isinstance(text, str):
        raise TypeError(f"semver() takes a string, not {type(text).__name__}")
    return Semver.parse(text)


def _is_semver(text: object) -> celtypes.BoolType:
    try:
        _semver(text)
    except (TypeError, ValueError):
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _part(name: str) -> Callable[[object], celtypes.IntType]:
    def part(version: object) -> celtypes.IntType:
        if not isinstance(version, Semver):
            raise TypeError(f"no such overload: {type(version).__name__}.{name}()")
        return celtypes.IntType(getattr(version, name))

    return part


# Every name a selector may call beyond standard CEL.  `sign` is only the
# quantity's (semver has none); `compareTo`, `isGreaterThan` and `isLessThan`
# serve both types.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "add": _add,
    "sub": _sub,
    "asInteger": _as_integer,
    "isInteger": _is_integer,
    "asApproximateFloat": _as_approximate_float,
    "sign": _quantity_sign,
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _part("major"),
    "minor": _part("minor"),
    "patch": _part("patch"),
}
