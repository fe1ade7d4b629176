"""DRA's CEL selectors, evaluated by a real CEL interpreter (cel-python), compiled once, cached.

A selector sees one device as Kubernetes shows it: ``device.driver``,
``device.allowMultipleAllocations``, ``device.attributes[<domain>].<name>`` and
``device.capacity[<domain>].<name>`` (a quantity), with the Kubernetes
``quantity`` and ``semver`` libraries (:mod:`queue_controller.core.model.kubecel`).
As in Kubernetes, an unknown domain reads as an empty map, so reading a missing
attribute is a runtime error and ``has()`` or ``in`` test for one.

Outcomes:

* a selector that does not parse, or reads a name other than ``device``, is
  an :class:`InvalidSpecError` naming it;
* a result that is not a bool is one too (Kubernetes rejects such a selector
  when the object is written; an interpreter without type checking sees it at
  once only for a lone literal, list or map, and otherwise when it runs), and
  so is an integer literal out of range, and a run past the cost budget
  (:mod:`.celbudget`);
* any other runtime error (a missing attribute, a bad ``semver("x")``, a
  wrong operand) means the device does not match here, and the error is
  kept: the kube-scheduler instead fails the whole allocation attempt when
  it meets such a device, so callers that must be as strict can look at
  :attr:`Selection.errors`.

Why a cache: a selector can only read the driver, the attributes and the
capacity, so devices alike in those give the same verdict.  A cluster of 1,000
nodes of 8 identical GPUs has one such class, and the interpreter runs once for
it instead of 8,000 times.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from queue_controller.core.devices.celbudget import BudgetedRunner, OverBudget
from queue_controller.core.devices.celstatic import (
    MAX_SELECTOR_CHARS,
    MAX_SELECTOR_NESTING,
    reads,
    static_problem,
    too_deep,
    undeclared,
)
from queue_controller.core.model.dra import AttrValue, Device, DeviceClass, DeviceRequest, Version
from queue_controller.core.model.kubecel import FUNCTIONS, Quantity, Semver
from queue_controller.errors import InvalidSpecError, shown

# Above this many cached verdicts the cache starts again, so devices that come
# and go for ever cannot grow it without bound; far more than any cluster's
# distinct kinds of device times its selectors.
_MAX_VERDICTS = 65_536
# Compiled selectors kept at once: far more than a cluster's distinct selectors;
# at most 10 Ki characters each, so the entries and their bytes are both bounded.
_MAX_SELECTORS = 1024
# A runtime error's text can embed the whole activation; a verdict keeps its start.
_MAX_ERROR_CHARS = 200


class _DomainMap(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: an unknown domain reads as an empty map."""

    def __missing__(self, key: object) -> celtypes.MapType:
        return celtypes.MapType()


def _cel_attribute(value: AttrValue) -> object:
    # bool before int: bool is an int subclass.
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, Version):
        return Semver.parse(value.text)
    return celtypes.StringType(value)


def _activation(device: Device) -> dict[str, Any]:
    """The ``device`` variable, built from what the equivalence key holds and nothing else."""
    attributes = _DomainMap(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(n): _cel_attribute(v) for n, v in inner.items()}
            )
            for domain, inner in device.attributes.items()
        }
    )
    capacity = _DomainMap(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(n): Quantity(milli) for n, milli in inner.items()}
            )
            for domain, inner in device.capacity.items()
        }
    )
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    device.allow_multiple_allocations
                ),
                celtypes.StringType("attributes"): attributes,
                celtypes.StringType("capacity"): capacity,
            }
        )
    }


def _type_name(value: object) -> str:
    names = {
        celtypes.StringType: "string",
        celtypes.IntType: "int",
        celtypes.UintType: "uint",
        celtypes.DoubleType: "double",
        celtypes.MapType: "map",
        celtypes.ListType: "list",
        Quantity: "quantity",
        Semver: "semver",
    }
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _eval_message(error: CELEvalError) -> str:
    """What went wrong, in one line.

    cel-python's errors are (message, exception type, exception args); for an
    exception raised by a library function (``semver("x")``) its own message
    is generic ("return error for overflow"), so the function's is used.
    """
    args = error.args
    message = str(args[0]) if args else type(error).__name__
    if len(args) >= 3 and args[1] in (ValueError, TypeError) and args[2]:
        return str(args[2][0])
    return message


