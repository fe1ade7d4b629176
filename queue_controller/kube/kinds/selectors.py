"""Kubernetes label selectors in their string form (``kubectl -l``), parsed and matched.

The managed namespaces (``--managed-namespace-selector``) are chosen by one, written
as the API's own selector strings are: requirements joined by commas, each one of

* ``key=value``, ``key==value``, ``key!=value``;
* ``key in (a,b)``, ``key notin (a,b)``;
* ``key`` (the label exists), ``!key`` (it does not).

As in Kubernetes, ``!=`` and ``notin`` also match an object without the label.  Keys
and values follow the API's label syntax (a key: an optional DNS-subdomain prefix and
``/``, then a name of at most 63 characters; a value: at most 63 characters), so a
selector the API server would refuse is refused here, before anything runs, with
the reason.  Parsing is linear in the text and bounded by :data:`MAX_SELECTOR_LENGTH`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from queue_controller.errors import InputError

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
MAX_SELECTOR_LENGTH = 4096
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"({_PREFIX}/)?{_NAME}")
_VALUE = re.compile(rf"({_NAME})?")
# One requirement: a set-based one, a comparison, or an existence test.
_SET = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EQUALITY = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(?P<not>!?)\s*(?P<key>[^\s!=(),]+)\s*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        inside = present and labels[self.key] in self.values
        return inside if self.operator == "In" else not inside


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """Every requirement must hold (an empty selector matches everything)."""

    requirements: tuple[Requirement, ...]
    text: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def _split(text: str) -> list[str]:
    """The requirements: split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
            if depth > 1:
                raise ValueError("nested parentheses")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("')' without '('")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("'(' without ')'")
    parts.append(text[start:])
    return parts


def _key(key: str) -> str:
    if not _KEY.fullmatch(key) or len(key.partition("/")[0]) > 253:
        raise ValueError(f"{key!r} is not a label key")
    return key


def _value(value: str) -> str:
    if not _VALUE.fullmatch(value):
        raise ValueError(f"{value!r} is not a label value")
    return value


def _requirement(part: str) -> Requirement:
    if not part.strip():
        raise ValueError("an empty requirement (two commas, or one at an end)")
    if found := _SET.match(part):
        values = tuple(_value(v.strip()) for v in found["values"].split(","))
        if values == ("",):
            raise ValueError(f"{part.strip()!r}: the set of values is empty")
        op: Operator = "In" if found["op"] == "in" else "NotIn"
        return Requirement(_key(found["key"]), op, tuple(sorted(set(values))))
    if found := _EQUALITY.match(part):
        op = "NotIn" if found["op"] == "!=" else "In"
        return Requirement(_key(found["key"]), op, (_value(found["value"]),))
    if found := _EXISTS.match(part):
        op = "DoesNotExist" if found["not"] else "Exists"
        return Requirement(_key(found["key"]), op)
    raise ValueError(
        f"{part.strip()!r} is not a requirement: write key=value, key!=value, "
        "key in (a,b), key notin (a,b), key or !key"
    )


def parse_selector(text: str, *, where: str = "selector", field: str = "") -> LabelSelector:
    """The selector ``text`` says; InputError naming ``where``/``field`` if it says none."""
    try:
        if len(text) > MAX_SELECTOR_LENGTH:
            raise ValueError(f"longer than {MAX_SELECTOR_LENGTH} characters")
        parts = _split(text) if text.strip() else []
        return LabelSelector(tuple(_requirement(p) for p in parts), text)
    except ValueError as error:
        raise InputError(
            f"{text[:200]!r} is no label selector: {error}", where=where, field=field
        ) from None
