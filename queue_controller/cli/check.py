"""``queue-controller check``: are gang admission's invariants holding right now?"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from queue_controller.check import DESCRIPTIONS, Look, Timing, Violation, Watch, look
from queue_controller.check.looks import cluster_objects
from queue_controller.cli.options import output_option, parse_duration
from queue_controller.dump import read_file, read_objects
from queue_controller.kube.snapshot import Located

EXIT_VIOLATED = 1


def _when(moment: float | None) -> str:
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment, tz=UTC).isoformat(timespec="seconds")


def _table(violations: Sequence[Violation], console: Console) -> None:
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("INVARIANT", no_wrap=True, style="red")
    table.add_column("SINCE", no_wrap=True)
    table.add_column("OBJECTS", overflow="fold")
    table.add_column("WHAT", overflow="fold")
    for v in violations:
        table.add_row(
            v.invariant.value, _when(v.since), escape(", ".join(v.objects)), escape(v.message)
        )
    console.print(table)


def _summary(result: Look, violations: Sequence[Violation]) -> str:
    verdict = "all invariants hold" if not violations else f"{len(violations)} violations"
    line = f"{verdict} ({result.objects} objects read"
    if result.unreadable:
        line += f", {len(result.unreadable)} unreadable and left out"
    return line + ")"


@click.command()
@click.option(
    "-f",
    "--filename",
    "files",
    multiple=True,
    metavar="DUMP",
    help="Check a dump (as `plan -f` reads) instead of the live cluster. Repeatable.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    help="Default: in-cluster, then ~/.kube/config.",
)
@output_option()
@click.option("--watch", is_flag=True, help="Keep checking until interrupted (or --for).")
@click.option(
    "--for",
    "duration",
    metavar="DURATION",
    help="With --watch: stop after this long (90s, 5m, 1h).",
)
@click.option(
    "--interval",
    default="2s",
    show_default=True,
    metavar="DURATION",
    help="With --watch: time between looks.",
)
@click.option(
    "--cycle",
    "cycle",
    default="5s",
    show_default=True,
    metavar="DURATION",
    help="The controller's scheduling cycle (its tick): the slack allowed after a timeout "
    "or an eviction before it counts as broken.",
)
@click.option(
    "--pods-ready-timeout",
    default="300s",
    show_default=True,
    metavar="DURATION",
    help="A gang's timeout when neither its PodGroup nor its Queue sets one (the "
    "controller's default).",
)
@click.option("--now", metavar="TIME", help="With -f: judge the dump at this RFC 3339 time.")
def check(
    files: tuple[str, ...],
    kubeconfig: Path | None,
    output: str,
    watch: bool,
    duration: str | None,
    interval: str,
    cycle: str,
    pods_ready_timeout: str,
    now: str | None,
) -> None:
    """Check gang admission's invariants on the live cluster (or a dump); exit 1 if any breaks.

    \b
    Counted from Pods, Nodes and the workloads' own objects, not from the
    controller's status (which it reads only for what it planned and evicted):
      NodeOvercommitted        a node's extended resources over-committed by bound pods
      QuotaOverdrawn           a TeamQuota used past nominal plus what it may borrow
      LendingLimitExceeded     a cohort borrowing what its lenders keep back
      AdmittedTwice            two PodGroups for one workload, or members beyond its size
      PartiallyPlacedTooLong   a gang partly placed past its timeout plus one cycle
      EvictedStillHolding      an evicted gang still holding quota or running, a cycle on
      MemberOffPlan            an admitted member bound off its PodGroup's planned nodes
      MemberOffSlice           a sliced pod set's member bound off its slice's nodes
    """
    from queue_controller.cli.plan import _parse_now

    timing = Timing(
        cycle_seconds=parse_duration(cycle, field="--cycle"),
        pods_ready_timeout_seconds=int(
            parse_duration(pods_ready_timeout, field="--pods-ready-timeout")
        ),
    )
    if files:
        located: list[Located] = []
        for path in files:
            located.extend(read_objects(path, read_file(path)))
        fixed_now = _parse_now(now)

        def source() -> list[Located]:
            return located

        clock: Callable[[], float] = lambda: fixed_now  # noqa: E731
    else:
        from queue_controller.kube.credentials import api_client
        from queue_controller.kube.gateway import Gateway

        gateway = Gateway(api_client(kubeconfig))

        def source() -> list[Located]:
            return cluster_objects(gateway)

        clock = time.time
    if watch:
        ever = _watch(source, clock, timing, output, duration, interval)
        raise SystemExit(EXIT_VIOLATED if ever else 0)
    result = look(source(), now=clock(), timing=timing)
    _report(result, output)
    if result.violations:
        raise SystemExit(EXIT_VIOLATED)


def _console() -> Console:
    # Piped, a table keeps its lines whole for grep and less, as plan's does.
    console = Console()
    return console if console.is_terminal else Console(width=240)


def _report(result: Look, output: str) -> None:
    if output == "json":
        payload = {
            "violations": [v.as_dict() for v in result.violations],
            "objects": result.objects,
            "unreadable": list(result.unreadable),
            "invariants": {k.value: text for k, text in DESCRIPTIONS.items()},
        }
        click.echo(json.dumps(payload, indent=2))
        return
    console = _console()
    if result.violations:
        _table(result.violations, console)
    for problem in result.unreadable:
        console.print(f"[yellow]left out:[/] {escape(problem)}")
    console.print(_summary(result, result.violations))


def _watch(
    source: Callable[[], list[Located]],
    clock: Callable[[], float],
    timing: Timing,
    output: str,
    duration: str | None,
    interval: str,
) -> list[Violation]:
    """Look until interrupted or out of time; every violation seen is returned."""
    pause = parse_duration(interval, field="--interval")
    deadline = (
        None if duration is None else time.monotonic() + parse_duration(duration, field="--for")
    )
    stopping: list[int] = []

    def stop(signum: int, _frame: FrameType | None) -> None:
        stopping.append(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    state = Watch()
    console = _console()
    looks = 0
    try:
        while not stopping and (deadline is None or time.monotonic() < deadline):
            now = clock()
            result = look(source(), now=now, timing=timing)
            looks += 1
            new, cleared = state.update(result.violations, now)
            for violation in state.current(tuple(new)):
                _event("violated", violation, output, console)
            for violation in cleared:
                _event("cleared", violation, output, console)
            time.sleep(pause)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    ever = list(state.ever.values())
    if output == "json":
        click.echo(
            json.dumps(
                {"event": "summary", "looks": looks, "violations": [v.as_dict() for v in ever]}
            )
        )
    else:
        verdict = "all invariants held" if not ever else f"{len(ever)} violations seen"
        console.print(f"{verdict} over {looks} looks")
    return ever


def _event(what: str, violation: Violation, output: str, console: Console) -> None:
    if output == "json":
        click.echo(json.dumps({"event": what, **violation.as_dict()}), nl=True)
        return
    style = "red" if what == "violated" else "green"
    console.print(
        f"{_when(time.time())} [{style}]{what}[/] {violation.invariant.value} "
        f"(since {_when(violation.since)}): {escape(violation.message)}"
    )
