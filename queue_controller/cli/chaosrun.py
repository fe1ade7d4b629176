"""What every ``chaos`` experiment shares: its options, the run from plan to verdict, and
how the outcome is printed (the commands themselves are in :mod:`.chaos`)."""

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
from queue_controller.kube import kinds
from queue_controller.kube.fields import get
from queue_controller.kube.snapshot import Located

F = TypeVar("F", bound=Callable[..., object])
EXIT_FAILED = 1
EXIT_NOT_INJECTED = 3  # the fault never took hold: no verdict on the controller
EXIT_INTERRUPTED = 130
Plan = Callable[[chaos.GangSeen, list[Located], str], chaos.Injection]


def common_options(command: F) -> F:
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


def gang_of(value: str) -> tuple[str, str, str]:
    """``--job``'s (kind, namespace, name): NAMESPACE/NAME for a Job, or KIND/NAMESPACE/NAME
    for any kind with a head (PyTorchJob/research/ddp, RayJob/research/tune)."""
    parts = value.split("/")
    if len(parts) == 2:
        parts = ["Job", *parts]
    heads = sorted(k.name for k in kinds.KINDS if k.head is not None)
    if len(parts) != 3 or not all(parts):
        raise InputError(
            f"{value!r} is not NAMESPACE/NAME (a Job) or KIND/NAMESPACE/NAME ({', '.join(heads)})",
            field="--job",
        )
    kind, namespace, name = parts
    if kind not in heads:
        raise InputError(f"{kind!r} is not one of {', '.join(heads)}", field="--job")
    return kind, namespace, name


def gateway_for(kubeconfig: Path | None) -> gw.Gateway:
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


def run_experiment(
    common: Common, job: str, plan: Plan, name: str, *, admitted_first: bool = True
) -> None:
    """Plan, check nothing is broken already, then inject, watch, undo and judge; with
    ``admitted_first``, wait (``--wait``) for the gang to be admitted before planning."""
    kind, namespace, job_name = gang_of(job)
    gateway = gateway_for(common.kubeconfig)
    run = chaos.new_run_id(name)
    say = (lambda line: click.echo(line, err=True)) if common.output == "json" else click.echo
    runner = chaos.Runner(
        gateway, run, common.timing, parse_duration(common.interval, field="--interval"), say
    )
    items = runner.listing()
    gang = chaos.gang_seen(items, namespace, job_name, kind)
    if gang.head is None:
        raise InputError(f"no {gang.what}", field="--job")
    waited = time.monotonic() + parse_duration(common.wait, field="--wait")
    while admitted_first and gang.phase not in ("Admitted", "Running") and not common.dry_run:
        if time.monotonic() > waited:
            break  # the plan says why it cannot start
        time.sleep(1)
        items = runner.listing()
        gang = chaos.gang_seen(items, namespace, job_name, kind)
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
        f"chaos run {run}: {injection.experiment} on {gang.what}, "
        f"recovery expected within {deadline:.0f}s"
    )
    outcome = runner.execute(injection, gang, scope, deadline)
    _report(outcome, common.output)
    if outcome.interrupted:
        raise SystemExit(EXIT_INTERRUPTED)
    if outcome.verdict == "could not inject":
        raise SystemExit(EXIT_NOT_INJECTED)
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
                    "method": injection.method or None,
                    "methodWhy": injection.method_why or None,
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
    if outcome.timeline.marks:
        click.echo(f"{'PHASE':<12} {'AFTER':>8}  WHAT")
    for mark in outcome.timeline.marks:
        click.echo(f"{mark.phase:<12} {mark.seconds:>7.1f}s  {mark.detail}")
    for violation in outcome.violations:
        click.echo(f"BROKEN {violation.invariant.value}: {violation.message}")
    for problem in outcome.problems:
        click.echo(f"FAILED: {problem}")
    if outcome.verdict == "could not inject":
        click.echo(f"could not inject: {outcome.not_injected}")
        click.echo("the controller was not judged: the fault never took hold")
    if outcome.passed:
        last = outcome.timeline.marks[-1].seconds if outcome.timeline.marks else 0.0
        click.echo(
            f"recovered in {last:.1f}s (allowed {outcome.deadline:.0f}s); every invariant held"
        )


def with_common(func: Callable[..., None]) -> Callable[..., None]:
    """Gather the shared options into one Common for the experiment's body."""

    def wrapper(**kwargs: Any) -> None:
        fields = {k: kwargs.pop(k) for k in list(kwargs) if k in Common.__dataclass_fields__}
        func(Common(**fields), **kwargs)

    wrapper.__name__, wrapper.__doc__ = func.__name__, func.__doc__
    return wrapper


def job_on(gateway: gw.Gateway, node: str) -> str:
    """The one queued gang with a member on ``node``, as ``--job`` names it."""
    groups = {
        (get(g, "metadata.namespace", str, ""), get(g, "metadata.name", str, ""))
        for g in gateway.list(gw.POD_GROUP)
    }
    found = set()
    for pod in gateway.list(gw.POD):
        gang = chaos.observe.member_of(pod) if get(pod, "spec.nodeName", str, "") == node else None
        if gang is not None:
            kind, namespace, name = gang
            if (namespace, kinds.by_name(kind).pod_group_name(name)) in groups:
                found.add(f"{namespace}/{name}" if kind == "Job" else f"{kind}/{namespace}/{name}")
    if len(found) != 1:
        raise InputError(
            f"Node {node} holds members of {len(found)} queued gangs "
            f"({', '.join(sorted(found)) or 'none'}): name the one to watch with --job",
            field="--job",
        )
    return found.pop()
