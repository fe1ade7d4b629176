"""Read a cluster dump: multi-document YAML, JSON, or a ``kind: List``.

That is what ``kubectl get nodes,pods,jobs,... -A -o yaml`` prints.  Every
object keeps where it came from ("dump.yaml document 4, List item 17") so an
error can point at it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from queue_controller.core.model import Snapshot
from queue_controller.errors import DumpError, InputError
from queue_controller.kube.fields import describe
from queue_controller.kube.snapshot import Located, build_snapshot, is_supported

# libyaml's loader is ~10x faster on big dumps; fall back where it is missing.
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

BUNDLED_EXAMPLE = "demo-cluster.yaml"


def bundled_example() -> tuple[str, str]:
    """The example cluster shipped in the package: (name to show, text)."""
    text = resources.files("queue_controller.data").joinpath(BUNDLED_EXAMPLE).read_text()
    return f"<bundled example {BUNDLED_EXAMPLE}>", text


def read_file(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DumpError("no such file", where=path) from None
    except IsADirectoryError:
        raise DumpError("is a directory, not a dump file", where=path) from None
    except UnicodeDecodeError:
        raise DumpError("is not UTF-8 text", where=path) from None
    except OSError as error:
        raise DumpError(error.strerror or str(error), where=path) from None


def decode(source: str, data: bytes) -> str:
    """Dump bytes (standard input, say) as text, refused like a file when not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DumpError("is not UTF-8 text", where=source) from None


def _documents(source: str, text: str) -> Iterator[tuple[int, Any]]:
    try:
        yield from enumerate(yaml.load_all(text, Loader=_Loader), start=1)
    except yaml.reader.ReaderError as error:
        # A character YAML forbids (a control character, say) comes with an offset
        # (in bytes from libyaml, in characters from the pure-Python reader), not a
        # mark.  The reader stops at the first one, so its first occurrence is the spot.
        character = error.character
        code = ord(character) if isinstance(character, str) else character
        index = text.find(chr(code))
        if index < 0:
            index = min(error.position, len(text))
        line = text.count("\n", 0, index) + 1
        column = index - text.rfind("\n", 0, index)
        raise DumpError(
            f"not valid YAML: character #x{code:04x}: {error.reason}",
            where=f"{source} line {line}, column {column}",
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source} line {mark.line + 1}, column {mark.column + 1}" if mark else source
        problem = getattr(error, "problem", None) or str(error)
        # One line, always: the CLI prints exactly one line per error.
        problem = " ".join(problem.split())
        raise DumpError(f"not valid YAML: {problem}", where=where) from None


def _flatten(where: str, document: Any) -> Iterator[Located]:
    if not isinstance(document, Mapping):
        raise DumpError(f"expected a Kubernetes object, got {type(document).__name__}", where=where)
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        raise DumpError("has no kind", where=where, field="kind")
    if kind == "List" or (kind.endswith("List") and "items" in document):
        items = document.get("items") or []
        if not isinstance(items, list):
            raise DumpError("expected a list", where=where, field="items")
        for i, item in enumerate(items):
            yield from _flatten(f"{where} items[{i}]", item)
        return
    if not isinstance(document.get("apiVersion"), str):
        raise DumpError("has no apiVersion", where=f"{where} ({kind})", field="apiVersion")
    yield Located(f"{where} ({describe(document)})", document)


def read_objects(source: str, text: str) -> list[Located]:
    located: list[Located] = []
    for index, document in _documents(source, text):
        if document is None:  # an empty document between two `---`
            continue
        located.extend(_flatten(f"{source} document {index}", document))
    return located


def load_snapshot(
    sources: list[tuple[str, str]], *, now: float, ignore_unknown: bool = False
) -> tuple[Snapshot, int]:
    """Parse every source into one snapshot; returns it and how many objects were skipped."""
    located: list[Located] = []
    for source, text in sources:
        located.extend(read_objects(source, text))
    kept = []
    for item in located:
        if is_supported(item.obj):
            kept.append(item)
        elif not ignore_unknown:
            raise DumpError(
                f"unsupported kind {item.obj.get('apiVersion')}/{item.obj.get('kind')}; plan "
                "reads Nodes, Pods, Jobs, PriorityClasses, Queues, TeamQuotas, Cohorts, "
                "Topologies, PodGroups, DeviceClasses, ResourceSlices, ResourceClaims and "
                "ResourceClaimTemplates (pass --ignore-unknown to skip the rest)",
                where=item.where,
            )
    try:
        snapshot = build_snapshot(kept, now=now)
    except DumpError:
        raise
    except InputError as error:
        raise DumpError(error.detail, where=error.where, field=error.field) from None
    return snapshot, len(located) - len(kept)
