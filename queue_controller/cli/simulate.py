"""``queue-controller simulate``: replay a GPU workload under several admission policies."""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from queue_controller.cli.options import journal_option, output_option
from queue_controller.errors import InputError

if TYPE_CHECKING:
    from queue_controller.core import ReservationPolicy
    from queue_controller.journal import Entry, Journal
    from queue_controller.sim.scenario.spec import Faults

# queue_controller.sim.engine.compare.POLICIES, spelled out so that --help and argument errors do
# not import the engine (a test holds the two equal).
POLICIES = ("gang-fit", "quota-only", "per-pod")
# queue_controller.sim.engine.compare.PREEMPTION_MODES, likewise.
PREEMPTION_MODES = ("as-configured", "off", "on", "compare")
# queue_controller.sim.engine.compare.RESERVATION_MODES, likewise.
RESERVATION_MODES = ("off", "on", "compare")
# queue_controller.sim.engine.compare.TOPOLOGY_PLACEMENT_MODES, likewise.
TOPOLOGY_PLACEMENT_MODES = ("best-fit", "balanced", "compare")
OVERRUN_POLICIES = ("Wait", "Preempt")  # queue_controller.core.Overrun's values
DEFAULT_OUT = "simulation-report"
# The journal's writer drops its oldest entries once 10,000 wait: let it catch up well before.
_FLUSH_EVERY = 2000
_FLUSH_TIMEOUT = 60.0
# Fault options -> the fields of queue_controller.sim.scenario.spec.Faults they set, and the
# factor from the option's unit to the field's.
_FAULTS = {
    "node_failures_per_hour": ("node_failures_per_hour", 1.0),
    "node_repair_minutes": ("node_repair_seconds", 60.0),
    "bind_failure_probability": ("bind_failure_probability", 1.0),
    "foreign_pods_per_hour": ("foreign_pods_per_hour", 1.0),
}
_SHAPE_OPTIONS = ("jobs", "arrival_rate_per_hour", "max_gang_gpus")


