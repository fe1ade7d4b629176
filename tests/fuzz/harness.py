"""The two paths every fuzzed dump goes through, and what each may end in.

* The controller's: the scheduling loop's pure part (``SchedulingLoop._plan``: the
  translation with ``skip``, the core's cycle, the planner), over the objects as its
  watches would hold them.  It must return: a bad object is reported to ``skip``
  (an :class:`~queue_controller.errors.InputError` naming it) and left out.
* ``plan``'s: the command itself, in-process, over the dump as text.  It may decide
  (exit 0) or refuse the dump with one typed error (exit 2 from ``main``); anything
  else escaping it is a traceback a user would see.

Each path runs under a wall-clock bound: a hang (an exponent that ``Fraction`` raises
to, a selector that takes seconds to compile) fails the example like a crash does.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from queue_controller.cli import cli
from queue_controller.controller.loop import SchedulingLoop
from queue_controller.controller.state import ClusterState
from queue_controller.core import Verdict
from queue_controller.dump import read_file, read_objects
from queue_controller.errors import InputError
from queue_controller.kube.snapshot import is_supported
from tests.loops import scheduling_loop

ROOT = Path(__file__).resolve().parents[2]
REGRESSIONS = Path(__file__).resolve().parent / "regressions"
NOW = 1_800_000_000.0
NOW_TEXT = "2027-01-15T08:00:00Z"  # NOW, for plan's --now
# Per path and example.  A dump of a few dozen objects takes milliseconds (a CEL
# selector compiled afresh, up to a second); the bound is there to catch hangs
# (seconds to forever), with room for a loaded two-core machine.
SECONDS_PER_PATH = 4.0

Obj = dict[str, Any]


def _seed_files() -> dict[str, list[Path]]:
    seeds = {p.stem: [p] for p in sorted((ROOT / "tests/plan/dumps").glob("*.yaml"))}
    # The examples only make sense together (their Jobs name their Queues and quotas).
    seeds["examples"] = sorted((ROOT / "examples").glob("*.yaml"))
    return seeds


@functools.cache
def seeds() -> dict[str, tuple[Obj, ...]]:
    """Every real dump, read by the project's own dump reader: name -> its objects."""
    out: dict[str, tuple[Obj, ...]] = {}
    for name, paths in _seed_files().items():
        objs: list[Obj] = []
        for path in paths:
            objs.extend(
                dict(item.obj)
                for item in read_objects(str(path), read_file(str(path)))
                if is_supported(item.obj)
            )
        out[name] = tuple(objs)
    return out


def _loop(state: ClusterState) -> SchedulingLoop:
    # As the unit tests build it (tests/loops.py); a fresh one each time, so that
    # no translation memo carries one example's pieces into the next.
    return scheduling_loop(state, now=NOW)


@dataclass(frozen=True)
class Cycle:
    skipped: list[str]  # each a rendered InputError: "where: field: detail"
    admitted: list[str]  # "namespace/name" of each gang admitted
    invalid: list[str]  # "namespace/name: message" of each gang decided Invalid
    seconds: float


def controller_cycle(objs: list[Obj]) -> Cycle:
    """The loop's pure part over ``objs``; raises whatever escapes it."""
    # Keyed by position: the watches' own key (kind, namespace, name) would itself read
    # metadata, which the fuzzer mutates too, and two objects may share a name.
    state = ClusterState(_objects={("Fuzz", "", str(i)): obj for i, obj in enumerate(objs)})
    loop = _loop(state)
    started = time.monotonic()
    plan = loop._plan(state.copy(), NOW)
    seconds = time.monotonic() - started
    decisions = plan.result.decisions
    return Cycle(
        list(plan.skipped),
        [d.workload for d in decisions if d.verdict is Verdict.ADMIT],
        [f"{d.workload}: {d.message}" for d in decisions if d.verdict is Verdict.INVALID],
        seconds,
    )


@dataclass(frozen=True)
class PlanRun:
    exit_code: int
    output: str
    error: InputError | None  # the typed error main() would print as one line
    seconds: float


