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
from queue_controller.dump import LeftOut, read_file, read_objects
from queue_controller.kube.snapshot import Located

# Exit codes, as `check --help` lists them.  2 is every command's: a bad option or a
# dump that cannot be read at all (queue_controller.cli.EXIT_INPUT_ERROR).
EXIT_VIOLATED = 1
EXIT_LEFT_OUT = 3


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
    read = f"{result.objects} objects read"
    if not result.left_out:
        verdict = "all invariants hold" if not violations else f"{len(violations)} violations"
        return f"{verdict} ({read})"
    # What was left out was not checked: never call that a clean bill.
    verdict = (
        f"{len(violations)} violations" if violations else "no violation among the objects read"
    )
    return f"{verdict}, but {len(result.left_out)} left out and not checked ({read})"


def _exit_code(violated: bool, left_out: bool) -> int:
    # A broken invariant is the louder news: it wins over objects left out.
    return EXIT_VIOLATED if violated else EXIT_LEFT_OUT if left_out else 0


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

    \b
    An object that cannot be read (a bad field, no name, the same object twice)
    is left out, named ("left out: OBJECT: FIELD: WHY"; `left_out` in JSON),
    and not checked.
    \b
    Exit codes:
      0  every invariant holds over every object
      1  an invariant is broken (whatever was left out)
      2  a bad option, or a dump that cannot be read at all (not YAML, a key
         written twice, a document that is not an object)
      3  no invariant broken among the objects read, but some were left out
    With --watch: 1 if a violation was ever seen, else 3 if an object was ever
    left out, else 0.
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
        ever, left_out = _watch(source, clock, timing, output, duration, interval)
        code = _exit_code(bool(ever), bool(left_out))
    else:
        result = look(source(), now=clock(), timing=timing)
        _report(result, output)
        code = _exit_code(bool(result.violations), bool(result.left_out))
    if code:
        raise SystemExit(code)


def _console() -> Console:
    # Piped, a table keeps its lines whole for grep and less, as plan's does.
    console = Console()
    return console if console.is_terminal else Console(width=240)


def _report(result: Look, output: str) -> None:
    if output == "json":
        payload = {
            "violations": [v.as_dict() for v in result.violations],
            "objects": result.objects,
            "left_out": [item.as_dict() for item in result.left_out],
            "invariants": {k.value: text for k, text in DESCRIPTIONS.items()},
        }
        click.echo(json.dumps(payload, indent=2))
        return
    console = _console()
    if result.violations:
        _table(result.violations, console)
    for problem in result.unreadable:
        console.print(f"[yellow]left out:[/] {escape(' '.join(problem.split()))}")
    console.print(_summary(result, result.violations))


def _watch(
    source: Callable[[], list[Located]],
    clock: Callable[[], float],
    timing: Timing,
    output: str,
    duration: str | None,
    interval: str,
) -> tuple[list[Violation], list[LeftOut]]:
    """Look until interrupted or out of time; every violation seen, and every object
    left out, is returned."""
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
    left_out: dict[str, LeftOut] = {}  # each said once, when first seen
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
            for item in result.left_out:
                if str(item) not in left_out:
                    left_out[str(item)] = item
                    _left_out_event(item, output, console)
            time.sleep(pause)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    ever = list(state.ever.values())
    if output == "json":
        summary = {
            "event": "summary",
            "looks": looks,
            "violations": [v.as_dict() for v in ever],
            "left_out": [item.as_dict() for item in left_out.values()],
        }
        click.echo(json.dumps(summary))
    else:
        verdict = "all invariants held" if not ever else f"{len(ever)} violations seen"
        if left_out and not ever:
            verdict = "no violation seen among the objects read"
        if left_out:
            verdict += f", but {len(left_out)} objects left out and not checked"
        console.print(f"{verdict} over {looks} looks")
    return ever, list(left_out.values())


def _left_out_event(item: LeftOut, output: str, console: Console) -> None:
    if output == "json":
        click.echo(json.dumps({"event": "left out", **item.as_dict()}))
        return
    line = " ".join(str(item).split())
    console.print(f"{_when(time.time())} [yellow]left out:[/] {escape(line)}")


def _event(what: str, violation: Violation, output: str, console: Console) -> None:
    if output == "json":
        click.echo(json.dumps({"event": what, **violation.as_dict()}), nl=True)
        return
    style = "red" if what == "violated" else "green"
    console.print(
        f"{_when(time.time())} [{style}]{what}[/] {violation.invariant.value} "
        f"(since {_when(violation.since)}): {escape(violation.message)}"
    )
