"""``queue-controller run``: the controller itself."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click


@click.command()
@click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    help="Default: in-cluster, then ~/.kube/config. [QC_KUBECONFIG]",
)
@click.option("--namespace", help="Namespace of the leader-election Lease. [QC_NAMESPACE]")
@click.option(
    "--leader-elect/--no-leader-elect",
    "leader_election",
    default=None,
    help="Admit only while holding the Lease (default on). [QC_LEADER_ELECTION]",
)
@click.option(
    "--metrics-host",
    help="Address for /metrics, /healthz, /readyz (default 127.0.0.1). [QC_METRICS_HOST]",
)
@click.option(
    "--metrics-port",
    type=int,
    help="Port for /metrics, /healthz, /readyz (default 8080; 0 picks one). [QC_METRICS_PORT]",
)
@click.option(
    "--webhook",
    type=click.Choice(["local", "service", "off"]),
    help="How Jobs are held at creation (default local). [QC_WEBHOOK]",
)
@click.option(
    "--webhook-host", help="Host name or IP the API server calls the webhook on. [QC_WEBHOOK_HOST]"
)
@click.option("--webhook-port", type=int, help="Webhook port (default 9443). [QC_WEBHOOK_PORT]")
@click.option(
    "--webhook-cert-dir",
    type=click.Path(path_type=Path),
    help="tls.crt, tls.key, ca.crt. [QC_WEBHOOK_CERT_DIR]",
)
@click.option(
    "--journal",
    "journal_url",
    metavar="URL",
    help="Decision journal database (SQLite default). [QC_JOURNAL_URL]",
)
@click.option(
    "--journal-retention-days",
    type=float,
    help="Prune journal entries older than this many days (default 30; 0: keep). "
    "[QC_JOURNAL_RETENTION_DAYS]",
)
@click.option(
    "--journal-max-rows",
    type=int,
    help="Keep at most this many journal entries, pruning the oldest (default 1000000; "
    "0: no limit). [QC_JOURNAL_MAX_ROWS]",
)
@click.option(
    "--tick",
    "tick_seconds",
    type=float,
    help="Cycle at least this often, in seconds (default 5). [QC_TICK_SECONDS]",
)
@click.option(
    "--cycle-period",
    "cycle_period_seconds",
    type=float,
    help="Start cycles at most this often, in seconds, however fast changes come "
    "(default 1; Volcano's schedule period). [QC_CYCLE_PERIOD_SECONDS]",
)
@click.option(
    "--pods-ready-timeout",
    "pods_ready_timeout_seconds",
    type=int,
    help="Seconds a gang may stay partially placed before eviction (default 300). "
    "[QC_PODS_READY_TIMEOUT_SECONDS]",
)
@click.option(
    "--creation-backlog",
    "creation_backlog_pods",
    type=int,
    help="Admission waits while this many pods of admitted gangs are still to be made by "
    "their controllers (default 0: no limit). [QC_CREATION_BACKLOG_PODS]",
)
@click.option(
    "--max-reservations",
    type=int,
    help="Reservations held at once in the cluster, for Queues that set "
    "spec.reservation (default 8; 0: none). [QC_MAX_RESERVATIONS]",
)
@click.option(
    "--history-min-gangs",
    type=int,
    help="Like gangs that must have finished before their median runtime becomes an "
    "estimate (default 3). [QC_HISTORY_MIN_GANGS]",
)
@click.option(
    "--history-refresh",
    "history_refresh_seconds",
    type=float,
    help="Seconds between reads of finished gangs' runtimes from the journal (default "
    "300). [QC_HISTORY_REFRESH_SECONDS]",
)
@click.option(
    "--eta-interval",
    "eta_interval_seconds",
    type=float,
    help="Seconds between forecasts of each pending gang's start, written to PodGroup "
    "status.eta (default 60; 0: off). [QC_ETA_INTERVAL_SECONDS]",
)
@click.option(
    "--dcgm-urls",
    metavar="URL[,URL...]",
    help="Read GPU health and activity from DCGM: dcgm-exporter /metrics targets or a "
    "Prometheus /federate URL (default off; the node agent is the other way). [QC_DCGM_URLS]",
)
@click.option(
    "--dcgm-interval",
    "dcgm_interval_seconds",
    type=float,
    help="Seconds between DCGM reads (default 30). [QC_DCGM_INTERVAL_SECONDS]",
)
@click.option(
    "--gpu-clear",
    "gpu_clear_seconds",
    type=float,
    help="Seconds without a fault before a GPU counts as healthy again (default 600). "
    "[QC_GPU_CLEAR_SECONDS]",
)
@click.option(
    "--gpu-taint/--no-gpu-taint",
    default=None,
    help="With DCGM: taint nodes that have unhealthy GPUs (default off). [QC_GPU_TAINT]",
)
@click.option(
    "--idle-threshold",
    type=float,
    help="GR_ENGINE_ACTIVE below this is idle (default 0.05). [QC_IDLE_THRESHOLD]",
)
@click.option(
    "--idle-window",
    "idle_window_seconds",
    type=float,
    help="Seconds of idle GPUs before a gang is flagged Idle (default 1800). "
    "[QC_IDLE_WINDOW_SECONDS]",
)
@click.option(
    "--managed-namespace-selector",
    metavar="SELECTOR",
    help="Queue every Job or Pod that asks for an accelerator in the namespaces this "
    "label selector picks, even without a queue label: in the namespace's Queue "
    "'default' (Kueue's managedJobsNamespaceSelector). Default: off. "
    "[QC_MANAGED_NAMESPACE_SELECTOR]",
)
@click.option(
    "--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), help="[QC_LOG_LEVEL]"
)
# Hidden: a fault injected on purpose so that tests can prove `check` and `chaos`
# catch a broken controller.  Not for production, and not in the chart.
@click.option(
    "--fault", "faults", type=click.Choice(["skip-evictions"]), multiple=True, hidden=True
)
def run(faults: tuple[str, ...] = (), **flags: object) -> None:
    """Run the controller: hold queued Jobs suspended, admit whole gangs where they fit,
    place them exactly, and evict and requeue gangs left partially placed.

    Every option can also be set through the environment variable shown.
    """
    # Imported here: the controller brings kopf and SQLAlchemy, which `plan` and
    # `history` need not wait for.
    from queue_controller.controller import settings as settings_module
    from queue_controller.controller.operator import run as run_operator

    if "skip-evictions" in faults:
        flags["fault_skip_evictions"] = True
    settings = settings_module.load(**flags)
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # The election library logs every renewal; our own lines say when leadership changes.
    logging.getLogger("leaderelection").setLevel(logging.WARNING)
    logging.getLogger("kopf").setLevel(
        max(logging.WARNING, logging.getLevelName(settings.log_level))
    )
    asyncio.run(run_operator(settings))
