"""``queue-controller chaos``: prove on a real cluster that the controller recovers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from queue_controller import chaos
from queue_controller.check import Timing, look
from queue_controller.cli.options import output_option, parse_duration
from queue_controller.errors import InputError
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import get
from queue_controller.kube.snapshot import Located

F = TypeVar("F", bound=Callable[..., object])
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
Plan = Callable[[chaos.GangSeen, list[Located], str], chaos.Injection]


def _common(command: F) -> F:
    options = [
        click.option(
            "--kubeconfig",
            type=click.Path(path_type=Path),
            help="Default: in-cluster, then ~/.kube/config.",
        ),
        output_option(),
        click.option("--dry-run", is_flag=True, help="Print what it would do, and do nothing."),
        click.option(
            "--timeout",
            metavar="DURATION",
            help="How long recovery may take [default: the gang's pods-ready "
            "timeout plus a margin].",
        ),
        click.option(
            "--wait",
            default="60s",
            show_default=True,
            metavar="DURATION",
            help="How long to wait for the gang to be admitted first.",
        ),
        click.option(
            "--interval",
            default="1s",
            show_default=True,
            metavar="DURATION",
            help="Time between looks (each runs every `check` invariant).",
        ),
        click.option(
            "--cycle",
            default="5s",
            show_default=True,
            metavar="DURATION",
            help="The controller's cycle: the slack `check` allows (as `check --cycle`).",
        ),
        click.option(
            "--pods-ready-timeout",
            default="300s",
            show_default=True,
            metavar="DURATION",
            help="A gang's timeout when neither its PodGroup nor its Queue sets one.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@dataclass(frozen=True, kw_only=True)
class Common:
    kubeconfig: Path | None
    output: str
    dry_run: bool
    timeout: str | None
    wait: str
    interval: str
    cycle: str
    pods_ready_timeout: str

    @property
    def timing(self) -> Timing:
        return Timing(
            cycle_seconds=parse_duration(self.cycle, field="--cycle"),
            pods_ready_timeout_seconds=int(
                parse_duration(self.pods_ready_timeout, field="--pods-ready-timeout")
            ),
        )


@click.group()
def chaos_group() -> None:
    """Break one admitted gang on purpose and prove the controller recovers.

    \b
    Safe by default: it touches only the Job, pods and nodes it is given (or
    that hold that Job's members), --dry-run shows what it would do, and it
    undoes its change when it ends or is interrupted (SIGINT, SIGTERM).  What
    it touches carries the label queue-controller.io/chaos-run=<run>, so that
    `chaos cleanup` undoes a run that was killed.

    It runs every `check` invariant at each look, prints the recovery's
    timeline (injected, evicted, quota back, requeued, readmitted) in seconds
    since the injection, and exits 0 only if the gang recovered in time and
    no invariant broke; 1 otherwise, naming what broke; 130 if interrupted.
    """


def _job(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name:
        raise InputError(f"{value!r} is not NAMESPACE/NAME", field="--job")
    return namespace, name


def _gateway(kubeconfig: Path | None) -> gw.Gateway:
    from queue_controller.kube.credentials import api_client

    return gw.Gateway(api_client(kubeconfig))


def _gang_timeout(gang: chaos.GangSeen, items: list[Located], timing: Timing) -> int:
    if gang.group is not None:
        own = get(gang.group, "spec.timeoutSeconds", int, -1)
        if own >= 0:
            return own
        queue = get(gang.group, "spec.queue", str, "")
        for item in items:
            obj = item.obj
            if (
                obj.get("kind"),
                get(obj, "metadata.namespace", str, ""),
                get(obj, "metadata.name", str, ""),
            ) == ("Queue", gang.namespace, queue):
                value = get(obj, "spec.podsReadyTimeoutSeconds", int, -1)
                if value >= 0:
                    return value
    return timing.pods_ready_timeout_seconds


def _experiment(common: Common, job: str, plan: Plan, name: str) -> None:
    namespace, job_name = _job(job)
    gateway = _gateway(common.kubeconfig)
    run = chaos.new_run_id(name)
    say = (lambda line: click.echo(line, err=True)) if common.output == "json" else click.echo
    runner = chaos.Runner(
        gateway, run, common.timing, parse_duration(common.interval, field="--interval"), say
    )
    items = runner.listing()
    gang = chaos.gang_seen(items, namespace, job_name)
    if gang.job is None:
        raise InputError(f"no Job {namespace}/{job_name}", field="--job")
    waited = time.monotonic() + parse_duration(common.wait, field="--wait")
    while gang.phase not in ("Admitted", "Running") and not common.dry_run:
        if time.monotonic() > waited:
            break  # the plan says why it cannot start
        time.sleep(1)
        items = runner.listing()
        gang = chaos.gang_seen(items, namespace, job_name)
    injection = plan(gang, items, run)
    injection.steps = [step.replace("<run>", run) for step in injection.steps]
    scope = chaos.scope_of(gang, items, injection.nodes)
    before = [
        v for v in look(items, now=time.time(), timing=common.timing).violations if scope.covers(v)
    ]
    if before:
        raise InputError(
            "already broken before any injection: "
            + "; ".join(f"{v.invariant.value}: {v.message}" for v in before),
            field="--job",
        )
    deadline = (
        parse_duration(common.timeout, field="--timeout")
        if common.timeout
        else _gang_timeout(gang, items, common.timing) + injection.margin
    )
    if common.dry_run:
        _dry_run(run, injection, deadline, common.output)
        return
    say(
        f"chaos run {run}: {injection.experiment} on Job {namespace}/{job_name}, "
        f"recovery expected within {deadline:.0f}s"
    )
    outcome = runner.execute(injection, gang, scope, deadline)
    _report(outcome, common.output)
    if outcome.interrupted:
        raise SystemExit(EXIT_INTERRUPTED)
    if not outcome.passed:
        raise SystemExit(EXIT_FAILED)


def _dry_run(run: str, injection: chaos.Injection, deadline: float, output: str) -> None:
    expect = [p for p in injection.expect if p != "injected"]
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "dryRun": True,
                    "experiment": injection.experiment,
                    "run": run,
                    "would": injection.steps,
                    "nodes": list(injection.nodes),
                    "expect": expect,
                    "withinSeconds": deadline,
                    "notes": injection.notes,
                },
                indent=2,
            )
        )
        return
    click.echo(f"dry run of {injection.experiment} (nothing is changed); it would:")
    for step in injection.steps:
        click.echo(f"  - {step}")
    click.echo(f"and expect within {deadline:.0f}s: {', '.join(expect)}")
    click.echo(f"then undo it all (labelled {chaos.LABEL}={run})")
    for note in injection.notes:
        click.echo(f"note: {note}")


def _report(outcome: chaos.Outcome, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(outcome.as_dict(), indent=2))
        return
    click.echo("")
    click.echo(f"{'PHASE':<12} {'AFTER':>8}  WHAT")
    for mark in outcome.timeline.marks:
        click.echo(f"{mark.phase:<12} {mark.seconds:>7.1f}s  {mark.detail}")
    for violation in outcome.violations:
        click.echo(f"BROKEN {violation.invariant.value}: {violation.message}")
    for problem in outcome.problems:
        click.echo(f"FAILED: {problem}")
    if outcome.passed:
        last = outcome.timeline.marks[-1].seconds if outcome.timeline.marks else 0.0
        click.echo(
            f"recovered in {last:.1f}s (allowed {outcome.deadline:.0f}s); every invariant held"
        )


def _with_common(func: Callable[..., None]) -> Callable[..., None]:
    """Gather the shared options into one Common for the experiment's body."""

    def wrapper(**kwargs: Any) -> None:
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k in Common.__dataclass_fields__}
        func(Common(**fields), **kwargs)

    wrapper.__name__, wrapper.__doc__ = func.__name__, func.__doc__
    return wrapper


