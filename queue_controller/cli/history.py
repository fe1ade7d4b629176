"""``queue-controller history``: what happened to a workload, and why, from the journal."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from queue_controller.cli.options import journal_option, output_option
from queue_controller.errors import InputError

if TYPE_CHECKING:
    from queue_controller.journal import Entry


_STYLE = {
    "Admitted": "green",
    "Pending": "yellow",
    "Evicted": "red",
    "Requeued": "yellow",
    "Deactivated": "red",
    "Finished": "blue",
    "Invalid": "red",
}
_DURATION = re.compile(r"(\d+)([smhd])")
_DURATIONS = re.compile(r"(?:\d+[smhd])+")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_since(value: str, *, now: datetime | None = None) -> datetime:
    """``1h``, ``30m``, ``1h30m``, ``2d`` ago, or an RFC 3339 time (UTC if it has no offset)."""
    text = value.strip()
    if _DURATIONS.fullmatch(text):
        delta = timedelta()
        for amount, unit in _DURATION.findall(text):
            delta += timedelta(**{_UNIT[unit]: int(amount)})
        return (now or datetime.now(tz=UTC)) - delta
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"{value!r} is neither a duration (30m, 1h, 2d) nor an RFC 3339 time", field="--since"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def parse_job(value: str) -> tuple[str, str]:
    namespace, slash, name = value.partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise InputError(
            f"{value!r}: expected NAMESPACE/NAME, such as prod/train-bert", field="--job"
        )
    return namespace, name


def _detail(entry: Entry) -> str:
    if entry.event == "Admitted" and entry.placement:
        return ", ".join(f"{node}: {pods}" for node, pods in entry.placement.items())
    return entry.message


def _time(entry: Entry) -> str:
    return entry.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(entries: list[Entry]) -> None:
    console = Console()
    table = Table(box=None, header_style="bold", pad_edge=False, expand=False)
    # Entries from more than one source (a simulation's policies, or a simulation beside
    # the controller) would look like repeats without saying which is which.
    mixed = len({entry.source for entry in entries}) > 1
    columns = ("TIME", "SOURCE") if mixed else ("TIME",)
    for column in (*columns, "WORKLOAD", "QUEUE", "EVENT", "REASON"):
        table.add_column(column, no_wrap=True)
    table.add_column("DETAIL", overflow="fold")
    for entry in entries:
        source = (escape(entry.source),) if mixed else ()
        table.add_row(
            _time(entry),
            *source,
            escape(entry.workload),
            escape(entry.queue),
            f"[{_STYLE.get(entry.event.value, 'default')}]{entry.event.value}[/]",
            escape(entry.reason),
            escape(_detail(entry)),
        )
    if not console.is_terminal:
        # Piped or redirected: no screen to fit, so each entry stays whole on one line.
        natural = Measurement.get(console, console.options.update(width=1 << 16), table)
        console = Console(width=max(natural.maximum, console.width))
    console.print(table)


@click.command()
@click.option("--job", metavar="NAMESPACE/NAME", help="Only this Job's entries.")
@click.option("-n", "--namespace", metavar="NS", help="Only entries for workloads in NS.")
@click.option(
    "--since",
    metavar="WHEN",
    help="Only entries at or after WHEN: a duration ago (30m, 1h, 2d) or an RFC 3339 time.",
)
@click.option(
    "--source",
    metavar="SOURCE",
    help='Only entries from SOURCE: "controller", "simulation:<run id>" (every policy '
    'of that run) or "simulation:<run id>:<policy>".',
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Show at most this many entries: the newest.",
)
@journal_option(
    "The journal: sqlite:///PATH (relative to the current directory) or "
    "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB."
)
@output_option()
def history(
    job: str | None,
    namespace: str | None,
    since: str | None,
    source: str | None,
    limit: int,
    url: str,
    output: str,
) -> None:
    """What happened to workloads, and why: admissions, pending reasons, evictions,
    requeues, deactivations and finishes, oldest first, from the decision journal.

    The journal outlives the Jobs and PodGroups it describes.
    """
    name = None
    if job is not None:
        job_namespace, name = parse_job(job)
        if namespace is not None and namespace != job_namespace:
            raise InputError(f"{namespace!r} contradicts --job {job}", field="--namespace")
        namespace = job_namespace
    start = parse_since(since) if since is not None else None
    # Imported here, not at the top, for the reason given at options.DEFAULT_URL.
    from queue_controller.journal import read_history
    from queue_controller.journal.database import SETTING

    try:
        entries = read_history(
            url, namespace=namespace, name=name, since=start, source=source, limit=limit
        )
    except InputError as error:
        if error.field != SETTING:
            raise
        raise InputError(error.detail, field="--db") from None
    if output == "json":
        click.echo(json.dumps({"entries": [e.as_dict() for e in entries]}, indent=2))
        return
    if not entries:
        click.echo("no journal entries match")
        return
    _table(entries)