def run_plan(text: str, *extra: str) -> PlanRun:
    """``queue-controller plan -f - --ignore-unknown`` in-process over ``text``.

    Raises what ``main`` would show as a traceback; returns otherwise.
    """
    runner = CliRunner()
    started = time.monotonic()
    result = runner.invoke(
        cli,
        ["plan", "-f", "-", "--now", NOW_TEXT, "--ignore-unknown", *extra],
        input=text,
        env={"COLUMNS": "4000"},  # a table row on one line, so a name is never wrapped
    )
    seconds = time.monotonic() - started
    error = result.exception
    if error is None or isinstance(error, SystemExit):
        return PlanRun(result.exit_code, result.output, None, seconds)
    if isinstance(error, InputError):
        return PlanRun(2, result.output, error, seconds)
    raise error


# --- a dump as text -------------------------------------------------------------
# JSON is YAML, so plan reads it; but json.dumps recurses (a dump nested 1,000 deep
# would fail here, not in plan), cannot write integers past Python's 4,300 digits,
# and writes NaN and Infinity, which YAML reads as strings.  This writer has none of
# those limits: nesting is walked with an explicit stack.


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            return str(value)
        finally:
            sys.set_int_max_str_digits(limit)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    return _quoted(str(value))


def _quoted(text: str) -> str:
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _tokens(value: Any) -> Iterator[str]:
    stack: list[Any] = [value]
    while stack:
        top = stack.pop()
        if isinstance(top, _Literal):
            yield top.text
        elif isinstance(top, Mapping):
            parts: list[Any] = [_Literal("{")]
            for i, (key, item) in enumerate(top.items()):
                parts.extend([_Literal((", " if i else "") + _quoted(str(key)) + ": "), item])
            parts.append(_Literal("}"))
            stack.extend(reversed(parts))
        elif isinstance(top, list | tuple):
            parts = [_Literal("[")]
            for i, item in enumerate(top):
                if i:
                    parts.append(_Literal(", "))
                parts.append(item)
            parts.append(_Literal("]"))
            stack.extend(reversed(parts))
        else:
            yield _scalar(top)


@dataclass(frozen=True, slots=True)
class _Literal:
    text: str


def dump_text(objs: list[Obj]) -> str:
    """``objs`` as a multi-document YAML dump (each document in JSON's flow style)."""
    return "".join(f"---\n{''.join(_tokens(obj))}\n" for obj in objs)


# --- one example, in a child process -------------------------------------------
# A hang in C (raising an int to a huge power) holds the GIL and cannot be
# interrupted, and it can take gigabytes: each example runs in a forked child, which
# is killed past the bound and may not take more than MEMORY_BYTES more memory.
HARD_SECONDS = 2.5 * SECONDS_PER_PATH  # both paths, and the fork, with room to spare
MEMORY_BYTES = 2 << 30


@dataclass(frozen=True)
class PathResult:
    """How one path ended: returned (with what it reported) or raised."""

    seconds: float
    skipped: tuple[str, ...] = ()  # the controller's per-object errors
    admitted: tuple[str, ...] = ()  # the controller's admitted gangs
    invalid: tuple[str, ...] = ()  # the controller's Invalid gangs, with their messages
    output: str = ""  # plan's
    exit_code: int = 0  # plan's
    typed_error: str = ""  # plan's one-line error, when it refused the dump
    raised: str = ""  # "ExceptionType: message" when something else escaped
    trace: str = ""


@dataclass(frozen=True)
class Outcome:
    controller: PathResult | None
    plan: PathResult | None
    hung: str = ""  # set when the child was killed (or died) before it answered

    def problems(self) -> list[str]:
        """Everything in this outcome that the property forbids."""
        out = [self.hung] if self.hung else []
        for name, result in (("controller cycle", self.controller), ("plan", self.plan)):
            if result is None:
                continue
            if result.raised:
                out.append(f"{name} raised {result.raised}\n{result.trace}")
            elif result.seconds > SECONDS_PER_PATH:
                out.append(f"{name} took {result.seconds:.1f}s (bound {SECONDS_PER_PATH}s)")
        return out


def _traced(error: BaseException) -> tuple[str, str]:
    import traceback

    message = str(error)
    if len(message) > 300:
        message = message[:300] + "..."
    trace = "".join(traceback.format_exception(error)[-12:])
    return f"{type(error).__name__}: {message}", trace[-4000:]


