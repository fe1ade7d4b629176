"""Options that several commands share, declared once so they read and behave alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

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
