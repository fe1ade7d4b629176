"""Human units and Markdown tables for the simulation report."""

from __future__ import annotations

NONE = "—"


def percent(value: float | None) -> str:
    return NONE if value is None else f"{value * 100:.1f}%"


def duration(seconds: float | None) -> str:
    """``35 s``, ``12.5 min``, ``3.2 h``."""
    if seconds is None:
        return NONE
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def gpu_hours(hours: float) -> str:
    return f"{hours:,.1f} GPU-h"


def count(value: int) -> str:
    return f"{value:,}"


def md(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[str]], *, numeric_from: int = 1) -> list[str]:
    align = [":--" if i < numeric_from else "--:" for i in range(len(header))]
    lines = ["| " + " | ".join(md(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in rows]
    return lines
