"""Reading NVIDIA dcgm-exporter's metrics: one :class:`GpuSample` per physical GPU.

The text comes from a dcgm-exporter ``/metrics`` target or from a Prometheus
server's ``/federate`` endpoint; both speak the Prometheus text exposition
format, read here with ``prometheus_client``'s own parser.

How series become samples:

* a series names its node in ``Hostname`` (released exporters) or ``hostname``
  (the newest code) and its GPU in ``gpu``; one without either cannot be placed
  and is skipped, and :attr:`Parsed.skipped` counts it;
* MIG instances (``GPU_I_ID``, ``GPU_I_PROFILE``) belong to their parent ``gpu``;
  the parent is busy if any instance is, so ``gr_engine_active`` is the highest
  value among its series, while each pod keeps the activity of its own series;
* several series for one GPU (MIG instances, or a Prometheus scraping one
  exporter under two jobs) are combined so that the order of the input lines
  never changes the result: the highest XID, the highest activity, every pod.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_fd_to_metric_families

from queue_controller.errors import InputError

XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
_HOST_LABELS = ("Hostname", "hostname")
_MIG_INSTANCE = "GPU_I_ID"

# The OpenMetrics parser carries no annotations; this states what it returns.
_read_openmetrics: Callable[[TextIO], Iterable[Metric]] = (
    openmetrics_parser.text_fd_to_metric_families
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    """One physical GPU as one scrape saw it."""

    host: str
    gpu: int
    uuid: str = ""
    model: str = ""
    xid: int | None = None  # the last XID the GPU raised; 0: none; None: not exported
    gr_engine_active: float | None = None  # 0..1, the busiest of its series
    fb_used_mib: float | None = None
    # "namespace/pod" of the pods the exporter maps to it, sorted, unique.
    pods: tuple[str, ...] = ()
    # (pod, activity) per pod with a GR_ENGINE_ACTIVE series, sorted by pod:
    # on a MIG GPU each pod has its own instance, so its own activity.
    pod_activity: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Parsed:
    samples: list[GpuSample]
    # DCGM series without a host or a gpu label: the caller logs the count once.
    skipped: int = 0


def pod_activity(samples: Iterable[GpuSample]) -> dict[str, float]:
    """Each pod's GR_ENGINE_ACTIVE: the busiest of its GPUs and MIG instances."""
    activity: dict[str, float] = {}
    for sample in samples:
        for pod, value in sample.pod_activity:
            activity[pod] = max(value, activity.get(pod, value))
    return activity


@dataclass(slots=True)
class _Gpu:
    """What the series of one (host, gpu) said, gathered before choosing."""

    uuids: set[str] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    xids: set[int] = field(default_factory=set)
    active: list[float] = field(default_factory=list)
    fb_whole: list[float] = field(default_factory=list)
    fb_instances: dict[str, float] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)
    pod_active: dict[str, float] = field(default_factory=dict)

    def add(self, family: str, labels: Mapping[str, str], value: float) -> None:
        if labels.get("UUID"):
            self.uuids.add(labels["UUID"])
        if labels.get("modelName"):
            self.models.add(labels["modelName"])
        pod = _pod_of(labels)
        if pod:
            self.pods.add(pod)
        if not math.isfinite(value):
            return  # a blank field (NaN) says nothing about the GPU
        if family == XID_ERRORS:
            self.xids.add(int(value))
        elif family == GR_ENGINE_ACTIVE:
            self.active.append(value)
            if pod:
                self.pod_active[pod] = max(value, self.pod_active.get(pod, value))
        elif family == FB_USED:
            instance = labels.get(_MIG_INSTANCE)
            if instance is None:
                self.fb_whole.append(value)
            else:
                self.fb_instances[instance] = max(value, self.fb_instances.get(instance, value))

    def sample(self, host: str, gpu: int) -> GpuSample:
        # A whole-GPU series already counts its instances' memory; summing the
        # instances is only the fallback when the exporter lists nothing else.
        if self.fb_whole:
            fb: float | None = max(self.fb_whole)
        elif self.fb_instances:
            fb = math.fsum(self.fb_instances.values())  # exact: the order cannot matter
        else:
            fb = None
        return GpuSample(
            host=host,
            gpu=gpu,
            uuid=min(self.uuids, default=""),
            model=min(self.models, default=""),
            # The gauge keeps the last XID; any series still showing one wins.
            xid=max(self.xids) if self.xids else None,
            gr_engine_active=max(self.active) if self.active else None,
            fb_used_mib=fb,
            pods=tuple(sorted(self.pods)),
            pod_activity=tuple(sorted(self.pod_active.items())),
        )


