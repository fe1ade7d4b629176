"""``queue-controller chaos``: prove on a real cluster that the controller recovers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import cast

import click

from queue_controller import chaos
from queue_controller.cli.chaosrun import (
    Common,
    common_options,
    gateway_for,
    job_on,
    run_experiment,
    with_common,
)
from queue_controller.cli.options import output_option, parse_duration
from queue_controller.errors import InputError
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import get
from queue_controller.kube.snapshot import Located

GANG_HELP = (
    "An admitted, queued gang: NS/NAME for a Job, or KIND/NS/NAME for another kind "
    "(PyTorchJob/research/ddp, RayJob/research/tune)."
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
    timeline (injected, confirmed, evicted, quota back, requeued, readmitted)
    in seconds since the injection, and exits 0 only if the gang recovered in
    time and no invariant broke; 1 otherwise, naming what broke; 3 if the
    fault could not be injected or never took hold ("could not inject: <why>":
    the controller is not judged); 130 if interrupted.
    """


@chaos_group.command("partial-placement")
@click.option("--job", required=True, metavar="[KIND/]NS/NAME", help=GANG_HELP)
@click.option(
    "--members",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many of its members never start.",
)
@click.option(
    "--method",
    type=click.Choice(("auto", *chaos.METHODS)),
    default="auto",
    show_default=True,
    help="How to stop them: auto picks from the pods' tolerations.",
)
@click.option(
    "--placeholder-namespace",
    metavar="NAMESPACE",
    help="Where a placeholder pod goes [default: the Job's].",
)
@common_options
@with_common
def partial_placement(
    common: Common, *, job: str, members: int, method: str, placeholder_namespace: str | None
) -> None:
    """Stop some members of an admitted gang from ever starting.

    \b
    Two methods; auto picks the one that works for the pods at hand:
      taint        taint their planned nodes queue-controller.io/chaos:NoSchedule
                   and delete those members already there, so that their
                   replacements cannot land (for pods that do not tolerate it);
      placeholder  when they tolerate that taint (tolerations: [{operator:
                   Exists}]): a pending pod outside any queue, for that node
                   only, asks for every GPU it will have free, and the members
                   there are deleted; it takes their GPUs, and their
                   replacements find none.  It is labelled
                   queue-controller.io/chaos-run=<run> and deleted when the
                   run ends, however it ends.

    \b
    Then it confirms the fault took hold before judging the controller: a
    stopped member the scheduler finds unschedulable, or one released by the
    controller that stays unstarted for 10s while the others run, or the gang
    evicted with none of them started.  If one starts all the same, or the
    placeholder is refused (a quota), held (a namespace whose pods are all
    queued: give --placeholder-namespace) or never placed, it reports "could
    not inject: <why>" and exits 3: the controller is not judged.
    Expects: evicted at the gang's timeout (PodsReadyTimeout or MembersLost),
    its quota back with no member left alive, requeued, and readmitted on
    other nodes.
    """
    forced = None if method == "auto" else cast(chaos.confirm.MethodName, method)

    def plan(gang: chaos.GangSeen, items: list[Located], run: str) -> chaos.Injection:
        nodes = {
            get(i.obj, "metadata.name", str, ""): i.obj
            for i in items
            if i.obj.get("kind") == "Node"
        }
        pods = [i.obj for i in items if i.obj.get("kind") == "Pod"]
        return chaos.partial_placement(
            gang,
            members=members,
            run=run,
            nodes=nodes,
            pods=pods,
            method=forced,
            placeholder_namespace=placeholder_namespace,
        )

    run_experiment(common, job, plan, "partial-placement")


@chaos_group.command("node-loss")
@click.option("--node", metavar="NODE", help="A node that holds members of the gang.")
@click.option(
    "--job",
    metavar="[KIND/]NS/NAME",
    help="The gang (default: the one on --node): NS/NAME for a Job, KIND/NS/NAME otherwise.",
)
@click.option(
    "--keep-in",
    metavar="NAMESPACE",
    help="Where the ConfigMap that keeps the deleted Node goes [default: the Job's].",
)
@common_options
@with_common
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
    gateway = gateway_for(common.kubeconfig)
    target = job or job_on(gateway, node or "")

    def plan(gang: chaos.GangSeen, items: list[Located], _run: str) -> chaos.Injection:
        name = chaos.gang_node(gang, node)
        obj = next(
            i.obj
            for i in items
            if i.obj.get("kind") == "Node" and get(i.obj, "metadata.name", str, "") == name
        )
        replaces = chaos.replaces_lost_nodes(gang, items)
        return chaos.node_loss(gang, obj, keep_in=keep_in or gang.namespace, replaces=replaces)

    run_experiment(common, target, plan, "node-loss")


@chaos_group.command("gpu-fault")
@click.option("--node", required=True, metavar="NODE", help="A node that holds gang members.")
@click.option(
    "--job",
    metavar="[KIND/]NS/NAME",
    help="The gang (default: the one on --node): NS/NAME for a Job, KIND/NS/NAME otherwise.",
)
@click.option("--xid", default=79, show_default=True, type=int, help="The XID to report.")
@click.option(
    "--gpu",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="The GPU index to report it on.",
)
@common_options
@with_common
def gpu_fault(common: Common, *, node: str, job: str | None, xid: int, gpu: int) -> None:
    """Publish a GPU failure on a node, in the Node health format the node agent uses.

    \b
    Sets GPUHealthy=False and the queue-controller.io/gpu-health annotation
    naming the GPU and its XID.  Expects the gang on it evicted with
    GPUUnhealthy, its quota back, requeued and readmitted on healthy GPUs.
    Undone by putting the node's health back as it was.
    """
    gateway = gateway_for(common.kubeconfig)
    target = job or job_on(gateway, node)

    def plan(gang: chaos.GangSeen, items: list[Located], run: str) -> chaos.Injection:
        if gang.phase not in ("Admitted", "Running"):
            raise InputError(f"{gang.what} is not admitted: nothing to break", field="--job")
        name = chaos.gang_node(gang, node)
        obj = next(
            i.obj
            for i in items
            if i.obj.get("kind") == "Node" and get(i.obj, "metadata.name", str, "") == name
        )
        return chaos.gpu_fault(obj, gpu=gpu, xid=xid, run=run, now=time.time())

    run_experiment(common, target, plan, "gpu-fault")