def _job_on(gateway: gw.Gateway, node: str) -> str:
    """The one queued Job with a member on ``node``, as NAMESPACE/NAME."""
    items = gateway.list(gw.POD)
    groups = {
        (get(g, "metadata.namespace", str, ""), get(g, "metadata.name", str, ""))
        for g in gateway.list(gw.POD_GROUP)
    }
    found = sorted(
        {
            f"{ns}/{job}"
            for pod in items
            if get(pod, "spec.nodeName", str, "") == node
            and (job := get(pod, "metadata.labels", dict, {}).get(chaos.observe.JOB_NAME_LABEL))
            and ((ns := get(pod, "metadata.namespace", str, "")), job) in groups
        }
    )
    if len(found) != 1:
        raise InputError(
            f"Node {node} holds members of {len(found)} queued Jobs "
            f"({', '.join(found) or 'none'}): name the one to watch with --job",
            field="--job",
        )
    return found[0]


@chaos_group.command("partial-placement")
@click.option("--job", required=True, metavar="NS/NAME", help="An admitted, queued Job.")
@click.option(
    "--members",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many of its members never start.",
)
@_common
@_with_common
def partial_placement(common: Common, *, job: str, members: int) -> None:
    """Stop some members of an admitted gang from ever starting.

    \b
    Taints their planned nodes queue-controller.io/chaos:NoSchedule and deletes
    those members already there, so that their replacements cannot land.
    Expects: evicted at the gang's timeout (PodsReadyTimeout or MembersLost),
    its quota back with no member left alive, requeued, and readmitted on
    other nodes.
    """

    def plan(gang: chaos.GangSeen, _items: list[Located], _run: str) -> chaos.Injection:
        return chaos.partial_placement(gang, members=members)

    _experiment(common, job, plan, "partial-placement")


