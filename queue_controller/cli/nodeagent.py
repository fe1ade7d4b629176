"""``queue-controller node-agent``: the GPU health reporter that runs on every GPU node."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click


@click.command("node-agent")
@click.option(
    "--once",
    is_flag=True,
    help="Read NVML once, print the inventory and the faults found as JSON, and exit 0. "
    "No cluster access; for checking a GPU machine by hand.",
)
@click.option(
    "--node-name",
    help="The Node to publish on; required unless --once. [QC_AGENT_NODE_NAME, else NODE_NAME]",
)
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    help="Default: in-cluster, then ~/.kube/config. [QC_AGENT_KUBECONFIG]",
)
@click.option(
    "--poll",
    "poll_seconds",
    type=float,
    help="Seconds between polls of temperature, power and lost GPUs; XIDs are published "
    "as they arrive (default 10). [QC_AGENT_POLL_SECONDS]",
)
@click.option(
    "--clear-after",
    "clear_seconds",
    type=float,
    help="Seconds without a new fault before a GPU counts as healthy again (default 600). "
    "[QC_AGENT_CLEAR_SECONDS]",
)
@click.option(
    "--max-temperature",
    "max_temperature_c",
    type=float,
    help="GPU temperature in C above which it is unhealthy (default 90; 0: no limit). "
    "[QC_AGENT_MAX_TEMPERATURE_C]",
)
@click.option(
    "--power-fraction",
    type=float,
    help="Power draw, as a fraction of the enforced power limit, above which a GPU is "
    "unhealthy (default 1.05; 0: no limit). [QC_AGENT_POWER_FRACTION]",
)
@click.option(
    "--ignored-xids",
    metavar="LIST",
    help="Comma-separated XIDs that are no fault, or `none` (default 13,31,43,45,68,109: "
    "errors an application causes). [QC_AGENT_IGNORED_XIDS]",
)
@click.option(
    "--taint/--no-taint",
    default=None,
    help="Also taint the Node queue-controller.io/gpu-unhealthy:NoSchedule while any GPU "
    "is unhealthy (default off). [QC_AGENT_TAINT]",
)
@click.option(
    "--metrics-host", help="Address for /metrics (default 0.0.0.0). [QC_AGENT_METRICS_HOST]"
)
@click.option(
    "--metrics-port",
    type=int,
    help="Port for /metrics (default 9401; 0 picks one). [QC_AGENT_METRICS_PORT]",
)
@click.option(
    "--nvml-retry",
    "nvml_retry_seconds",
    type=float,
    help="Seconds between attempts to open NVML while it is unavailable (default 300). "
    "[QC_AGENT_NVML_RETRY_SECONDS]",
)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]),
    help="[QC_AGENT_LOG_LEVEL]",
)
@click.pass_context
def node_agent(ctx: click.Context, /, once: bool, **flags: object) -> None:
    """Watch this node's GPUs through NVML and publish their health on its Node.

    XID errors, lost GPUs, and temperature or power beyond the limits make a GPU
    unhealthy until --clear-after passes without a new fault, or until an operator
    sets the Node annotation queue-controller.io/gpu-health-reset to a new value.
    The Node gets the condition GPUHealthy and the annotation
    queue-controller.io/gpu-health, which the controller's admission reads.

    Without an NVIDIA driver the condition says Unknown (NVMLUnavailable) and the
    agent keeps running, trying NVML again every --nvml-retry seconds.

    Every option can also be set through the environment variable shown.
    """
    from queue_controller.agent.settings import load

    settings = load(**flags)
    # A test hands in a fake NVML through the context object; nobody else does.
    nvml = ctx.obj.get("nvml") if isinstance(ctx.obj, dict) else None
    if once:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        from queue_controller.agent.once import once as read_once

        document = read_once(limits=settings.limits, nvml=nvml)
        click.echo(json.dumps(document, indent=2))
        return
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from queue_controller.agent.main import run_agent

    run_agent(settings, nvml=nvml)
