"""What a pod set asks of its Queue's Topology: the annotations on its pod template.

Ours are ``queue-controller.io/topology-*``; Kueue's TAS annotations
(``kueue.x-k8s.io/podset-*-topology``, ``podset-slice-size``) mean the same and
are accepted so that workloads move over unchanged.  Both may be written only
where they agree: silently preferring one would place a gang by a rule its
author did not read.

Only the annotations' shape is checked here.  Whether a level is one of the
Queue's Topology is the core's to say, as only the cycle knows the Queue.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from queue_controller.core.model import TopologyMode, TopologyRequest

__all__ = [
    "GROUP",
    "PREFERRED",
    "REQUIRED",
    "SLICES",
    "SLICE_REQUIRED",
    "SLICE_SIZE",
    "UNCONSTRAINED",
    "Annotation",
    "topology_request",
]


@dataclass(frozen=True, slots=True)
class Annotation:
    """One request annotation: ours and Kueue's spelling of it."""

    ours: str
    kueue: str


REQUIRED = Annotation(
    "queue-controller.io/topology-required", "kueue.x-k8s.io/podset-required-topology"
)
PREFERRED = Annotation(
    "queue-controller.io/topology-preferred", "kueue.x-k8s.io/podset-preferred-topology"
)
UNCONSTRAINED = Annotation(
    "queue-controller.io/topology-unconstrained", "kueue.x-k8s.io/podset-unconstrained-topology"
)
SLICE_REQUIRED = Annotation(
    "queue-controller.io/topology-slice-required",
    "kueue.x-k8s.io/podset-slice-required-topology",
)
SLICE_SIZE = Annotation(
    "queue-controller.io/topology-slice-size", "kueue.x-k8s.io/podset-slice-size"
)
GROUP = Annotation("queue-controller.io/topology-group", "kueue.x-k8s.io/podset-group-name")


class _Refused(Exception):
    """A request written wrong; its message names the annotation."""


def _quoted(value: str) -> str:
    return json.dumps(value)


def _read(annotations: Mapping[str, str], which: Annotation, prefix: str) -> tuple[str, str] | None:
    """The annotation's value and the field it was read from; None when neither is written."""
    ours, kueue = annotations.get(which.ours), annotations.get(which.kueue)
    if ours is not None and kueue is not None and ours != kueue:
        raise _Refused(
            f"{prefix}[{which.ours}] and {prefix}[{which.kueue}] disagree "
            f"({_quoted(ours)} and {_quoted(kueue)}): they mean the same, write one"
        )
    if ours is not None:
        return ours, f"{prefix}[{which.ours}]"
    if kueue is not None:
        return kueue, f"{prefix}[{which.kueue}]"
    return None


def _level(read: tuple[str, str]) -> str:
    value, field = read
    if not value.strip():
        raise _Refused(f"{field}: empty; name a level of the Queue's Topology (a node label)")
    return value


def _unconstrained(read: tuple[str, str] | None) -> tuple[str, str] | None:
    if read is None:
        return None
    value, field = read
    if value not in ("true", "false"):
        raise _Refused(f'{field}: {_quoted(value)} is neither "true" nor "false"')
    return read if value == "true" else None


# Layered slices (Kueue's TASMultiLayerTopology): a JSON list of {"topology", "size"},
# outermost first, in Kueue's shape under both spellings.
SLICES = Annotation(
    "queue-controller.io/topology-slices",
    "kueue.x-k8s.io/podset-slice-required-topology-constraints",
)
MAX_LAYERS = 3  # as Kueue


def _layer(entry: object, field: str, index: int) -> tuple[str, int]:
    at = f"{field}[{index}]"
    if not isinstance(entry, dict):
        raise _Refused(f'{at}: a layer is an object {{"topology": <level>, "size": <n>}}')
    # Unknown keys are refused rather than ignored (Kueue's decoder ignores them): a key
    # spelled wrong, or one from a later Kueue (its proposed "sizes"), would otherwise
    # place the gang by a rule its author did not write.
    unknown = sorted(set(entry) - {"topology", "size"})
    if unknown:
        raise _Refused(f"{at}: unknown key(s) {', '.join(map(_quoted, unknown))}")
    level, size = entry.get("topology"), entry.get("size")
    if not isinstance(level, str) or not level.strip():
        raise _Refused(f"{at}.topology: name a level of the Queue's Topology (a node label)")
    # A JSON number, as Kueue's int32 field decodes it ("4", a string, is refused there too).
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise _Refused(f"{at}.size: {json.dumps(size)} is not a positive whole number")
    return level, size


def _layers(read: tuple[str, str]) -> tuple[tuple[str, int], ...]:
    """Kueue's rules for the layers (ValidateTASPodSetRequest): 1 to 3 layers, unique
    levels, sizes of at least 1, each dividing the size of the layer above."""
    raw, field = read
    try:
        parsed = json.loads(raw)
    except ValueError as error:
        raise _Refused(f"{field}: not a JSON list of layers ({error})") from None
    if not isinstance(parsed, list) or not 1 <= len(parsed) <= MAX_LAYERS:
        raise _Refused(
            f"{field}: a JSON list of 1 to {MAX_LAYERS} layers, outermost first "
            '([{"topology": <level>, "size": <n>}, ...])'
        )
    layers = tuple(_layer(entry, field, i) for i, entry in enumerate(parsed))
    seen: dict[str, int] = {}
    for i, (level, size) in enumerate(layers):
        if level in seen:
            raise _Refused(f"{field}[{i}].topology: {_quoted(level)} is also layer {seen[level]}")
        seen[level] = i
        if i and layers[i - 1][1] % size:
            raise _Refused(
                f"{field}[{i}].size: {size} does not divide the size of the layer above "
                f"({layers[i - 1][1]})"
            )
    return layers


