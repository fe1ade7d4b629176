"""The node agent's settings: flags over ``QC_AGENT_*`` environment variables.

The node name also comes from ``NODE_NAME``, which the DaemonSet sets from
the downward API (``spec.nodeName``).  A bad value stops start-up with one
line naming the setting, as the controller's settings do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from queue_controller.envsettings import load_settings
from queue_controller.gpuhealth.readings import Limits
from queue_controller.gpuhealth.tracker import APPLICATION_XIDS

PREFIX = "QC_AGENT_"


class AgentSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="forbid", frozen=True)

    node_name: str = Field(
        default_factory=lambda: os.environ.get("NODE_NAME", ""),
        description="The Node to publish on; required unless --once.",
    )
    kubeconfig: Path | None = Field(
        default=None, description="Kubeconfig file; none means in-cluster, then ~/.kube/config."
    )
    poll_seconds: float = Field(default=10.0, gt=0)
    clear_seconds: float = Field(
        default=600.0, ge=0, description="A GPU is healthy again after this long without a fault."
    )
    max_temperature_c: float = Field(default=90.0, ge=0, description="0: no temperature limit.")
    power_fraction: float = Field(
        default=1.05, ge=0, description="Of the enforced power limit; 0: no power limit."
    )
    # A comma-separated list in the environment ("13,31,43"), not JSON.
    ignored_xids: Annotated[frozenset[int], NoDecode] = APPLICATION_XIDS
    taint: bool = Field(
        default=False, description="Also taint the node while any of its GPUs is unhealthy."
    )
    metrics_host: str = "0.0.0.0"
    # 9400 is dcgm-exporter's, which often runs on the same nodes.
    metrics_port: int = Field(default=9401, ge=0, le=65535)
    nvml_retry_seconds: float = Field(
        default=300.0, gt=0, description="How often to try NVML again while it is unavailable."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("ignored_xids", mode="before")
    @classmethod
    def _xid_list(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        items = [item.strip() for item in value.split(",") if item.strip()]
        if items == ["none"]:
            return frozenset()
        try:
            return frozenset(int(item) for item in items)
        except ValueError:
            raise ValueError(f"not a comma-separated list of XID numbers: {value!r}") from None

    @model_validator(mode="after")
    def _files(self) -> AgentSettings:
        if self.kubeconfig is not None and not self.kubeconfig.is_file():
            raise ValueError(f"kubeconfig: no such file {self.kubeconfig}")
        return self

    @property
    def limits(self) -> Limits:
        return Limits(
            max_temperature_c=self.max_temperature_c,
            power_fraction=self.power_fraction,
            ignored_xids=self.ignored_xids,
        )


def load(**flags: object) -> AgentSettings:
    """Settings from the flags given over ``QC_AGENT_*`` variables; an unknown
    ``QC_AGENT_*`` variable is a typo and stops start-up like a bad value."""
    return load_settings(AgentSettings, prefix=PREFIX, flags=flags)
