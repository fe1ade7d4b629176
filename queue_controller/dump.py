"""Read a cluster dump: multi-document YAML, JSON, or a ``kind: List``.

That is what ``kubectl get nodes,pods,jobs,... -A -o yaml`` prints.  Every
object keeps where it came from ("dump.yaml document 4, List item 17") so an
error can point at it.

Two kinds of problem, kept apart:

* the dump as a whole cannot be read (not YAML, a key twice in one mapping, a
  document that is no object, an object without a kind): :class:`DumpError`, one
  line, nothing decided;
* one object cannot be read (a bad field, no name, the same object twice): it is
  left out and named (:class:`LeftOut`), and everything else is read as if it were
  not there, as the controller does with the objects of a live cluster.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from queue_controller.core.model import Snapshot
from queue_controller.errors import DumpError, InputError, plain, shown
from queue_controller.kube.fields import describe, get
from queue_controller.kube.snapshot import Located, Translation, is_supported, translate

# libyaml's parser is ~10x faster on big dumps; fall back where it is missing.
_Base: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"


class StrictLoader(_Base):  # type: ignore[misc, valid-type]
    """The safe loader, refusing a key given twice in one mapping, at any depth.

    YAML 1.1 loaders keep the last of two equal keys without a word, so a dump edited
    by hand (two ``nvidia.com/gpu:`` lines under one ``allocatable``) would be read as
    something its author did not see.  Keys brought in by a merge (``<<: *base``) may
    be overridden, as YAML means them to be; only keys written twice are refused.
    Only the constructor is ours: libyaml still parses.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            first: dict[Hashable, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=False)
                if not isinstance(key, Hashable):
                    continue  # the base constructor says why, with its own mark
                earlier = first.setdefault(key, key_node)
                if earlier is not key_node:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"duplicate key {key!r} (first at line {earlier.start_mark.line + 1})",
                        key_node.start_mark,
                    )
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int | str:
        # An integer too long for int() (Python's 4,300-digit limit) would fail the
        # whole dump from inside the parser.  Kept as its digits, it reaches the reader
        # of its field, which bounds every number to int64 anyway: that one object is
        # refused, naming the field, and the rest of the dump is read.
        try:
            value: int = super().construct_yaml_int(node)
        except ValueError:
            return str(self.construct_scalar(node))
        return value


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


_Loader = StrictLoader

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


@dataclass(frozen=True, slots=True)
class LeftOut:
    """An object left out of a dump, and why: its place, the field, what is wrong."""

    object: str
    field: str
    detail: str

    @classmethod
    def of(cls, error: InputError) -> LeftOut:
        return cls(error.where, error.field, error.detail)

    def __str__(self) -> str:
        return ": ".join(p for p in (self.object, self.field, self.detail) if p)

    def as_dict(self) -> dict[str, str]:
        return {"object": self.object, "field": self.field, "detail": self.detail}


def distinct(items: Iterable[Located]) -> tuple[list[Located], list[LeftOut]]:
    """The objects that each have a name and appear once; the rest, named.

    A dump is read by hand or from two ``kubectl get`` runs concatenated: the same
    object twice is a mistake in one object, not in the dump, so the first is kept
    (``kubectl`` and the API server know one object by kind, namespace and name) and
    the second is left out, naming the first.
    """
    seen: dict[tuple[str, str, str], str] = {}
    kept: list[Located] = []
    left: list[LeftOut] = []
    for item in items:
        try:
            name = get(item.obj, "metadata.name", str, "")
            namespace = get(item.obj, "metadata.namespace", str, "")
        except InputError as error:
            left.append(LeftOut.of(error.located(where=item.where)))
            continue
        if not name:
            left.append(LeftOut(item.where, "metadata.name", "every object needs a name"))
            continue
        key = (str(item.obj.get("kind")), namespace, name)
        if key in seen:
            left.append(LeftOut(item.where, "", f"the same {key[0]} also appears at {seen[key]}"))
            continue
        seen[key] = item.where
        kept.append(item)
    return kept, left


def translate_all(items: Iterable[Located], *, now: float) -> tuple[Translation, list[LeftOut]]:
    """Every object translated; each one that cannot be read is left out and named."""
    kept, left = distinct(items)

    def skip(error: InputError) -> None:
        left.append(LeftOut.of(error))

    return translate(kept, now=now, skip=skip), left


def read_objects(source: str, text: str) -> list[Located]:
    located: list[Located] = []
    for index, document in _documents(source, text):
        if document is None:  # an empty document between two `---`
            continue
        located.extend(_flatten(f"{source} document {index}", document))
    return located


# What a kind can be named: Kubernetes' kinds are CamelCase identifiers.
_KIND = re.compile(r"[A-Za-z][A-Za-z0-9]{0,62}")


@dataclass(frozen=True, slots=True)
class Loaded:
    snapshot: Snapshot
    skipped: int  # objects of kinds that plan does not read (--ignore-unknown)
    left_out: tuple[LeftOut, ...]  # objects that could not be read


def load_dump(
    sources: list[tuple[str, str]], *, now: float, ignore_unknown: bool = False
) -> Loaded:
    """Parse every source into one snapshot, leaving out (and naming) what cannot be read."""
    located: list[Located] = []
    for source, text in sources:
        located.extend(read_objects(source, text))
    kept = []
    malformed: list[LeftOut] = []
    for item in located:
        kind = item.obj.get("kind")
        if is_supported(item.obj):
            kept.append(item)
        elif not (isinstance(kind, str) and _KIND.fullmatch(kind)):
            # Not another kind, but no kind at all: a bad object, named and left out.
            why = f"{shown(kind)} is not a kind (a name such as Job: a letter, then letters "
            malformed.append(LeftOut(item.where, "kind", why + "and digits, at most 63)"))
        elif not ignore_unknown:
            raise DumpError(
                f"unsupported kind {plain(item.obj.get('apiVersion'))}/{kind}; plan "
                "reads Nodes, Pods, Jobs, PriorityClasses, Queues, TeamQuotas, Cohorts, "
                "Topologies, PodGroups, DeviceClasses, ResourceSlices, ResourceClaims and "
                "ResourceClaimTemplates (pass --ignore-unknown to skip the rest)",
                where=item.where,
            )
    translation, left = translate_all(kept, now=now)
    skipped = len(located) - len(kept) - len(malformed)
    return Loaded(translation.snapshot, skipped, (*malformed, *left))


def load_snapshot(
    sources: list[tuple[str, str]], *, now: float, ignore_unknown: bool = False
) -> tuple[Snapshot, int]:
    """Every source into one snapshot, refusing the first object that cannot be read
    (for the examples and other files that must be whole); returns it and how many
    objects of other kinds were skipped."""
    loaded = load_dump(sources, now=now, ignore_unknown=ignore_unknown)
    if loaded.left_out:
        first = loaded.left_out[0]
        raise DumpError(first.detail, where=first.object, field=first.field)
    return loaded.snapshot, loaded.skipped