def _pod_of(labels: Mapping[str, str]) -> str:
    # A Prometheus that scrapes without honor_labels renames the exporter's
    # pod labels to exported_*, and its own pod/namespace then name the
    # exporter pod: the exported_* pair is the workload whenever present.
    if labels.get("exported_pod"):
        namespace, pod = labels.get("exported_namespace", ""), labels["exported_pod"]
    else:
        # Exporters before 3.2 write pod="" on a GPU no pod uses.
        namespace, pod = labels.get("namespace", ""), labels.get("pod", "")
    return f"{namespace}/{pod}" if namespace and pod else ""


def _place(labels: Mapping[str, str]) -> tuple[str, int] | None:
    host = next((labels[k] for k in _HOST_LABELS if labels.get(k)), "")
    try:
        gpu = int(labels.get("gpu", ""))
    except ValueError:
        return None
    return (host, gpu) if host and gpu >= 0 else None


class _Lines(io.StringIO):
    """The text, counting the lines the parser has taken so far (for error messages)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.number = 0
        self.current = ""

    # typeshed's own StringIO needs the same ignore: its bases disagree on __next__.
    def __next__(self) -> str:  # type: ignore[override]
        self.current = super().__next__()
        self.number += 1
        return self.current


_WANTED = frozenset({XID_ERRORS, GR_ENGINE_ACTIVE, FB_USED})
_SAMPLE_NAME = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[{ \t]")


def _relevant(text: str) -> str:
    """The text with every line the three families do not need blanked out.

    prometheus_client's parser costs about 150 us a series, and an exporter
    sends some 40 families a GPU where three are read: skipping the rest
    before parsing makes a read of a large cluster several times cheaper.
    Blank lines keep the line numbers of error messages true.
    """
    kept = []
    for line in text.split("\n"):
        bare = line.lstrip()
        if bare.startswith("#"):
            words = bare.split(None, 3)
            keep = words[1:2] == ["EOF"] or (len(words) > 2 and words[2] in _WANTED)
            kept.append(line if keep else "")
            continue
        name = _SAMPLE_NAME.match(bare)
        # Anything that is not a sample line stays, so that garbage is still refused.
        kept.append("" if name is not None and name[1] not in _WANTED else line)
    return "\n".join(kept)


def _families(text: str, *, source: str, openmetrics: bool) -> Iterator[Metric]:
    lines = _Lines(_relevant(text))
    read = _read_openmetrics if openmetrics else text_fd_to_metric_families
    kind = "OpenMetrics" if openmetrics else "Prometheus text exposition"
    try:
        yield from read(lines)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        # The parser says little (often nothing) about why; the line says more.
        shown = lines.current.strip()
        excerpt = shown if len(shown) <= 80 else shown[:77] + "..."
        detail = f"not the {kind} format: {excerpt!r}" if excerpt else f"not the {kind} format"
        said = exc.args[0] if exc.args and isinstance(exc.args[0], str) else ""
        reason = said.split(":")[0].strip()
        if reason:
            detail += f" ({reason})"
        raise InputError(
            detail, where=source, field=f"line {lines.number}" if lines.number else ""
        ) from exc


def parse(text: str, *, source: str, openmetrics: bool = False) -> Parsed:
    """The GPUs in one exposition-format text, ordered by (host, gpu).

    ``source`` (the URL or file) names the input in errors; ``openmetrics``
    selects the OpenMetrics parser, for a server that answered with
    ``application/openmetrics-text``.  Only the three families read here are
    parsed; a GPU is known from any of them.
    """
    gpus: dict[tuple[str, int], _Gpu] = {}
    skipped = 0
    for family in _families(text, source=source, openmetrics=openmetrics):
        if family.name not in _WANTED:
            continue
        for series in family.samples:
            place = _place(series.labels)
            if place is None:
                skipped += 1
                continue
            gpus.setdefault(place, _Gpu()).add(family.name, series.labels, float(series.value))
    samples = [gpus[key].sample(*key) for key in sorted(gpus)]
    return Parsed(samples=samples, skipped=skipped)
