"""The controller's settings: one validated object from the environment (``QC_*``) and flags.

A bad value stops start-up with a line that names the setting, before
anything connects to the cluster.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from queue_controller.core.cycle import DEFAULT_CREATION_BACKLOG
from queue_controller.core.reservation import DEFAULT_MIN_HISTORY
from queue_controller.envsettings import load_settings
from queue_controller.errors import InputError
from queue_controller.journal import DEFAULT_URL
from queue_controller.journal.database import parse_url
from queue_controller.journal.retention import DEFAULT_MAX_AGE_DAYS, DEFAULT_MAX_ROWS
from queue_controller.kube.kinds.selectors import LabelSelector, parse_selector


def _identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="QC_", extra="forbid", frozen=True)

    kubeconfig: Path | None = Field(
        default=None, description="Kubeconfig file; none means in-cluster, then ~/.kube/config."
    )
    namespace: str = Field(
        default_factory=lambda: os.environ.get("POD_NAMESPACE", "queue-controller-system"),
        min_length=1,
        description="Where the leader-election Lease lives.",
    )
    identity: str = Field(default_factory=_identity, min_length=1)
    leader_election: bool = True
    lease_name: str = Field(default="queue-controller", min_length=1)
    lease_duration_seconds: int = Field(default=15, ge=2)
    renew_deadline_seconds: int = Field(default=10, ge=1)
    retry_period_seconds: int = Field(default=2, ge=1)
    tick_seconds: float = Field(
        default=5.0, gt=0, description="Safety-net cycle period when nothing changes."
    )
    batch_seconds: float = Field(
        default=0.2, ge=0, description="How long a burst of changes is gathered before a cycle."
    )
    cycle_period_seconds: float = Field(
        default=1.0,
        ge=0,
        description="Cycles start at most this often, however fast changes come "
        "(Volcano's schedule period); 0: as soon as a burst is gathered.",
    )
    pods_ready_timeout_seconds: int = Field(
        default=300, ge=0, description="Used when neither PodGroup nor Queue sets one."
    )
    creation_backlog_pods: int = Field(
        default=DEFAULT_CREATION_BACKLOG,
        ge=0,
        description="Admission waits while admitted gangs' pods not yet made by their "
        "controllers (the Job controller) pass this many; 0: no limit.",
    )
    status_writes_per_cycle: int = Field(
        default=200, ge=1, description="Cap on pending-reason status writes in one cycle."
    )
    # Reservation with backfill (docs/reservation.md): Queues turn it on; these bound it.
    max_reservations: int = Field(
        default=8,
        ge=0,
        description="Reservations held at once in the whole cluster; 0: none.",
    )
    history_min_gangs: int = Field(
        default=DEFAULT_MIN_HISTORY,
        ge=1,
        description="Like gangs that must have finished before their median runtime is "
        "a gang's estimate.",
    )
    history_refresh_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How often the finished gangs' runtimes are read from the journal.",
    )
    # Each pending gang's estimated start (PodGroup status.eta, controller/eta.py).
    eta_interval_seconds: float = Field(
        default=60.0,
        ge=0,
        description="Estimated starts are forecast and written at most this often; 0: off.",
    )
    journal_url: str = Field(default=DEFAULT_URL, min_length=1)
    # Retention: the journal would otherwise grow for ever.  0 turns a bound off.
    journal_retention_days: float = Field(
        default=DEFAULT_MAX_AGE_DAYS,
        ge=0,
        le=36_500,  # a century: beyond it a date cannot be subtracted from now
        description="Prune journal entries older than this many days.",
    )
    journal_max_rows: int = Field(
        default=DEFAULT_MAX_ROWS, ge=0, description="Keep at most this many journal entries."
    )
    metrics_host: str = "127.0.0.1"
    metrics_port: int = Field(default=8080, ge=0, le=65535)
    webhook: Literal["local", "service", "off"] = Field(
        default="local",
        description=(
            "local: serve on webhook_host and register the webhook configuration with a "
            "URL (a controller outside the cluster); service: serve only, the Helm chart "
            "registers it behind a Service; off: rely on the suspend fallback alone."
        ),
    )
    webhook_host: str = "127.0.0.1"
    webhook_port: int = Field(default=9443, ge=0, le=65535)
    webhook_cert_dir: Path | None = Field(
        default=None,
        description="tls.crt, tls.key and ca.crt; made on the fly for the local webhook if unset.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Kueue's manageJobsWithoutQueueName + managedJobsNamespaceSelector, in one setting.
    managed_namespace_selector: str = Field(
        default="",
        description=(
            "A label selector of namespaces (`team=a`, `kubernetes.io/metadata.name notin "
            "(kube-system)`) where every Job or Pod that asks for an accelerator is queued "
            "even without a queue label, in the namespace's Queue `default`.  Empty: off."
        ),
    )
    # GPU health from DCGM: the alternative to the node agent (see docs/gpu-health.md).
    dcgm_urls: str = Field(
        default="",
        description=(
            "Comma-separated URLs that serve DCGM metrics in the Prometheus text format: "
            "dcgm-exporter /metrics targets, or a Prometheus /federate URL.  Empty: off."
        ),
    )
    dcgm_interval_seconds: float = Field(default=30.0, gt=0, description="How often to read them.")
    gpu_clear_seconds: float = Field(
        default=600.0, ge=0, description="A GPU is healthy again after this long without a fault."
    )
    gpu_taint: bool = Field(
        default=False,
        description="Taint nodes with unhealthy GPUs queue-controller.io/gpu-unhealthy:NoSchedule.",
    )
    idle_threshold: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="DCGM_FI_PROF_GR_ENGINE_ACTIVE below this counts as idle.",
    )
    idle_window_seconds: float = Field(
        default=1800.0, gt=0, description="How long a gang's GPUs must idle before it is flagged."
    )
    # A fault injected on purpose, for tests only: a controller that never evicts is how
    # `check` and `chaos` prove they catch a broken controller.  Never in the chart.
    fault_skip_evictions: bool = Field(
        default=False,
        description="TEST-ONLY fault: plan no eviction at all (timeouts, lost members, "
        "GPU faults, preemption).  Breaks the controller on purpose.",
    )

    @property
    def dcgm_targets(self) -> tuple[str, ...]:
        return tuple(url.strip() for url in self.dcgm_urls.split(",") if url.strip())

    @field_validator("dcgm_urls")
    @classmethod
    def _dcgm_urls(cls, value: str) -> str:
        for url in (u.strip() for u in value.split(",")):
            if url and not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return value

    @property
    def managed_namespaces(self) -> LabelSelector | None:
        """The managed namespaces' selector; None when queueing is not enforced."""
        text = self.managed_namespace_selector
        return parse_selector(text) if text.strip() else None

    @field_validator("managed_namespace_selector")
    @classmethod
    def _managed_namespace_selector(cls, value: str) -> str:
        try:
            parse_selector(value)
        except InputError as error:
            raise ValueError(error.detail) from None
        return value

    @field_validator("journal_url")
    @classmethod
    def _journal_url(cls, value: str) -> str:
        try:
            parse_url(value)
        except InputError as error:
            raise ValueError(error.detail) from None
        return value

    @model_validator(mode="after")
    def _election_timing(self) -> Settings:
        # The election library exits the process on these; say which setting instead.
        if self.lease_duration_seconds <= self.renew_deadline_seconds:
            raise ValueError("lease_duration_seconds must exceed renew_deadline_seconds")
        if self.renew_deadline_seconds <= 1.2 * self.retry_period_seconds:
            raise ValueError("renew_deadline_seconds must exceed 1.2 x retry_period_seconds")
        if self.kubeconfig is not None and not self.kubeconfig.is_file():
            raise ValueError(f"kubeconfig: no such file {self.kubeconfig}")
        if self.webhook == "service" and self.webhook_cert_dir is None:
            raise ValueError("webhook_cert_dir is required when webhook is 'service'")
        return self


def load(**flags: object) -> Settings:
    """Settings from flags (those given) over ``QC_*`` environment variables.

    A ``QC_*`` variable that is no setting is a typo that would otherwise be
    ignored without a word; it stops start-up like any other bad setting.
    """
    return load_settings(Settings, prefix="QC_", flags=flags)