@chaos_group.command("gpu-steal")
@click.option("--node", required=True, metavar="NODE", help="A node the gang is planned on.")
@click.option(
    "--job",
    metavar="[KIND/]NS/NAME",
    help="The gang (default: the one on --node): NS/NAME for a Job, KIND/NS/NAME otherwise.",
)
@click.option(
    "--placeholder-namespace",
    metavar="NAMESPACE",
    help="Where the placeholder pod goes [default: the Job's]; in a managed namespace the "
    "admission policies refuse it.",
)
@common_options
@with_common
def gpu_steal(
    common: Common, *, node: str, job: str | None, placeholder_namespace: str | None
) -> None:
    """A pod outside any queue takes the GPUs a gang planned on a node.

    \b
    Taints the node while it deletes the gang's members bound there, binds a
    placeholder pod (no queue, spec.nodeName) requesting exactly the GPUs free
    there then, and takes the taint off: the members planned there can never
    bind.  Expects the gang evicted at its timeout (PodsReadyTimeout or
    MembersLost), its quota back, requeued and readmitted on other nodes, and
    no node over-committed.  Undone by deleting the placeholder.  A placeholder
    refused (a quota; in a managed namespace, the admission policies: give
    --placeholder-namespace) is reported "could not inject" and exits 3.
    """
    gateway = gateway_for(common.kubeconfig)
    target = job or job_on(gateway, node)

    def plan(gang: chaos.GangSeen, items: list[Located], run: str) -> chaos.Injection:
        obj = next(
            (
                i.obj
                for i in items
                if i.obj.get("kind") == "Node" and get(i.obj, "metadata.name", str, "") == node
            ),
            None,
        )
        if obj is None:
            raise InputError(f"no Node {node}", field="--node")
        pods = [i.obj for i in items if i.obj.get("kind") == "Pod"]
        return chaos.gpu_steal(
            gang, obj, pods, run=run, placeholder_namespace=placeholder_namespace
        )

    run_experiment(common, target, plan, "gpu-steal")


@chaos_group.command("controller-restart")
@click.option("--job", required=True, metavar="[KIND/]NS/NAME", help=GANG_HELP)
@click.option(
    "--during",
    type=click.Choice(chaos.DURING),
    default="admission",
    show_default=True,
    help="admission: once the gang is Admitted, before all its members run; "
    "eviction: once it is Evicted.",
)
@click.option("--pid", type=int, help="A controller running here: killed with SIGKILL.")
@click.option(
    "--pod-selector",
    metavar="SELECTOR",
    help="The controller's pods in the cluster: deleted (their Deployment makes new ones).",
)
@click.option(
    "--namespace",
    "controller_namespace",
    default="queue-controller-system",
    show_default=True,
    help="Where the --pod-selector pods are (deploy/manifests puts them here).",
)
@click.option(
    "--restart-command",
    metavar="CMD",
    help="With --pid: a shell command that starts the controller again after the kill.",
)
@common_options
@with_common
def controller_restart(
    common: Common,
    *,
    job: str,
    during: str,
    pid: int | None,
    pod_selector: str | None,
    controller_namespace: str,
    restart_command: str | None,
) -> None:
    """Kill the controller the moment a gang is admitted (or evicted), and let it restart.

    \b
    Give the controller by --pid (a local process: SIGKILL, then --restart-command,
    or the operator, starts it again) or by --pod-selector (its pods are deleted).
    With --during admission, start it before the Job is admitted.  Expects the
    gang to end Running, admitted once: never evicted and admitted again, and
    never AdmittedTwice; with --during eviction, requeued and readmitted too.
    """
    if (pid is None) == (pod_selector is None):
        raise InputError("give one of --pid and --pod-selector", field="--pid")
    if restart_command and pid is None:
        raise InputError("--restart-command goes with --pid", field="--restart-command")
    target = chaos.Target(pid=pid, selector=pod_selector or "", namespace=controller_namespace)
    pods = []
    if pod_selector:
        gateway = gateway_for(common.kubeconfig)
        listed = gateway.list(gw.POD, namespace=controller_namespace, label_selector=pod_selector)
        pods = [get(p, "metadata.name", str, "") for p in listed]
    wait = parse_duration(common.wait, field="--wait")

    def plan(gang: chaos.GangSeen, _items: list[Located], _run: str) -> chaos.Injection:
        return chaos.controller_restart(
            gang,
            during=during,
            target=target,
            pods=pods,
            wait=wait,
            restart_command=restart_command,
        )

    run_experiment(common, job, plan, "controller-restart", admitted_first=False)


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
    done = chaos.undo(gateway_for(kubeconfig), run=run, dry_run=dry_run)
    if output == "json":
        click.echo(json.dumps({"dryRun": dry_run, "undone": done}, indent=2))
        return
    for step in done:
        click.echo(("would " if dry_run else "") + step)
    if not done:
        click.echo("nothing left by a chaos run")
