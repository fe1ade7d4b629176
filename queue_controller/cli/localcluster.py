"""``queue-controller local-cluster``: the real local control plane with fake GPU nodes."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from queue_controller import nodepools
from queue_controller.cli.options import output_option
from queue_controller.errors import InputError
from queue_controller.localcluster import Layout, LocalCluster

_DEPLOY = Path("deploy/local-cluster")


def _layout(bin_dir: Path, state_dir: Path, stages: Path) -> Layout:
    return Layout(bin_dir=bin_dir, state_dir=state_dir, stages=stages)


def _paths(function: click.decorators.FC) -> click.decorators.FC:
    function = click.option(
        "--state-dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=Path(".cluster"),
        show_default=True,
        help="Where the PKI, kubeconfig, etcd data, PIDs and logs live.",
    )(function)
    function = click.option(
        "--bin-dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=_DEPLOY / "bin",
        show_default=True,
        help="The binaries built by `make cluster-build`.",
    )(function)
    return click.option(
        "--stages",
        type=click.Path(path_type=Path, dir_okay=False),
        default=_DEPLOY / "kwok-stages.yaml",
        show_default=True,
        help="kwok Stage definitions: how fake nodes and pods behave.",
    )(function)


def _sizes(values: tuple[str, ...]) -> dict[str, int]:
    sizes = {}
    for value in values:
        pool, _, count = value.partition("=")
        if not pool or not count.isdigit():
            raise InputError(f"{value!r}: expected POOL=COUNT, such as h100=800", field="--size")
        sizes[pool] = int(count)
    return sizes


@click.group("local-cluster")
def local_cluster() -> None:
    """A real local control plane (etcd, kube-apiserver, kube-controller-manager,
    kube-scheduler) with kwok running fake GPU nodes, all on 127.0.0.1.

    Build the binaries first with `make cluster-build`.
    """


@local_cluster.command()
@_paths
@click.option(
    "--nodes",
    "node_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=_DEPLOY / "nodes.yaml",
    show_default=True,
    help="Node-pool file: the fake GPU nodes to create.",
)
@click.option(
    "--size",
    "sizes",
    multiple=True,
    metavar="POOL=COUNT",
    help="Override a pool's node count (repeatable): --size h100=800 --size l4=50.",
)
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds to wait.")
@click.option(
    "--dra/--no-dra",
    default=True,
    show_default=True,
    help="Publish each GPU node's devices as a ResourceSlice of gpu.nvidia.com, "
    "with DeviceClasses gpu.nvidia.com and mig.nvidia.com (see deploy/local-cluster/DRA.md).",
)
@click.option(
    "--audit-policy",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    default=None,
    help="An audit Policy file: the API server logs requests (with user agents) to "
    "STATE_DIR/logs/audit.log.  Off by default.",
)
@click.option(
    "--operators",
    default="",
    metavar="NAMES",
    help="Workload operators to run against the cluster, comma-separated: kuberay, "
    "training-operator (built by `make cluster-build OPERATORS=...`).  On a running "
    "cluster, starts those not running yet.",
)
def up(
    bin_dir: Path,
    state_dir: Path,
    stages: Path,
    node_file: Path,
    sizes: tuple[str, ...],
    timeout: float,
    dra: bool,
    audit_policy: Path | None,
    operators: str,
) -> None:
    """Start the cluster and wait until every fake node is Ready.

    A second `up` while a cluster runs says so and starts nothing (but the operators
    asked for that are not running yet).
    """
    pools = nodepools.load(node_file).resized(_sizes(sizes))
    names = tuple(name.strip() for name in operators.split(",") if name.strip())
    LocalCluster(_layout(bin_dir, state_dir, stages), report=click.echo).up(
        pools, timeout=timeout, dra=dra, audit_policy=audit_policy, operators=names
    )


@local_cluster.command()
@_paths
@click.option(
    "--nodes",
    "node_file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=_DEPLOY / "nodes.yaml",
    show_default=True,
    help="Node-pool file: the fake GPU nodes to create if the cluster is not up.",
)
@click.option(
    "--watch",
    "watch_seconds",
    type=float,
    default=100.0,
    show_default=True,
    help="Seconds to show `kubectl get podgroups -A -w` (0: do not watch).",
)
def demo(
    bin_dir: Path, state_dir: Path, stages: Path, node_file: Path, watch_seconds: float
) -> None:
    """Start the cluster and the controller if needed, install the CRDs and examples/,
    submit the example Jobs one by one, and watch their gangs queue and get admitted.

    This is `make run`.  Everything stays up afterwards: stop it with `make cluster-down`.
    """
    from queue_controller.localcluster.demo import Demo

    cluster = LocalCluster(_layout(bin_dir, state_dir, stages), report=click.echo)
    Demo(cluster, root=Path.cwd(), report=click.echo).run(
        nodepools.load(node_file), watch_seconds=watch_seconds
    )


@local_cluster.command()
@_paths
def down(bin_dir: Path, state_dir: Path, stages: Path) -> None:
    """Stop every process the cluster started, by PID, and remove its state."""
    LocalCluster(_layout(bin_dir, state_dir, stages), report=click.echo).down()


@local_cluster.command()
@_paths
@output_option()
def status(bin_dir: Path, state_dir: Path, stages: Path, output: str) -> None:
    """Show which components run, their PIDs and ports, and the kubeconfig."""
    layout = _layout(bin_dir, state_dir, stages)
    current = LocalCluster(layout, report=click.echo).status()
    state = current.state
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "up": current.up,
                    "running": current.running,
                    "pids": state.pids if state else {},
                    "ports": state.ports if state else {},
                    "nodes": state.nodes if state else 0,
                    "kubeconfig": str(layout.kubeconfig.resolve()) if state else None,
                },
                indent=2,
            )
        )
    elif state is None:
        click.echo("no local cluster is running")
    else:
        table = Table(box=None, header_style="bold")
        for column in ("COMPONENT", "PID", "PORT", "STATE"):
            table.add_column(column)
        for name, alive in current.running.items():
            table.add_row(
                name,
                str(state.pids[name]),
                str(state.ports.get(name, "")),
                "[green]running[/]" if alive else "[red]stopped[/]",
            )
        Console().print(table)
        click.echo(f"{state.nodes} nodes; started in {state.startup_seconds}s")
        click.echo(f"export KUBECONFIG={layout.kubeconfig.resolve()}")
    if state is not None and not current.up:
        raise SystemExit(1)
