"""Typed reads from raw Kubernetes objects (camelCase dicts), with field paths in errors.

kopf bodies, ``kubectl get -o yaml`` dumps and raw API responses all share
this shape, so one reader serves the controller and ``plan`` alike.

Numbers are bounded as the API server bounds them, so no value a tenant can
write costs more than a constant to read or crashes a reader:

* an integer field is within int64 (the API's widest integer); JSON and YAML
  give Python ints of any size, and a value past int64 could never have come
  from the API server;
* a float is finite (YAML's ``.inf`` and ``.nan`` are floats);
* a whole number written in a string (an annotation) is read by
  :func:`whole_number`: ASCII digits only, no sign, at most 19 of them (int64's
  width), so it is refused before ``int()`` sees it.  ``str.isdigit`` is not
  enough: it accepts ``"²"``, which ``int()`` then refuses, and ``"١٢"``,
  which ``int()`` reads as 12.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache, lru_cache
from typing import Any, TypeVar

from queue_controller.errors import InputError, plain, shown

T = TypeVar("T")

Obj = Mapping[str, Any]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Digits of INT64_MAX: a longer run of digits cannot be an int64, and is refused
# before int() (Python refuses over 4,300 digits itself, with a ValueError).
_INT64_DIGITS = len(str(INT64_MAX))
# Kubernetes' documented largest cluster holds 150,000 pods (the "considerations
# for large clusters" page), so no gang can have more members.  The core does
# work for each member (placement, binding), so a count above this is refused
# rather than trusted: spec.parallelism alone may be 2**31 - 1.
MAX_GANG_MEMBERS = 150_000


def describe(obj: Obj) -> str:
    """``Kind/namespace/name`` for messages."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    # Each part as written when it is a string, else quoted short (a tenant's name
    # may be a 5,000-deep list, or its kind a 5,000-digit number).
    kind, name, namespace = (
        plain(part)
        for part in (
            obj.get("kind", "object"),
            meta.get("name", "<unnamed>"),
            meta.get("namespace"),
        )
    )
    return f"{kind}/{namespace}/{name}" if meta.get("namespace") else f"{kind}/{name}"


@cache
def _parts(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


def _is_object(node: object) -> bool:
    # A plain dict first: nearly every node is one, and the ABC check costs ten times
    # as much (this runs for every field of every object at every cycle).
    return type(node) is dict or isinstance(node, Mapping)


def get(obj: Obj, path: str, kind: type[T], default: T) -> T:
    """``obj[path]`` for a dotted path, or ``default`` when absent or null."""
    node: Any = obj
    for part in _parts(path):
        if not _is_object(node):
            raise InputError(f"expected an object, got {type(node).__name__}", field=path)
        node = node.get(part)
        if node is None:
            return default
    if kind is float and isinstance(node, int) and not isinstance(node, bool):
        if not INT64_MIN <= node <= INT64_MAX:
            raise InputError(f"{shown(node)} is out of range", field=path)
        node = float(node)
    # Bounded first, while node is still Any: an int past int64 or a float past
    # finite is no value the API server could have given.
    if type(node) is int and not INT64_MIN <= node <= INT64_MAX:
        raise InputError(f"{shown(node)} is out of range (an int64)", field=path)
    if type(node) is float and not math.isfinite(node):
        raise InputError(f"{shown(node)} is not a finite number", field=path)
    if not isinstance(node, kind) or (kind is int and isinstance(node, bool)):
        raise InputError(
            f"expected {_type_name(kind)}, got {type(node).__name__} {shown(node)}", field=path
        )
    return node


def whole_number(raw: object, *, field: str, maximum: int = INT64_MAX) -> int:
    """A count written in a string (an annotation): ASCII digits, no sign, ``<= maximum``.

    Raises :class:`InputError` naming ``field`` otherwise, without calling
    ``int()`` on anything but a short run of ASCII digits.
    """
    if not isinstance(raw, str):
        raise InputError(f"expected a string of digits, got {shown(raw)}", field=field)
    if not (raw.isascii() and raw.isdigit()):
        raise InputError(f"{shown(raw)} is not a whole number (ASCII digits 0-9)", field=field)
    if len(raw.lstrip("0")) > _INT64_DIGITS:
        raise InputError(f"{shown(raw)} is too large (at most {maximum})", field=field)
    value = int(raw)
    if value > maximum:
        raise InputError(f"{raw} is too large (at most {maximum})", field=field)
    return value


def objects(obj: Obj, path: str) -> list[Mapping[str, Any]]:
    """A list of objects at ``path``, each checked to be an object."""
    items = get(obj, path, list, [])
    for i, item in enumerate(items):
        if not _is_object(item):
            raise InputError(f"expected an object, got {type(item).__name__}", field=f"{path}[{i}]")
    return items


def strings(obj: Obj, path: str) -> dict[str, str]:
    """A string-to-string map such as labels or a nodeSelector."""
    raw = get(obj, path, dict, {})
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(value, str):
            raise InputError(f"expected a string, got {shown(value)}", field=f"{path}.{key}")
        out[str(key)] = value
    return out


def timestamp(obj: Obj, path: str) -> float | None:
    """An RFC 3339 time as seconds since the epoch."""
    raw = obj
    for part in _parts(path):
        raw = raw.get(part) if _is_object(raw) else None  # type: ignore[assignment]
    if raw is None:
        return None
    if isinstance(raw, datetime):  # YAML loaders turn unquoted timestamps into datetimes
        return epoch_seconds(raw)
    if not isinstance(raw, str):
        raise InputError(f"expected an RFC 3339 time, got {shown(raw)}", field=path)
    seconds = _rfc3339(raw)
    if seconds is None:
        raise InputError(f"{shown(raw)} is not an RFC 3339 time", field=path)
    return seconds


@lru_cache(maxsize=65536)
def _rfc3339(text: str) -> float | None:
    """Seconds since the epoch, or None if ``text`` is no time.  Cached: a cluster's
    objects share few distinct timestamps, and every cycle reads all of them."""
    try:
        return epoch_seconds(datetime.fromisoformat(text))
    except ValueError:
        return None


def iso(moment: float) -> str:
    """Seconds since the epoch as the RFC 3339 UTC time the API writes."""
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_seconds(moment: datetime) -> float:
    """Kubernetes times are UTC; a time written without a zone is read as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _type_name(kind: type) -> str:
    return {dict: "an object", list: "a list", str: "a string", int: "an integer"}.get(
        kind, kind.__name__
    )
