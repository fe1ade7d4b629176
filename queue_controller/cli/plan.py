"""``queue-controller plan``: what would be admitted now, where, and why the rest waits."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import click

from queue_controller.cli.eta import forecast_options, print_etas
from queue_controller.cli.options import output_option, parse_duration
from queue_controller.cli.render import decisions_table
from queue_controller.core import schedule
from queue_controller.core.cycle import DEFAULT_CREATION_BACKLOG
from queue_controller.dump import LeftOut, bundled_example, decode, load_dump, read_file
from queue_controller.errors import InputError
from queue_controller.sim.forecast import forecast


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
@click.option(
    "--eta",
    "with_eta",
    is_flag=True,
    help="Also estimate when each pending gang starts (as `queue-controller eta`): the "
    "table after the decisions', or `etas` in the JSON.",
)
@forecast_options
def plan(
    files: tuple[str, ...],
    output: str,
    now: str | None,
    ignore_unknown: bool,
    creation_backlog: int,
    with_eta: bool,
    horizon: str,
    max_cycles: int,
) -> None:
    """Decide offline which pending gangs would be admitted, where, and why the rest wait.

    Runs the same admission cycle as the controller over a cluster dump and
    prints one decision per pending gang, in the order they are considered:
    Admit (with the node for every member), Pending (with a stable reason
    and what is short), or Invalid.

    \b
    An object that cannot be read (a bad field, no name, the same object
    twice) is left out and named on stderr ("left out: OBJECT: FIELD: WHY")
    and in the JSON's `left_out`; the rest is decided as if it were not there,
    as the controller does.  A workload with a bad field is decided Invalid.
    With --eta, each pending gang's estimated start follows (see `queue-controller
    eta --help`): running gangs end at their runtime estimates and pending ones
    are admitted in order by the same cycle; in JSON it is `etas`.
    Exit codes: 0 decided (even with objects left out); 2 the dump as a whole
    cannot be read (not YAML, a key twice in one mapping, a document that is
    not an object, an unknown kind without --ignore-unknown) or a bad option.
    """
    sources = [
        ("<stdin>", _read_stdin()) if path == "-" else (path, read_file(path)) for path in files
    ] or [bundled_example()]
    horizon_seconds = parse_duration(horizon, field="--horizon")
    loaded = load_dump(sources, now=_parse_now(now), ignore_unknown=ignore_unknown)
    _say_left_out(loaded.left_out)
    result = schedule(loaded.snapshot, creation_backlog=creation_backlog or None)
    # The forecast's first cycle is this very decision: it runs the same core onward.
    ahead = (
        forecast(
            loaded.snapshot,
            horizon_seconds=horizon_seconds,
            max_cycles=max_cycles,
            creation_backlog=creation_backlog or None,
        )
        if with_eta
        else None
    )
    if output == "json":
        payload: dict[str, object] = {
            "decisions": [d.as_dict() for d in result.decisions],
            "left_out": [item.as_dict() for item in loaded.left_out],
        }
        if ahead is not None:
            payload["etas"] = [e.as_dict(now=ahead.now) for e in ahead.etas]
        click.echo(json.dumps(payload, indent=2))
        return
    decisions_table(
        result.decisions,
        snapshot=loaded.snapshot,
        skipped=loaded.skipped,
        left_out=len(loaded.left_out),
    )
    if ahead is not None:
        click.echo()
        print_etas(ahead, ahead.etas, output)


def _say_left_out(left_out: tuple[LeftOut, ...]) -> None:
    # On stderr in both forms: never mixed into JSON, and never lost when only the
    # table is read.  One line each, whatever the object's text held.
    for item in left_out:
        click.echo(f"left out: {' '.join(str(item).split())}", err=True)