@dataclass(frozen=True)
class Verdict:
    """A selector's outcome for one kind of device: a match, or why not (``error``: it failed)."""

    matches: bool
    error: str = ""
    # The selector itself is at fault (its result is not a bool, or it costs
    # too much): the cache raises InvalidSpecError with ``error`` each time.
    refused: bool = False


@dataclass(frozen=True)
class Selector:
    """A compiled selector: parsed once, run against many devices.

    ``reads`` holds every name the expression can look up in ``device.attributes``
    or ``device.capacity`` (a superset: every identifier and string literal in
    it), or None when it reaches names it does not spell out (an index computed
    at run time, a macro over a map's keys, ``size()``, string arithmetic).
    Devices alike in the names it reads get the same verdict from it.
    """

    expression: str
    _runner: celpy.Runner
    reads: frozenset[str] | None = None

    def evaluate(self, device: Device) -> Verdict:
        """Run it against one device, uncached."""
        try:
            result = self._runner.evaluate(_activation(device))
        except CELEvalError as error:
            return Verdict(False, _eval_message(error)[:_MAX_ERROR_CHARS])
        except OverBudget as error:
            raise InvalidSpecError(
                f"selector {shown(self.expression)} costs too much to run: {error} "
                "(Kubernetes limits a selector's cost too)"
            ) from None
        if not isinstance(result, celtypes.BoolType):
            raise InvalidSpecError(
                f"selector {self.expression!r} must evaluate to bool, "
                f"not {_type_name(result)} ({str(result)[:_MAX_ERROR_CHARS]!r})"
            )
        return Verdict(bool(result))


_environment: celpy.Environment | None = None


def compile_selector(expression: str) -> Selector:
    """Parse a selector; :class:`InvalidSpecError` naming it and the place if it does not parse."""
    quoted = shown(expression)
    if len(expression) > MAX_SELECTOR_CHARS:
        raise InvalidSpecError(
            f"selector {quoted} is {len(expression)} characters, over the API's "
            f"limit of {MAX_SELECTOR_CHARS}"
        )
    if too_deep(expression):
        raise InvalidSpecError(f"selector {quoted} nests deeper than {MAX_SELECTOR_NESTING} levels")
    try:
        return _compile(expression)
    except RecursionError:
        raise InvalidSpecError(f"selector {quoted} nests too deeply to compile") from None


def _compile(expression: str) -> Selector:
    global _environment
    if _environment is None:
        # Building the parser takes a while; one serves every expression.  cel-python
        # raises the process's recursion limit to 2500 as it does; put it back, as
        # the nesting bound above keeps every selector far from the default.
        limit = sys.getrecursionlimit()
        try:
            _environment = celpy.Environment(runner_class=BudgetedRunner)
        finally:
            sys.setrecursionlimit(limit)
    try:
        tree = _environment.compile(expression)
    except CELParseError as error:
        cause = error.__cause__
        why = type(cause).__name__ if cause is not None else "syntax error"
        where = f"column {error.column}" if error.column is not None else "somewhere"
        raise InvalidSpecError(
            f"selector {expression!r} does not parse ({why} at {where}):\n{error.args[0]}"
        ) from None
    problem = static_problem(tree)
    if problem:
        raise InvalidSpecError(f"selector {shown(expression)}: {problem}")
    unknown = undeclared(tree)
    if unknown:
        raise InvalidSpecError(
            f"selector {expression!r} reads {', '.join(map(repr, unknown))}, which "
            "is not declared (a selector has one variable, device)"
        )
    return Selector(expression, _environment.program(tree, functions=FUNCTIONS), reads(tree))


