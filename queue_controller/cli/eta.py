"""``queue-controller eta``: when each pending gang should start, and what it waits for.

The live cluster is read as ``check`` reads it (every watched kind, listed once) and
translated by the controller's own adapter (``kube/snapshot.translate``); the
forecast (``sim/forecast``) then runs that state forward with the same core.
``plan --eta`` prints the same table over a dump (:func:`print_etas`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from queue_controller.cli.options import output_option, parse_duration
from queue_controller.core import Snapshot, WorkloadPhase
from queue_controller.core.rules.durations import duration_text, instant_text
from queue_controller.errors import InputError
from queue_controller.sim.forecast import DEFAULT_MAX_CYCLES, Eta, Forecast, forecast


def _eta_text(eta: Eta, now: float) -> str:
    if eta.start is None:
        return f"unknown ({eta.reason.value})"
    when = "now" if eta.start <= now else f"in {duration_text(eta.start - now)}"
    return f"{when} ({instant_text(eta.start)})"


def _source_text(eta: Eta) -> str:
    runtime = eta.runtime
    if runtime.seconds is None:
        return runtime.source.value
    return f"{runtime.source.value}, runs {duration_text(runtime.seconds)}"


def _waits_text(eta: Eta, *, most: int = 3) -> str:
    """What it waits for now (the cycle's reason and message), and the gangs whose ends
    free its room; the forecast's own message is in ``-o json``."""
    now = eta.waits_for
    if now is None:
        return eta.message
    current = f"{now.reason.value}: {now.message}"
    if not eta.after:
        return current
    names = [key.split("/", 1)[1] for key in eta.after[:most]]
    more = f" and {len(eta.after) - most} more" if len(eta.after) > most else ""
    return f"{current}; room frees as {', '.join(names)}{more} end"


def etas_table(result: Forecast, etas: Sequence[Eta], console: Console | None = None) -> None:
    """NAME, QUEUE, ETA, SOURCE, WAITS FOR: one row per gang, for people."""
    piped = console is None
    console = console or Console()
    piped = piped and not console.is_terminal
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("NAME", no_wrap=True)
    table.add_column("QUEUE", no_wrap=True)
    table.add_column("ETA", no_wrap=True)
    table.add_column("SOURCE", no_wrap=True)
    table.add_column("WAITS FOR", overflow="fold")
    for eta in etas:
        style = "green" if eta.known else "yellow"
        table.add_row(
            escape(eta.namespaced_name),
            escape(eta.queue),
            f"[{style}]{escape(_eta_text(eta, result.now))}[/]",
            escape(_source_text(eta)),
            escape(_waits_text(eta)),
        )
    if piped:
        # Piped (grep, a log): every row whole on one line, as plan's table is.
        natural = Measurement.get(console, console.options.update(width=1 << 16), table)
        console = Console(width=max(natural.maximum, console.width))
    console.print(table)
    known = sum(1 for e in etas if e.known)
    console.print(
        f"{len(etas)} pending gangs: {known} with an estimated start, {len(etas) - known} "
        f"unknown (the forecast ran {result.cycles} cycle{'s' if result.cycles != 1 else ''}; "
        f"{result.stopped})"
    )


def etas_json(result: Forecast, etas: Sequence[Eta]) -> dict[str, object]:
    return {
        "now": instant_text(result.now),
        "forecast": {"cycles": result.cycles, "stopped": result.stopped},
        "etas": [eta.as_dict(now=result.now) for eta in etas],
    }


def print_etas(result: Forecast, etas: Sequence[Eta], output: str) -> None:
    if output == "json":
        click.echo(json.dumps(etas_json(result, etas), indent=2))
    else:
        etas_table(result, etas)


def select(
    snapshot: Snapshot, result: Forecast, *, gang: str | None, namespace: str | None
) -> list[Eta]:
    """The estimates asked for: one gang (NS/NAME), a namespace's, or all (both None).

    A gang that does not exist, or is not pending, is an :class:`InputError`: one line.
    """
    if gang is None:
        return [
            e for e in result.etas if namespace is None or e.workload.split("/")[1] == namespace
        ]
    ns, _, name = gang.partition("/")
    if not ns or not name or "/" in name:
        raise InputError(f"{gang!r} is not NAMESPACE/NAME", field="NS/NAME")
    found = [w for w in snapshot.workloads if w.namespace == ns and w.name == name]
    if not found:
        raise InputError(
            "no such gang: no queued workload has a PodGroup of that name", where=f"{ns}/{name}"
        )
    for workload in found:
        eta = result.of(workload.key)
        if eta is not None:
            return [eta]
    phase = found[0].phase
    said = "admitted (it holds its quota)" if phase is WorkloadPhase.ADMITTED else "finished"
    raise InputError(f"not pending: it is {said}", where=f"{ns}/{name}")


def live_snapshot(kubeconfig: Path | None, *, now: float) -> Snapshot:
    """The live cluster, through the controller's one translation (what ``check`` lists)."""
    from queue_controller.check.looks import cluster_objects
    from queue_controller.dump import translate_all
    from queue_controller.kube.credentials import api_client
    from queue_controller.kube.gateway import Gateway

    gateway = Gateway(api_client(kubeconfig))
    translation, left_out = translate_all(cluster_objects(gateway), now=now)
    for item in left_out:
        click.echo(f"left out: {' '.join(str(item).split())}", err=True)
    return translation.snapshot


def forecast_options(function: click.decorators.FC) -> click.decorators.FC:
    """``--horizon`` and ``--max-cycles``, shared with ``plan --eta``."""
    function = click.option(
        "--max-cycles",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_CYCLES,
        show_default=True,
        help="The forecast's bound: admission cycles run at most (each one cycle of the core).",
    )(function)
    return click.option(
        "--horizon",
        default="7d",
        show_default=True,
        metavar="DURATION",
        help="How far ahead the forecast looks (90s, 5m, 1h, 7d); later starts are unknown "
        "(BeyondHorizon).",
    )(function)


@click.command()
@click.argument("gang", required=False, metavar="[NS/NAME]")
@click.option("-n", "--namespace", help="Every pending gang in this namespace.")
@click.option("-A", "--all-namespaces", is_flag=True, help="Every pending gang in the cluster.")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    help="Default: in-cluster, then ~/.kube/config.",
)
@output_option()
@forecast_options
def eta(
    gang: str | None,
    namespace: str | None,
    all_namespaces: bool,
    kubeconfig: Path | None,
    output: str,
    horizon: str,
    max_cycles: int,
) -> None:
    """When a pending gang should start, what it depends on, and what it waits for now.

    \b
      queue-controller eta NS/NAME     one gang (NAME as `kubectl get podgroups` shows)
      queue-controller eta -n NS       every pending gang in a namespace
      queue-controller eta -A          every pending gang in the cluster

    The live state is run forward with the controller's own admission core:
    running gangs end at their runtime estimates (the pod template's annotation
    queue-controller.io/expected-runtime-seconds, history, activeDeadlineSeconds),
    and pending gangs are admitted in order as room frees, each then running
    for its own estimate.  A gang without an estimated start says why
    (NoRuntimeEstimates, BlockedByQuota, NeverFits, BeyondHorizon,
    ForecastBound, Invalid, Blocked).

    \b
    Exit codes: 0 estimated (even when unknown); 2 a bad option, no such
    gang, or a gang that is not pending.
    """
    chosen = sum((gang is not None, namespace is not None, all_namespaces))
    if chosen != 1:
        raise click.UsageError("give exactly one of NS/NAME, -n NAMESPACE or -A")
    horizon_seconds = parse_duration(horizon, field="--horizon")
    if gang is not None:
        ns, _, name = gang.partition("/")
        if not ns or not name or "/" in name:  # said before the cluster is read
            raise InputError(f"{gang!r} is not NAMESPACE/NAME", field="NS/NAME")
    now = time.time()
    snapshot = live_snapshot(kubeconfig, now=now)
    result = forecast(snapshot, horizon_seconds=horizon_seconds, max_cycles=max_cycles)
    print_etas(result, select(snapshot, result, gang=gang, namespace=namespace), output)
