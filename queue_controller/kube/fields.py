"""Typed reads from raw Kubernetes objects (camelCase dicts), with field paths in errors.

kopf bodies, ``kubectl get -o yaml`` dumps and raw API responses all share
this shape, so one reader serves the controller and ``plan`` alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cache, lru_cache
from typing import Any, TypeVar

from queue_controller.errors import InputError

T = TypeVar("T")

Obj = Mapping[str, Any]


def describe(obj: Obj) -> str:
    """``Kind/namespace/name`` for messages."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    kind = obj.get("kind", "object")
    name = meta.get("name", "<unnamed>")
    namespace = meta.get("namespace")
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


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
        node = float(node)
    if not isinstance(node, kind) or (kind is int and isinstance(node, bool)):
        raise InputError(
            f"expected {_type_name(kind)}, got {type(node).__name__} {node!r}", field=path
        )
    return node


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
            raise InputError(f"expected a string, got {value!r}", field=f"{path}.{key}")
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
        raise InputError(f"expected an RFC 3339 time, got {raw!r}", field=path)
    seconds = _rfc3339(raw)
    if seconds is None:
        raise InputError(f"{raw!r} is not an RFC 3339 time", field=path)
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