class SelectorCache:
    """Compiled selectors by expression, and verdicts by (expression, device equivalence key).

    ``compilations`` and ``evaluations`` count the work actually done, so tests
    and benchmarks can see what the cache saved.
    """

    def __init__(self) -> None:
        self._selectors: dict[str, Selector] = {}
        self._verdicts: dict[tuple[str, tuple[object, ...]], Verdict] = {}
        self.compilations = 0
        self.evaluations = 0

    def selector(self, expression: str) -> Selector:
        """The compiled selector; a selector that fails to compile is not kept and fails again."""
        selector = self._selectors.get(expression)
        if selector is None:
            selector = compile_selector(expression)
            self.compilations += 1
            if len(self._selectors) >= _MAX_SELECTORS:
                self._selectors.clear()  # selectors that come and go cannot grow it for ever
            self._selectors[expression] = selector
        return selector

    def verdict(
        self, expression: str, device: Device, *, kind: tuple[object, ...] | None = None
    ) -> Verdict:
        """The selector's verdict for this device, run at most once per kind of device.

        ``kind`` is the device's key as projected on names that include every name
        the selector reads (:meth:`Device.projected`); by default, its whole key.
        """
        key = (expression, device.equivalence_key if kind is None else kind)
        verdict = self._verdicts.get(key)
        if verdict is None:
            selector = self.selector(expression)
            self.evaluations += 1
            try:
                verdict = selector.evaluate(device)
            except InvalidSpecError as error:
                # Not a bool, or past the cost budget: kept too, so that a selector
                # that ran for the whole budget is not run again every cycle.
                verdict = Verdict(False, error.detail, refused=True)
            if len(self._verdicts) >= _MAX_VERDICTS:
                self._verdicts.clear()
            self._verdicts[key] = verdict
        if verdict.refused:
            raise InvalidSpecError(verdict.error)
        return verdict


# The default cache: pure memoisation (verdicts depend only on their key), like
# the lru_caches of quantity.py.
DEFAULT_CACHE = SelectorCache()


@dataclass(frozen=True)
class DeviceError:
    """A device a selector failed on: which selector and why."""

    device: Device
    expression: str
    error: str


@dataclass(frozen=True)
class Selection:
    """The devices every selector accepts; the ones a selector failed on (not in ``devices``)."""

    devices: tuple[Device, ...]
    errors: tuple[DeviceError, ...]


def select(
    devices: Iterable[Device],
    device_class: DeviceClass,
    request: DeviceRequest,
    cache: SelectorCache | None = None,
) -> Selection:
    """The devices that pass the class's selectors and then the request's, in the given order.

    Selectors run in Kubernetes' order (the class's first) and stop at the
    first that does not accept a device.  Every selector is compiled first, so
    a selector that does not parse is reported even when there are no devices.
    """
    if request.alternatives:
        raise ValueError(f"request {request.name!r} is a firstAvailable list: use first_available")
    if request.device_class != device_class.name:
        raise ValueError(
            f"request {request.name!r} asks for class {request.device_class!r}, "
            f"not {device_class.name!r}"
        )
    cache = cache if cache is not None else DEFAULT_CACHE
    expressions = (*device_class.selectors, *request.selectors)
    for expression in expressions:
        cache.selector(expression)
    chosen: list[Device] = []
    errors: list[DeviceError] = []
    for device in devices:
        for expression in expressions:
            verdict = cache.verdict(expression, device)
            if verdict.error:
                errors.append(DeviceError(device, expression, verdict.error))
            if not verdict.matches:
                break
        else:
            chosen.append(device)
    return Selection(tuple(chosen), tuple(errors))


def matching(
    devices: Iterable[Device],
    device_class: DeviceClass,
    request: DeviceRequest,
    cache: SelectorCache | None = None,
) -> list[Device]:
    """The devices that pass every selector of the class and of the request."""
    return list(select(devices, device_class, request, cache).devices)


def first_available(
    devices: Iterable[Device],
    classes: Mapping[str, DeviceClass],
    request: DeviceRequest,
    cache: SelectorCache | None = None,
) -> tuple[DeviceRequest, list[Device]] | None:
    """For a firstAvailable request, the first alternative these devices satisfy, and its devices.

    An ``exactly`` request is its own only alternative.  An alternative is
    satisfied by ``count`` matching devices, or by at least one for
    ``allocationMode: All``.  None: no alternative fits.  A class that does not
    exist is an :class:`InvalidSpecError`.
    """
    pool = list(devices)
    for alternative in request.alternatives or (request,):
        device_class = classes.get(alternative.device_class)
        if device_class is None:
            raise InvalidSpecError(
                f"request {alternative.name!r} names DeviceClass "
                f"{alternative.device_class!r}, which does not exist"
            )
        found = matching(pool, device_class, alternative, cache)
        wanted = 1 if alternative.all_devices else alternative.count
        if len(found) >= wanted:
            return alternative, found if alternative.all_devices else found[:wanted]
    return None