def _given(ctx: click.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _require_file(path: Path, option: str) -> None:
    if not path.is_file():
        raise InputError("no such file", where=str(path), field=option)


def _check_inputs(
    ctx: click.Context,
    cluster: Path | None,
    queues: Sequence[Path],
    trace: Path | None,
    generate: bool,
) -> bool:
    """True for the bundled scenario; else every file named exists and nothing is missing."""
    if trace is not None and generate:
        raise InputError("give either --trace or --generate, not both", field="--trace")
    if cluster is None and not queues and trace is None:
        return True
    missing = [opt for opt, value in (("--cluster", cluster), ("--queues", queues)) if not value]
    if trace is None and not generate:
        missing.append("--trace (or --generate)")
    if missing:
        given = [
            opt
            for opt, value in (("--cluster", cluster), ("--queues", queues), ("--trace", trace))
            if value
        ]
        raise InputError(
            f"{' and '.join(given)} given without {' and '.join(missing)}: a scenario of your own "
            "needs --cluster, --queues and --trace or --generate (give none of them for the "
            "bundled scenario)",
            field=missing[0].split()[0],
        )
    if trace is not None:
        shape = [_option(name) for name in _SHAPE_OPTIONS if _given(ctx, name)]
        if shape:
            raise InputError(
                f"{', '.join(shape)} shape a generated workload: use --generate, not --trace",
                field=shape[0],
            )
    assert cluster is not None
    _require_file(cluster, "--cluster")
    for path in queues:
        _require_file(path, "--queues")
    if trace is not None:
        _require_file(trace, "--trace")
    return False


def _faults(bundled: bool, options: dict[str, float | None]) -> Faults:
    """The bundled scenario's faults, or none, with the options given put over them."""
    from queue_controller.sim.scenario.spec import Faults

    if bundled:
        from queue_controller.sim.scenario.generate import DEFAULT_FAULTS

        faults = DEFAULT_FAULTS
    else:
        faults = Faults()
    changes = {
        field: value * factor
        for option, (field, factor) in _FAULTS.items()
        if (value := options[option]) is not None
    }
    return replace(faults, **changes)


def _run_id() -> str:
    return f"{datetime.now(tz=UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _open_journal(url: str) -> Journal | None:
    from queue_controller.journal import Journal
    from queue_controller.journal.database import parse_url

    parse_url(url, setting="--db")  # a bad URL is the user's mistake: one line, exit 2
    journal = Journal(url)
    journal.start()
    if not journal.healthy:
        click.echo(
            f"warning: journal: cannot write to {journal.url} ({journal.last_error}); "
            "simulating without it",
            err=True,
        )
        journal.close()
        return None
    return journal


@contextmanager
def _progress(policies: Sequence[str]) -> Iterator[Callable[[str, float], None] | None]:
    """A bar per policy on a terminal; nothing when standard error is not one."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description:<10}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        tasks = {name: bar.add_task(name, total=1.0) for name in policies}

        def update(policy: str, fraction: float) -> None:
            task = tasks.get(policy)
            if task is not None:
                bar.update(task, completed=max(0.0, min(1.0, fraction)))

        yield update


@click.command()
@click.option(
    "--cluster",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    help="The cluster: a NodePools file, or Node objects (as `kubectl get nodes -o yaml`).",
)
@click.option(
    "--queues",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    multiple=True,
    help="Queue, TeamQuota, Cohort and PriorityClass objects (YAML). Repeat for several files.",
)
@click.option(
    "--trace",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    help="The workload: one gang per row (CSV) or per item (YAML). Or use --generate.",
)
@click.option(
    "--generate",
    is_flag=True,
    help="Generate a synthetic workload for the cluster and queues instead of a --trace.",
)
@click.option(
    "--seed",
    type=int,
    default=7,
    show_default=True,
    help="Seed of the generated workload and of every random draw of the simulation.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="Gangs to generate.",
)
@click.option(
    "--arrival-rate-per-hour",
    type=click.FloatRange(min=0, min_open=True),
    metavar="RATE",
    help="Mean gang arrivals per hour of the generated workload (default: enough to load "
    "the cluster).",
)
@click.option(
    "--max-gang-gpus",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="The most GPUs one generated gang asks for.",
)
@click.option(
    "--topology",
    metavar="bundled|FILE",
    help="Topology-aware gangs: Topologies, the Queues that use them and which gangs ask "
    "(a SimulationTopology file; `bundled` goes with the bundled cluster's racks).",
)
@click.option(
    "--dra",
    is_flag=True,
    help="Ask and offer whole GPUs through DRA (resource.k8s.io/v1) instead of "
    "nvidia.com/gpu: each whole-GPU node's GPUs become devices of one ResourceSlice "
    "(driver gpu.nvidia.com), DeviceClass gpu.nvidia.com charges them to quota as "
    "nvidia.com/gpu, jobs ask through ResourceClaimTemplates and running pods hold "
    "allocated ResourceClaims. MIG slices and time-sliced GPUs stay extended resources.",
)
@click.option(
    "--policy",
    "policy_name",
    metavar="NAME|FILE",
    default="default",
    show_default=True,
    help="A bundled policy preset by name, or a policy YAML file: cycle period, "
    "pods-ready timeout, ordering, requeue backoff, scheduler scoring, delays.",
)
@click.option(
    "--compare",
    type=click.Choice(POLICIES),
    multiple=True,
    help="A policy to run; repeat for several. Default: all three.",
)
@click.option(
    "--preemption",
    type=click.Choice(PREEMPTION_MODES),
    default="as-configured",
    show_default=True,
    help="Preemption in gang-fit and quota-only. as-configured: as each TeamQuota's "
    "spec.preemption says (the bundled ones set none); off: never; on: for every TeamQuota "
    "(reclaimWithinCohort: Any, withinTeamQuota: LowerPriority where it sets none); compare: "
    "each run without it and again as <policy>+preemption. Victims keep their GPUs for the "
    "policy's terminationGracePeriodSeconds (30 s) and restart from scratch.",
)
@click.option(
    "--topology-placement",
    type=click.Choice(TOPOLOGY_PLACEMENT_MODES),
    default="best-fit",
    show_default=True,
    help="How gang-fit splits a gang that prefers a topology level (every Topology's "
    "spec.placement). best-fit: pack, keeping whole domains whole; balanced: Kueue's "
    "TASBalancedPlacement, run as gang-fit+balanced; compare: both. Needs --topology; the "
    "report adds fragmentation and the share of preferred gangs in one domain.",
)
@click.option(
    "--reservation",
    type=click.Choice(RESERVATION_MODES),
    default="off",
    show_default=True,
    help="Reservation with backfill in gang-fit: a Queue's head that waited NoNodeFit for "
    "--reservation-after gets named nodes and a start, and other gangs run there only if "
    "their estimated end comes before it. off: never; on: for every Queue (a Queue's own "
    "spec.reservation kept), run as gang-fit+reservation; compare: gang-fit without it and "
    "again as gang-fit+reservation. report.json gains a reservation block.",
)
@click.option(
    "--reservation-after",
    type=click.IntRange(min=0),
    default=300,
    show_default=True,
    metavar="SECONDS",
    help="How long a head waits NoNodeFit before it is reserved for (spec.reservation."
    "afterSeconds).",
)
@click.option(
    "--reservation-margin",
    type=click.IntRange(min=0),
    default=60,
    show_default=True,
    metavar="SECONDS",
    help="A backfill must end this long before the reservation's start "
    "(spec.reservation.backfillMarginSeconds).",
)
@click.option(
    "--reservation-overrun",
    type=click.Choice(OVERRUN_POLICIES),
    default="Wait",
    show_default=True,
    help="When a backfilled gang still runs at the reserved start: Wait for it, or Preempt it "
    "(spec.reservation.overrun).",
)
@click.option(
    "--estimate-noise",
    type=click.FloatRange(min=0, max=5),
    default=0.2,
    show_default=True,
    metavar="FRACTION",
    help="Runtime estimates are the trace's durations times a seeded lognormal factor "
    "exp(FRACTION x z), z standard normal (0.2: about two in three within 20%); 0: exact.",
)
@click.option(
    "--node-failures-per-hour",
    type=click.FloatRange(min=0),
    metavar="RATE",
    help="Node failures per hour across the whole cluster.",
)
@click.option(
    "--node-repair-minutes",
    type=click.FloatRange(min=0, min_open=True),
    metavar="MINUTES",
    help="How long a failed node stays down.",
)
@click.option(
    "--bind-failure-probability",
    type=click.FloatRange(min=0, max=1, max_open=True),
    metavar="P",
    help="Chance that binding one admitted member pod fails (it is retried).",
)
@click.option(
    "--foreign-pods-per-hour",
    type=click.FloatRange(min=0),
    metavar="RATE",
    help="Pods outside any queue that arrive per hour and take GPUs.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=DEFAULT_OUT,
    show_default=True,
    metavar="DIR",
    help="Folder for report.json, report.md and the PNG plots (created if missing).",
)
@output_option("`table` for people; `json` prints report.json.")
@journal_option("The decision journal to record the simulated decisions in (as for `history`).")
@click.option("--no-journal", is_flag=True, help="Record nothing in the journal.")
@click.pass_context
def simulate(
    ctx: click.Context,
    cluster: Path | None,
    queues: tuple[Path, ...],
    trace: Path | None,
    generate: bool,
    seed: int,
    jobs: int,
    arrival_rate_per_hour: float | None,
    max_gang_gpus: int,
    topology: str | None,
    dra: bool,
    policy_name: str,
    compare: tuple[str, ...],
    preemption: str,
    topology_placement: str,
    reservation: str,
    reservation_after: int,
    reservation_margin: int,
    reservation_overrun: str,
    estimate_noise: float,
    node_failures_per_hour: float | None,
    node_repair_minutes: float | None,
    bind_failure_probability: float | None,
    foreign_pods_per_hour: float | None,
    out_dir: Path,
    output: str,
    url: str,
    no_journal: bool,
) -> None:
    """What if: replay a GPU workload under several admission policies and compare them.

    Simulates the cluster, its queues and team quotas, and a workload of gangs
    (multi-pod Jobs whose pods must all run at once), under:

    \b
      gang-fit    this controller: a gang is admitted only when every member
                  fits on a real node at once and the team quota has room
      quota-only  Kueue-like: admitted on aggregate quota, then placed pod by pod
      per-pod     the default kube-scheduler: no gang admission at all

    Prints GPU allocation, wasted and stranded GPU hours, queue delays,
    evictions, preemptions and the GPU hours they lost, how long lenders wait
    for their nominal quota back, deadlocks and team shares side by side,
    beside the fluid upper bound, and writes report.json, report.md and plots
    to --out. --preemption compare adds each admitting policy with preemption.

    Without --cluster, --queues and --trace it runs the bundled scenario (a
    generated workload of --jobs gangs, with mild faults). Fault options put
    their values over the scenario's faults. Every simulated decision goes to
    the journal, for `queue-controller history --source simulation:<run id>`.
    """
    bundled = _check_inputs(ctx, cluster, queues, trace, generate)
    from queue_controller.sim.scenario.policy import bundled_policies_dir, load, resolve

    policy_path = resolve(policy_name)
    policy = load(policy_path)
    # A bundled preset by its place in a checkout, not by where this one happens to be.
    bundled_preset = policy_path.resolve().parent == bundled_policies_dir().resolve()
    policy_file = f"policies/{policy_path.name}" if bundled_preset else str(policy_path)
    chosen = [name for name in POLICIES if name in compare] if compare else list(POLICIES)
    runs = [
        variant
        for name in chosen
        for variant in (
            (name, f"{name}+preemption")
            if preemption == "compare" and name != "per-pod"
            else (name,)
        )
    ]
    if reservation != "off":
        runs = [
            run
            for name in runs
            for run in (
                (
                    (name, f"{name}+reservation")
                    if reservation == "compare"
                    else (f"{name}+reservation",)
                )
                if name.split("+", 1)[0] == "gang-fit"
                else (name,)
            )
        ]
    if topology_placement != "best-fit":
        if topology is None:
            raise click.UsageError("--topology-placement needs --topology", ctx=ctx)
        runs = [
            run
            for name in runs
            for run in (
                (
                    (name, f"{name}+balanced")
                    if topology_placement == "compare"
                    else (f"{name}+balanced",)
                )
                if name.split("+", 1)[0] == "gang-fit"
                else (name,)
            )
        ]
    faults = _faults(
        bundled,
        {
            "node_failures_per_hour": node_failures_per_hour,
            "node_repair_minutes": node_repair_minutes,
            "bind_failure_probability": bind_failure_probability,
            "foreign_pods_per_hour": foreign_pods_per_hour,
        },
    )
    from queue_controller.sim.scenario.setup import build_scenario, with_dra, with_topology

    scenario = build_scenario(
        bundled=bundled,
        cluster=cluster,
        queues=queues,
        trace=trace,
        seed=seed,
        jobs=jobs,
        arrival_rate_per_hour=arrival_rate_per_hour,
        max_gang_gpus=max_gang_gpus,
        reshape=_given(ctx, "arrival_rate_per_hour") or _given(ctx, "max_gang_gpus"),
    )
    scenario = with_topology(scenario, topology, seed=seed)
    scenario = with_dra(scenario, dra)
    from queue_controller.journal.database import parse_url
    from queue_controller.sim.engine.compare import simulate as run_simulation
    from queue_controller.sim.report.render import (
        report_json,
        reservation_table,
        summary_table,
        write_report,
    )

    run_id = _run_id()
    journal = None if no_journal else _open_journal(url)
    recorded = 0

    def record(entry: Entry) -> None:
        nonlocal recorded
        assert journal is not None
        journal.record(replace(entry, source=_source(run_id, entry.source)))
        recorded += 1
        if recorded % _FLUSH_EVERY == 0:
            journal.flush(_FLUSH_TIMEOUT)

    try:
        with _progress(runs) as progress:
            report = run_simulation(
                scenario,
                policy=policy,
                faults=faults,
                seed=seed,
                compare=chosen,
                record=None if journal is None else record,
                progress=progress,
                policy_file=policy_file,
                preemption=preemption,
                reservation=reservation,
                reservation_policy=_reservation_policy(
                    reservation_after, reservation_margin, reservation_overrun
                ),
                estimate_noise=estimate_noise,
                topology_placement=topology_placement,
            )
    finally:
        if journal is not None:
            journal.close()
    try:
        written = write_report(report, out_dir)
    except InputError as error:
        raise InputError(error.detail, where=error.where, field="--out") from None

    if output == "json":
        click.echo(json.dumps(report_json(report), indent=2))
    else:
        _print_table(summary_table(report))
        reserved = reservation_table(report)
        if reserved is not None:
            click.echo()
            _print_table(reserved)
    # With -o json, standard output holds the JSON alone.
    err = output == "json"
    names = ", ".join(path.name for path in written)
    click.echo(f"report written to {out_dir}/ ({names})", err=err)
    if journal is not None:
        source = f"simulation:{run_id}"
        # The URL as the user gave it, unless that shows a password.
        shown = journal.url if parse_url(url).password else url
        line = f"journal: {journal.written:,} entries in {shown} under {source}:<policy>"
        if journal.dropped:
            line += f" ({journal.dropped:,} dropped: the database could not keep up)"
        click.echo(line, err=err)
        click.echo(f"  queue-controller history --db {shown} --source {source}", err=err)


def _reservation_policy(after: int, margin: int, overrun: str) -> ReservationPolicy:
    from queue_controller.core import Overrun, ReservationPolicy

    return ReservationPolicy(
        after_seconds=after, backfill_margin_seconds=margin, overrun=Overrun(overrun)
    )


def _source(run_id: str, given: str) -> str:
    """``simulation:<run id>:<policy>``: the engine names the policy (its source ends in
    ``:<policy>``); the run id is this command's."""
    policy = given.rsplit(":", 1)[-1]
    known = policy.split("+", 1)[0] in POLICIES  # gang-fit+preemption too
    return f"simulation:{run_id}:{policy}" if known else f"simulation:{run_id}"


def _print_table(table: Table) -> None:
    console = Console()
    if not console.is_terminal:
        # Piped or redirected: no screen to fit, so each row stays whole on one line.
        natural = Measurement.get(console, console.options.update(width=1 << 16), table)
        console = Console(width=max(natural.maximum, console.width))
    console.print(table)