def _both(objs: list[Obj], text: str | None, *, controller: bool, plan: bool) -> Outcome:
    ctl = pln = None
    if controller:
        started = time.monotonic()
        try:
            cycle = controller_cycle(objs)
            ctl = PathResult(
                cycle.seconds,
                skipped=tuple(cycle.skipped),
                admitted=tuple(cycle.admitted),
                invalid=tuple(cycle.invalid),
            )
        except BaseException as error:  # the property's subject: report, never hide
            ctl = _raised(time.monotonic() - started, error)
    if plan:
        started = time.monotonic()
        try:
            run = run_plan(dump_text(objs) if text is None else text)
            pln = PathResult(
                run.seconds,
                output=run.output,
                exit_code=run.exit_code,
                typed_error=str(run.error) if run.error is not None else "",
            )
        except BaseException as error:
            pln = _raised(time.monotonic() - started, error)
    return Outcome(ctl, pln)


def _raised(seconds: float, error: BaseException) -> PathResult:
    raised, trace = _traced(error)
    return PathResult(seconds, raised=raised, trace=trace)


def _deepened(value: Any, depth: int) -> Any:
    """``value`` with each chain of single-item lists or maps 500 or more deep made
    ``depth`` deep (a YAML file cannot hold 1,000; the API server takes 10,000)."""
    from tests.fuzz.mutations import deep_dict, deep_list

    def chain(node: Any) -> int:
        length = 0
        while isinstance(node, list | dict) and len(node) <= 1:
            length += 1
            if not node:
                break
            node = node[0] if isinstance(node, list) else next(iter(node.values()))
        return length

    if chain(value) >= 500:
        return deep_list(depth) if isinstance(value, list) else deep_dict(depth)
    if isinstance(value, dict):
        return {k: _deepened(v, depth) for k, v in value.items()}
    if isinstance(value, list):
        return [_deepened(v, depth) for v in value]
    return value


def plan_file_isolated(path: Path, *, deepen: int = 0) -> Outcome:
    """Both paths over a dump file: plan reads its text, the controller its objects
    (with ``deepen``, its deep nesting made that deep: see :func:`_deepened`)."""
    text = path.read_text(encoding="utf-8")
    # The objects as the controller gets them: integers past Python's 4,300 digits
    # included (that the dump reader refuses them is plan's concern, not the cycle's).
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        # YAML itself, not the dump reader: that is plan's to run (and to fail), here
        # only the objects are wanted.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        objs = [doc for doc in yaml.load_all(text, Loader=loader) if isinstance(doc, dict)]
    finally:
        sys.set_int_max_str_digits(limit)
    if deepen:
        objs = [_deepened(obj, deepen) for obj in objs]
    return run_isolated(objs, text=text)


@functools.cache
def _warm() -> None:
    """Both paths once over every seed, here, so that every child inherits what their
    first use sets up (the CEL parser, the CLI's imports) instead of timing it."""
    for objs in seeds().values():
        controller_cycle(list(objs))
        run_plan(dump_text(list(objs)))


def run_isolated(
    objs: list[Obj], *, text: str | None = None, controller: bool = True, plan: bool = True
) -> Outcome:
    """Both paths over ``objs`` (``text``: plan's dump, when not ``objs`` written out)
    in a forked child, killed after HARD_SECONDS."""
    _warm()
    import os
    import pickle
    import resource
    import select
    import signal

    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running any of pytest's exit
        os.close(reader)
        code = 0
        try:
            with open("/proc/self/statm") as statm:
                used = int(statm.read().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (used + MEMORY_BYTES, used + MEMORY_BYTES))
            data = pickle.dumps(_both(objs, text, controller=controller, plan=plan))
            with os.fdopen(writer, "wb") as out:
                out.write(data)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(writer)
    chunks: list[bytes] = []
    deadline = time.monotonic() + HARD_SECONDS
    hung = ""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                hung = f"no answer within {HARD_SECONDS:.0f}s: killed (a hang)"
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([reader], [], [], left)
            if ready:
                chunk = os.read(reader, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(reader)
        _, status = os.waitpid(pid, 0)
    if hung:
        return Outcome(None, None, hung)
    if not chunks:
        return Outcome(None, None, f"the child died without answering (wait status {status})")
    outcome: Outcome = pickle.loads(b"".join(chunks))
    return outcome
