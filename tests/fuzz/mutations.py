"""Hypothesis strategies that break one real object at a time.

A mutation picks an object of a real dump, walks to a place in it (a map's key, a
list's index, a label's or annotation's value) and replaces, deletes or inserts
there.  Any place can be chosen, but the places a user controls and the kinds read
are made likely: the annotations and labels the workload kinds read, quantities
(requests, limits, allocatable, a TeamQuota's nominal), counts, and DRA CEL
selectors.  The values are the issue's list: wrong types, negative, zero and huge
numbers, Unicode digits and signs, numbers of thousands of digits, huge exponents,
deep nesting, empty and very long strings, and CEL that does not parse, is not a
bool, is nested deeply or is at the API's size limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

Obj = dict[str, Any]
Step = str | int
Path = tuple[Step, ...]

# Annotations and labels the workload kinds and the quota read (kube/kinds, kube/dra).
ANNOTATIONS = (
    "queue-controller.io/min-member",
    "queue-controller.io/pods-ready-timeout-seconds",
    "queue-controller.io/pod-group-total-count",
    "kueue.x-k8s.io/pod-group-total-count",
    "queue-controller.io/pod-set",
    "queue-controller.io/quota-resource",
    "queue-controller.io/gpu-health",
    "queue-controller.io/gpu-health-reset",
    "queue-controller.io/topology-required",
    "queue-controller.io/topology-preferred",
    "queue-controller.io/topology-unconstrained",
    "queue-controller.io/topology-slice-required",
    "queue-controller.io/topology-slice-size",
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-slice-size",
)
LABELS = (
    "queue-controller.io/queue",
    "kueue.x-k8s.io/queue-name",
    "queue-controller.io/pod-group",
    "kueue.x-k8s.io/pod-group-name",
    "queue-controller.io/workload-kind",
)
# Keys under which a map holds quantities.
QUANTITY_MAPS = frozenset({"requests", "limits", "allocatable", "capacity", "overhead"})
# Keys whose value is a count or a quantity on its own.
NUMBER_KEYS = frozenset(
    {
        "nominal",
        "borrowingLimit",
        "lendingLimit",
        "weight",
        "count",
        "parallelism",
        "completions",
        "minMember",
        "minAvailable",
        "priority",
        "value",
        "backoffLimit",
        "activeDeadlineSeconds",
        "size",
        "allocationMode",
    }
)
CEL_LIMIT = 10 * 1024  # the API server's limit on a selector's expression, in characters

# --- values -----------------------------------------------------------------------


def deep_list(depth: int) -> list[Any]:
    nested: list[Any] = []
    for _ in range(depth):
        nested = [nested]
    return nested


def deep_dict(depth: int) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for _ in range(depth):
        nested = {"a": nested}
    return nested


THOUSANDS = "9" * 5000
NUMBERS: tuple[Any, ...] = (
    0,
    -1,
    1,
    2**31,
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    10**5000,
    -(10**5000),
    0.5,
    -0.0,
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    True,
    False,
)
NUMBER_TEXTS = (
    "0",
    "-1",
    "-0",
    "+1",
    "1.5",
    "08",
    " 1",
    "1 ",
    "1_000",
    "0x10",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551616",
    "1" + "0" * 5000,
    THOUSANDS,
    "-" + THOUSANDS,
    "0." + THOUSANDS,
    # Unicode digits and signs that str.isdigit() or float() accept and int() may not.
    "²",
    "٣",
    "\uff11\uff12",  # fullwidth 12
    "\u22121",  # minus sign, 1
    "+\uff11",
    "\u0663\u0660",
    # Huge exponents, with and without a unit.
    "1e999999999",
    "1e-999999999",
    "1E999999999",
    "1e18",
    "9e18",
    "1e308",
    "1e400",
    # Kubernetes quantities at and past the edges of their grammar.
    "1Ki",
    "1Ei",
    "8Ei",
    "9999999999999999999Ei",
    "1e3m",
    "0.000000001n",
    "1n",
    "100m",
    "-100m",
    "1.5Gi",
    "1.2.3",
    "ten",
    "Infinity",
    "NaN",
    "inf",
    "true",
    "null",
)
STRINGS = ("", " ", "a" * 100_000, "9" * 100_000, "-", "\x00", "é", "🙂", "a/b", "$(x)")

# CEL selectors (DeviceClass spec.selectors, a claim's device requests).
_PADDED = 'device.driver == "' + "a" * (CEL_LIMIT - len('device.driver == ""')) + '"'
CEL = (
    # Does not parse.
    "device.attributes[",
    "))((",
    "@@",
    "device.driver ==",
    "",
    # Not a bool.
    "1",
    "'x'",
    "device",
    "device.driver",
    "[]",
    "{}",
    "null",
    "1.0",
    "device.attributes",
    # A runtime error rather than a value.
    "1 / 0 == 1",
    'device.attributes["nope"].x == 1',
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('1e999999999')) > 0",
    # Nested deeply.
    "(" * 5000 + "true" + ")" * 5000,
    "(" * 300 + "true" + ")" * 300,
    "!" * 5000 + "true",
    "[" * 2000 + "]" * 2000 + " == []",
    "true && " * 1000 + "true",
    # At (and one past) the size limit.
    _PADDED,
    _PADDED + " ",
    "true" + " " * (CEL_LIMIT - 4),
    " || ".join(["device.driver == 'x'"] * (CEL_LIMIT // 24)),
    # Expensive to evaluate (the API server's cost limit refuses these).
    "[" + ",".join(["1"] * 300) + "].all(a, [" + ",".join(["1"] * 300) + "].all(b, true))",
)


def _deep() -> st.SearchStrategy[Any]:
    depth = st.sampled_from([1_000, 1_500, 5_000])
    return st.one_of(depth.map(deep_list), depth.map(deep_dict))


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(NUMBERS),
        st.sampled_from(NUMBER_TEXTS),
        st.sampled_from(STRINGS),
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=12),
    )


def values() -> st.SearchStrategy[Any]:
    """Any value a field could be given: a scalar, a container, or deep nesting."""
    return st.one_of(
        scalars(),
        st.lists(scalars(), max_size=3),
        st.dictionaries(st.text(max_size=6), scalars(), max_size=3),
        _deep(),
    )


def number_like() -> st.SearchStrategy[Any]:
    """What goes where a count or a quantity is read: mostly numbers and their text."""
    return st.one_of(
        st.sampled_from(NUMBER_TEXTS),
        st.sampled_from(NUMBERS),
        st.integers().map(str),
        st.integers(),
        values(),
    )


def annotation_values() -> st.SearchStrategy[Any]:
    # The API server keeps annotation and label values as strings: mostly those.
    return st.one_of(
        st.sampled_from(NUMBER_TEXTS), st.sampled_from(STRINGS), st.text(max_size=12), values()
    )


def cel_values() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(CEL), st.sampled_from(CEL), values())


# --- places -----------------------------------------------------------------------


def walk(obj: Any) -> list[tuple[Path, Any]]:
    """Every place in ``obj`` (not the root) and what is there, without recursion."""
    out: list[tuple[Path, Any]] = []
    stack: list[tuple[Path, Any]] = [((), obj)]
    while stack:
        path, value = stack.pop()
        if path:
            out.append((path, value))
        if isinstance(value, dict):
            stack.extend(((*path, k), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend(((*path, i), v) for i, v in enumerate(value))
    return sorted(out, key=lambda pv: tuple(str(s) for s in pv[0]))


def _is_number_place(path: Path, value: Any) -> bool:
    if isinstance(value, dict | list):
        return False
    last = path[-1]
    parent = path[-2] if len(path) > 1 else None
    return last in NUMBER_KEYS or parent in QUANTITY_MAPS


def _is_cel_place(path: Path) -> bool:
    return path[-1] == "expression"


def _metadata_places(obj: Obj) -> list[Path]:
    """The metadata maps of ``obj`` and of the pod templates in it."""
    return [
        (*path, "metadata")
        for path, value in [((), obj), *walk(obj)]
        if isinstance(value, dict) and isinstance(value.get("metadata"), dict)
    ]


# --- mutations --------------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    """One change to one object: ``op`` at ``path`` (with ``value`` for set and insert)."""

    index: int  # of the object in the dump
    op: str  # "set" (replace or add), "delete", "insert" (into a list)
    path: Path
    value: Any = None

    def __repr__(self) -> str:  # the values can be 100 KB: show their shape
        shown = _shape(self.value)
        return f"Mutation(object {self.index}, {self.op} {'.'.join(map(str, self.path))} {shown})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints a failing example with this; its own printer recurses.
        printer.text(repr(self))

    def apply(self, objs: list[Obj]) -> None:
        target: Any = objs[self.index]
        for step in self.path[:-1]:
            if isinstance(target, dict):
                target = target.setdefault(step, {}) if isinstance(step, str) else None
            elif isinstance(target, list) and isinstance(step, int) and step < len(target):
                target = target[step]
            else:
                return  # an earlier mutation changed the way here: nothing to do
            if not isinstance(target, dict | list):
                return
        last = self.path[-1]
        if isinstance(target, dict) and isinstance(last, str):
            if self.op == "delete":
                target.pop(last, None)
            else:
                target[last] = self.value
        elif isinstance(target, list) and isinstance(last, int):
            if self.op == "insert":
                target.insert(min(last, len(target)), self.value)
            elif last < len(target):
                if self.op == "delete":
                    del target[last]
                else:
                    target[last] = self.value


def _shape(value: Any) -> str:
    if isinstance(value, str) and len(value) > 60:
        return f"<str of {len(value)} chars: {value[:20]!r}...>"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**60:
        return f"<int of {len(bin(value)) * 3 // 10} digits>"
    if isinstance(value, list | dict):
        depth, inner = 0, value
        while isinstance(inner, list | dict) and len(inner) == 1:
            inner = inner[0] if isinstance(inner, list) else next(iter(inner.values()))
            depth += 1
        if depth > 20:
            return f"<{type(value).__name__} nested {depth} deep>"
    try:
        shown = repr(value)
    except (ValueError, RecursionError):  # an int past 4,300 digits inside, say
        return f"<{type(value).__name__} that repr() cannot show>"
    return shown if len(shown) <= 200 else f"{shown[:200]}...>"


Draw = Callable[[st.SearchStrategy[Any]], Any]


def _mutation(draw: Draw, objs: tuple[Obj, ...]) -> Mutation:
    index = draw(st.integers(0, len(objs) - 1))
    obj = objs[index]
    places = walk(obj)
    numbers = [(p, v) for p, v in places if _is_number_place(p, v)]
    cels = [p for p, _ in places if _is_cel_place(p)]
    # Which kind of place, weighted towards what users write and kinds read.
    kinds = ["annotation", "label", "any", "any"]
    kinds += ["number", "number"] if numbers else []
    kinds += ["cel", "cel", "cel"] if cels else []
    kind = draw(st.sampled_from(kinds))
    if kind in ("annotation", "label"):
        meta = draw(st.sampled_from(_metadata_places(obj) or [("metadata",)]))
        keys = ANNOTATIONS if kind == "annotation" else LABELS
        key = draw(st.one_of(st.sampled_from(keys), st.sampled_from(keys), st.text(max_size=8)))
        field = "annotations" if kind == "annotation" else "labels"
        if draw(st.integers(0, 9)) == 0:  # the whole map, now and then
            return Mutation(
                index, draw(st.sampled_from(["set", "delete"])), (*meta, field), draw(values())
            )
        op = draw(st.sampled_from(["set", "set", "set", "delete"]))
        return Mutation(index, op, (*meta, field, key), draw(annotation_values()))
    if kind == "number":
        path = draw(st.sampled_from([p for p, _ in numbers]))
        op = draw(st.sampled_from(["set", "set", "set", "delete"]))
        return Mutation(index, op, path, draw(number_like()))
    if kind == "cel":
        return Mutation(index, "set", draw(st.sampled_from(cels)), draw(cel_values()))
    path, here = draw(st.sampled_from(places)) if places else (("metadata",), None)
    op = draw(st.sampled_from(["set", "set", "delete", "insert", "add"]))
    if op == "add":  # a new key in a map, or a new item in a list
        if isinstance(here, dict):
            return Mutation(index, "set", (*path, draw(st.text(max_size=8))), draw(values()))
        if isinstance(here, list):
            at = draw(st.integers(0, len(here)))
            return Mutation(index, "insert", (*path, at), draw(values()))
        op = "set"
    if op == "insert" and not isinstance(path[-1], int):
        op = "set"
    return Mutation(index, op, path, draw(values()))


@st.composite
def mutated_dumps(draw: Draw, seeds: dict[str, tuple[Obj, ...]]) -> tuple[str, list[Mutation]]:
    """(the name of a real dump, one to three mutations of its objects)."""
    name = draw(st.sampled_from(sorted(seeds)))
    objs = seeds[name]
    count = draw(st.integers(1, 3))
    return name, [_mutation(draw, objs) for _ in range(count)]


@st.composite
def cel_mutations(draw: Draw, seeds: dict[str, tuple[Obj, ...]]) -> tuple[str, list[Mutation]]:
    """One bad CEL selector in a dump with DRA objects."""
    with_cel = sorted(name for name, objs in seeds.items() if any(_cel_paths(o) for o in objs))
    name = draw(st.sampled_from(with_cel))
    objs = seeds[name]
    index = draw(st.sampled_from([i for i, o in enumerate(objs) if _cel_paths(o)]))
    path = draw(st.sampled_from(_cel_paths(objs[index])))
    return name, [Mutation(index, "set", path, draw(cel_values()))]


def _cel_paths(obj: Obj) -> list[Path]:
    return [p for p, _ in walk(obj) if _is_cel_place(p)]
