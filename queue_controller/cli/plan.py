"""``queue-controller plan``: what would be admitted now, where, and why the rest waits."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import click

from queue_controller.cli.options import output_option
from queue_controller.cli.render import decisions_table
from queue_controller.core import schedule
from queue_controller.core.pacing import DEFAULT_CREATION_BACKLOG
from queue_controller.dump import bundled_example, decode, load_snapshot, read_file
from queue_controller.errors import InputError


def _parse_now(value: str | None) -> float:
    if value is None:
        return datetime.now(tz=UTC).timestamp()
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InputError(f"{value!r} is not an RFC 3339 time", field="--now") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _read_stdin() -> str:
    # As bytes, so that a dump that is not UTF-8 is refused like such a file, with
    # one line, rather than failing inside the locale's text decoder or the YAML parser.
    binary = getattr(sys.stdin, "buffer", None)
    if binary is None:  # already text (a test harness, an embedding program)
        return sys.stdin.read()
    return decode("<stdin>", binary.read())


@click.command()
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    metavar="DUMP",
    help="Cluster dump: YAML or JSON, multi-document or a `kind: List` (what "
    "`kubectl get nodes,pods,jobs,priorityclasses,queues,teamquotas,cohorts,topologies,"
    "podgroups -A -o yaml` "
    "prints). Repeat to combine files; `-` reads standard input. "
    "Default: the bundled example cluster.",
)
@output_option()
@click.option(
    "--now",
    metavar="TIME",
    help="Evaluate requeue backoff at this RFC 3339 time instead of the current time.",
)
@click.option(
    "--ignore-unknown",
    is_flag=True,
    help="Skip objects of kinds plan does not read (Services, ConfigMaps, ...) instead of failing.",
)
@click.option(
    "--creation-backlog",
    type=click.IntRange(min=0),
    default=DEFAULT_CREATION_BACKLOG,
    show_default=True,
    help="Pace admission as a controller run with --creation-backlog does: gangs wait "
    "(PodCreationBacklog) while admitted Jobs' pods not made yet would pass this many. "
    "0: no limit.",
)
def plan(
    files: tuple[str, ...],
    output: str,
    now: str | None,
    ignore_unknown: bool,
    creation_backlog: int,
) -> None:
    """Decide offline which pending gangs would be admitted, where, and why the rest wait.

    Runs the same admission cycle as the controller over a cluster dump and
    prints one decision per pending gang, in the order they are considered:
    Admit (with the node for every member), Pending (with a stable reason
    and what is short), or Invalid.
    """
    sources = [
        ("<stdin>", _read_stdin()) if path == "-" else (path, read_file(path)) for path in files
    ] or [bundled_example()]
    snapshot, skipped = load_snapshot(sources, now=_parse_now(now), ignore_unknown=ignore_unknown)
    result = schedule(snapshot, creation_backlog=creation_backlog or None)
    if output == "json":
        payload = {"decisions": [d.as_dict() for d in result.decisions]}
        click.echo(json.dumps(payload, indent=2))
        return
    decisions_table(result.decisions, snapshot=snapshot, skipped=skipped)