def _read_layers(
    annotations: Mapping[str, str], prefix: str
) -> tuple[tuple[tuple[str, int], ...], str] | None:
    """The layers and the field they were read from; both spellings only where they agree
    (compared as layers, so that spacing in the JSON does not matter)."""
    ours, kueue = annotations.get(SLICES.ours), annotations.get(SLICES.kueue)
    found = [
        (_layers((value, f"{prefix}[{name}]")), f"{prefix}[{name}]")
        for value, name in ((ours, SLICES.ours), (kueue, SLICES.kueue))
        if value is not None
    ]
    if len(found) == 2 and found[0][0] != found[1][0]:
        raise _Refused(
            f"{found[0][1]} and {found[1][1]} disagree ({_quoted(ours or '')} and "
            f"{_quoted(kueue or '')}): they mean the same, write one"
        )
    return found[0] if found else None


def _request(annotations: Mapping[str, str], prefix: str, no_index: str) -> TopologyRequest | None:
    required = _read(annotations, REQUIRED, prefix)
    preferred = _read(annotations, PREFERRED, prefix)
    unconstrained = _unconstrained(_read(annotations, UNCONSTRAINED, prefix))
    slice_level = _read(annotations, SLICE_REQUIRED, prefix)
    slice_size = _read(annotations, SLICE_SIZE, prefix)
    layered = _read_layers(annotations, prefix)
    inner: list[tuple[str, int]] = []
    if layered is not None:
        single = slice_level or slice_size
        if single is not None:
            # As Kueue: one slice layer is written one way or the other, never both.
            raise _Refused(f"{layered[1]}: may not be set together with {single[1]}")
        if no_index:
            raise _Refused(f"{layered[1]}: {no_index}")
        (outer_level, outer_size), *inner = layered[0]
        slice_level, slice_size = (outer_level, layered[1]), (str(outer_size), layered[1])
    modes = [m for m in (required, preferred, unconstrained) if m is not None]
    if len(modes) > 1:
        raise _Refused(
            f"{' and '.join(field for _, field in modes)}: a pod set asks for one of "
            "required, preferred or unconstrained"
        )
    if (slice_level is None) != (slice_size is None):
        given, missing = (
            (slice_level, SLICE_SIZE) if slice_size is None else (slice_size, SLICE_REQUIRED)
        )
        assert given is not None
        raise _Refused(f"{given[1]}: needs {prefix}[{missing.ours}] too (slices need both)")
    size = 0
    if slice_size is not None and slice_level is not None:
        raw, field = slice_size
        if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
            raise _Refused(f"{field}: {_quoted(raw)} is not a positive whole number")
        if no_index:
            raise _Refused(f"{slice_level[1]}: {no_index}")
        size = int(raw)
    group = _read(annotations, GROUP, prefix)
    if group is not None:
        sliced = (None, layered[1]) if layered is not None else slice_level or slice_size
        _check_group(group, required or preferred, sliced)
    if not modes and not size:
        return None
    if required is not None:
        mode, level, field = TopologyMode.REQUIRED, _level(required), required[1]
    elif preferred is not None:
        mode, level, field = TopologyMode.PREFERRED, _level(preferred), preferred[1]
    else:
        # Unconstrained, or slices alone (as in Kueue: only the slices bind the pod set).
        where = unconstrained or slice_level
        assert where is not None
        mode, level, field = TopologyMode.UNCONSTRAINED, "", where[1]
    return TopologyRequest(
        mode=mode,
        level=level,
        slice_size=size,
        slice_level=_level(slice_level) if slice_level is not None and size else "",
        field=field,
        group=group[0] if group is not None else "",
        group_field=group[1] if group is not None else "",
        inner_slices=tuple(inner),
        slices_field=layered[1] if layered is not None else "",
    )


def _check_group(
    group: tuple[str, str],
    level: tuple[str, str] | None,
    sliced: tuple[str | None, str] | None,
) -> None:
    """Kueue's rules for one pod set's group annotation (the rules across the pod sets
    of a group, which need them all, are the core's: rules/topology.py)."""
    value, field = group
    if not value.strip():
        raise _Refused(f"{field}: empty; name the group the pod set is placed with")
    if value.isascii() and value.isdigit():
        # Kueue refuses a number: a group is a name, not an index.
        raise _Refused(f"{field}: {_quoted(value)} must not be a number")
    if level is None:
        raise _Refused(
            f"{field}: a group is placed in one domain of a level; it needs "
            f"{REQUIRED.ours} or {PREFERRED.ours} (or Kueue's) on the same pod template"
        )
    if sliced is not None:
        # As Kueue without its TASGroupedPodSetSlicing gate: slices of grouped pod sets
        # would need one index across two templates, which no kind gives.
        raise _Refused(f"{field}: may not be set together with {sliced[1]}")


def topology_request(
    annotations: Mapping[str, str], *, prefix: str, no_index: str = ""
) -> tuple[TopologyRequest | None, str]:
    """The pod set's request (None when it asks nothing), or the error naming the field.

    ``prefix`` is where the annotations are written in the object (such as
    ``spec.template.metadata.annotations``).  ``no_index`` says why its members
    have no index to slice them by ("" when they have one): slices are refused then.
    """
    try:
        return _request(annotations, prefix, no_index), ""
    except _Refused as refused:
        return None, str(refused)
