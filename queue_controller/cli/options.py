"""Options that several commands share, declared once so they read and behave alike."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import click

from queue_controller.errors import InputError

F = TypeVar("F", bound=Callable[..., object])

ENV_URL = "QC_JOURNAL_URL"
# queue_controller.journal.DEFAULT_URL, spelled out so that every other command does not
# pay for importing SQLAlchemy and Alembic (a test holds the two equal).
DEFAULT_URL = "sqlite:///queue-controller-journal.db"


def output_option(help: str = "`table` for people, `json` for machines.") -> Callable[[F], F]:
    """``-o/--output table|json``."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(["table", "json"]),
        default="table",
        show_default=True,
        help=help,
    )


def journal_option(help: str) -> Callable[[F], F]:
    """``--db URL`` for the decision journal, from ``QC_JOURNAL_URL`` if set."""
    return click.option(
        "--db",
        "url",
        metavar="URL",
        envvar=ENV_URL,
        default=DEFAULT_URL,
        show_default=True,
        show_envvar=True,
        help=help,
    )


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_DURATION_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?[smhd])+")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str, *, field: str) -> float:
    """``90s``, ``5m``, ``1h30m``, ``2d`` in seconds; a bare number is seconds."""
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    if not _DURATION_WHOLE.fullmatch(text):
        raise InputError(f"{value!r} is not a duration such as 90s, 5m or 1h30m", field=field)
    return sum(float(amount) * _SECONDS[unit] for amount, unit in _DURATION_PART.findall(text))
