"""Policy presets: validated YAML files (``policies/*.yaml``) that set how admission behaves.

A policy overrides what the Queues say where it names a value, so the same
cluster and workload can be replayed under, say, a 2-minute and a 30-minute
pods-ready timeout.  What it leaves out, the Queues (and then the
controller's defaults) decide, exactly as on a real cluster.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from queue_controller.core import Ordering, Queue
from queue_controller.dump import StrictLoader
from queue_controller.errors import InputError

DEFAULT_POLICY = "default"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Requeue(_Strict):
    """Overrides each Queue's ``spec.requeue`` field by field; what is left out, the Queue sets."""

    backoff_base_seconds: int | None = Field(default=None, alias="backoffBaseSeconds", ge=0)
    backoff_max_seconds: int | None = Field(default=None, alias="backoffMaxSeconds", ge=0)
    backoff_limit: int | None = Field(default=None, alias="backoffLimit", ge=0)

    @model_validator(mode="after")
    def _base_within_max(self) -> Requeue:
        base, most = self.backoff_base_seconds, self.backoff_max_seconds
        if base is not None and most is not None and base > most:
            raise ValueError(f"backoffBaseSeconds ({base}) exceeds backoffMaxSeconds ({most})")
        return self


class Window(_Strict):
    """A delay drawn uniformly from [min, max] seconds for each pod."""

    min: float = Field(ge=0)
    max: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class Policy(_Strict):
    """One preset.  Field names are those of the YAML file."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    description: str = ""
    # How often the admission cycle runs (the controller batches changes the same way).
    cycle_seconds: float = Field(10.0, alias="cycleSeconds", gt=0, le=3600)
    # Overrides every Queue's podsReadyTimeoutSeconds when set; else the Queue's, else
    # DEFAULT_TIMEOUT_SECONDS, the controller's own --pods-ready-timeout default (300 s).
    pods_ready_timeout_seconds: int | None = Field(
        default=None, alias="podsReadyTimeoutSeconds", ge=1
    )
    # Overrides every Queue's ordering when set.
    ordering: Ordering | None = None
    requeue: Requeue = Requeue()
    # How kube-scheduler scores nodes when it places pods one by one: the baselines'
    # members and pods outside any queue.  LeastAllocated is its default; gang-fit's
    # members go where the core planned them.
    scheduler_scoring: Literal["LeastAllocated", "MostAllocated"] = Field(
        "LeastAllocated", alias="schedulerScoring"
    )
    # From admission to a member pod being bound (Job controller + scheduler), and from
    # bound to running (image pull, start).
    bind_delay_seconds: Window = Field(Window(min=1, max=10), alias="bindDelaySeconds")
    start_delay_seconds: Window = Field(Window(min=5, max=60), alias="startDelaySeconds")
    # A per-pod gang with no progress for this long counts as deadlocked.
    deadlock_seconds: float = Field(3600.0, alias="deadlockSeconds", gt=0)
    # How long a preempted gang's pods take to terminate, holding their GPUs meanwhile
    # (the pod's terminationGracePeriodSeconds; Kubernetes's default is 30 s).  Only
    # runs with preemption on (`simulate --preemption`) evict anything for it.
    termination_grace_period_seconds: float = Field(
        30.0, alias="terminationGracePeriodSeconds", ge=0
    )

    def applied_to(self, queue: Queue) -> Queue:
        """The Queue as this policy runs it: what the policy names wins, the rest stays."""
        timeout = self.pods_ready_timeout_seconds
        knobs, backoff = self.requeue, queue.requeue
        return replace(
            queue,
            ordering=self.ordering or queue.ordering,
            pods_ready_timeout_seconds=(
                timeout if timeout is not None else queue.pods_ready_timeout_seconds
            ),
            requeue=replace(
                backoff,
                backoff_base_seconds=_either(
                    knobs.backoff_base_seconds, backoff.backoff_base_seconds
                ),
                backoff_max_seconds=_either(knobs.backoff_max_seconds, backoff.backoff_max_seconds),
                backoff_limit=_either(knobs.backoff_limit, backoff.backoff_limit),
            ),
        )


def _either(override: int | None, value: int | None) -> Any:
    return override if override is not None else value


DEFAULT_TIMEOUT_SECONDS = 300


def load(path: Path) -> Policy:
    """Read and validate one policy file; errors name the file and the field."""
    where = str(path)
    try:
        # A key given twice is refused, naming its line, as in a dump.
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=StrictLoader)
    except OSError as error:
        raise InputError(f"cannot read the policy file: {error.strerror}", where=where) from None
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text", where=where) from None
    except yaml.YAMLError as error:
        # One line, as the CLI prints every error: the problem and where it is.
        mark = getattr(error, "problem_mark", None)
        if mark is not None:
            where = f"{path} line {mark.line + 1}, column {mark.column + 1}"
        problem = " ".join(str(getattr(error, "problem", None) or error).split())
        raise InputError(f"not valid YAML: {problem}", where=where) from None
    if not isinstance(document, dict):
        raise InputError("a policy is a YAML mapping (name, cycleSeconds, ...)", where=where)
    try:
        return Policy.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        detail = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            detail = f"unknown key (keys here: {', '.join(_keys(first['loc'][:-1]))})"
        raise InputError(detail, where=where, field=field) from None


def _keys(loc: tuple[int | str, ...]) -> list[str]:
    """The YAML keys allowed at ``loc`` (the top level, ``requeue``, a delay window)."""
    model: type[BaseModel] = Policy
    for part in loc:
        annotation = model.model_fields[_by_alias(model, str(part))].annotation
        model = annotation if isinstance(annotation, type) else Policy
    return [info.alias or name for name, info in model.model_fields.items()]


def _by_alias(model: type[BaseModel], key: str) -> str:
    return next((n for n, f in model.model_fields.items() if key in (n, f.alias)), key)


def bundled_policies_dir() -> Path:
    """``policies/`` of a source checkout, else the copy installed with the package."""
    here = Path(__file__).resolve()  # queue_controller/sim/scenario/policy.py
    checkout = here.parents[3] / "policies"
    if checkout.is_dir():
        return checkout
    return here.parents[2] / "data" / "policies"


def resolve(name_or_path: str) -> Path:
    """A path as given, or the name of a bundled preset (``default``, ``short-timeout``)."""
    path = Path(name_or_path)
    if path.suffix in {".yaml", ".yml"} or path.exists():
        return path
    candidate = bundled_policies_dir() / f"{name_or_path}.yaml"
    if not candidate.exists():
        names = sorted(p.stem for p in bundled_policies_dir().glob("*.yaml"))
        raise InputError(
            f"no such policy file, and no bundled preset of that name (presets: "
            f"{', '.join(names) or 'none'})",
            where=name_or_path,
        )
    return candidate
