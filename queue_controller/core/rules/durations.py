"""Durations and instants as messages show them."""

from __future__ import annotations

from datetime import UTC, datetime


def duration_text(seconds: float) -> str:
    """A short, rounded duration for messages: 45s, 12m, 3h, 2d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{max(seconds, 0):.0f}s"


def instant_text(at: float) -> str:
    """Seconds since the epoch as an RFC 3339 time, to the second."""
    return datetime.fromtimestamp(at, tz=UTC).isoformat(timespec="seconds")