@chaos_group.command("node-loss")
@click.option("--node", metavar="NODE", help="A node that holds members of the gang.")
@click.option("--job", metavar="NS/NAME", help="The gang (default: the one on --node).")
@click.option(
    "--keep-in",
    metavar="NAMESPACE",
    help="Where the ConfigMap that keeps the deleted Node goes [default: the Job's].",
)
@_common
@_with_common
def node_loss(common: Common, *, node: str | None, job: str | None, keep_in: str | None) -> None:
    """Delete a node that holds gang members, as a machine that is gone.

    \b
    The cluster deletes its pods (the pod garbage collector, after about 40 s);
    expects the gang evicted whole, requeued, and readmitted on other nodes.
    Undone by creating the Node again as it was (kwok, or a kubelet that
    registers it again, brings it back Ready).
    """
    if node is None and job is None:
        raise InputError("give --node or --job", field="--node")
    gateway = _gateway(common.kubeconfig)
    target = job or _job_on(gateway, node or "")

    def plan(gang: chaos.GangSeen, items: list[Located], _run: str) -> chaos.Injection:
        name = chaos.gang_node(gang, node)
        obj = next(
            i.obj
            for i in items
            if i.obj.get("kind") == "Node" and get(i.obj, "metadata.name", str, "") == name
        )
        return chaos.node_loss(gang, obj, keep_in=keep_in or gang.namespace)

    _experiment(common, target, plan, "node-loss")


@chaos_group.command("gpu-fault")
@click.option("--node", required=True, metavar="NODE", help="A node that holds gang members.")
@click.option("--job", metavar="NS/NAME", help="The gang (default: the one on --node).")
@click.option("--xid", default=79, show_default=True, type=int, help="The XID to report.")
@click.option(
    "--gpu",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="The GPU index to report it on.",
)
@_common
@_with_common
def gpu_fault(common: Common, *, node: str, job: str | None, xid: int, gpu: int) -> None:
    """Publish a GPU failure on a node, in the Node health format the node agent uses.

    \b
    Sets GPUHealthy=False and the queue-controller.io/gpu-health annotation
    naming the GPU and its XID.  Expects the gang on it evicted with
    GPUUnhealthy, its quota back, requeued and readmitted on healthy GPUs.
    Undone by putting the node's health back as it was.
    """
    gateway = _gateway(common.kubeconfig)
    target = job or _job_on(gateway, node)

    def plan(gang: chaos.GangSeen, items: list[Located], run: str) -> chaos.Injection:
        if gang.phase not in ("Admitted", "Running"):
            raise InputError(f"Job {target} is not admitted: nothing to break", field="--job")
        name = chaos.gang_node(gang, node)
        obj = next(
            i.obj
            for i in items
            if i.obj.get("kind") == "Node" and get(i.obj, "metadata.name", str, "") == name
        )
        return chaos.gpu_fault(obj, gpu=gpu, xid=xid, run=run, now=time.time())

    _experiment(common, target, plan, "gpu-fault")


@chaos_group.command("cleanup")
@click.option("--run", "run", metavar="ID", help="Only this run's changes [default: every run's].")
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    help="Default: in-cluster, then ~/.kube/config.",
)
@click.option("--dry-run", is_flag=True, help="Print what it would undo, and undo nothing.")
@output_option()
def cleanup(*, run: str | None, kubeconfig: Path | None, dry_run: bool, output: str) -> None:
    """Undo what chaos runs left behind (a run that was killed), found by their label."""
    done = chaos.undo(_gateway(kubeconfig), run=run, dry_run=dry_run)
    if output == "json":
        click.echo(json.dumps({"dryRun": dry_run, "undone": done}, indent=2))
        return
    for step in done:
        click.echo(("would " if dry_run else "") + step)
    if not done:
        click.echo("nothing left by a chaos run")
