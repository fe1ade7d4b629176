"""One chaos run: inject, watch the recovery with ``check`` at every poll, undo, judge.

The undo runs in ``finally``, and SIGTERM is turned into the same interruption
as Ctrl-C, so a run that ends in any way short of SIGKILL leaves the cluster
as it found it; one that is killed leaves its labels for ``chaos cleanup``.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

from queue_controller.chaos.confirm import Confirmation, NotInjected
from queue_controller.chaos.experiments import Injection
from queue_controller.chaos.marks import Marks, undo
from queue_controller.chaos.observe import GangSeen, Mark, Timeline, read_gang
from queue_controller.check import Timing, Violation, Watch, cluster_objects, look
from queue_controller.core.cycle import NOT_REPLACED
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import get
from queue_controller.kube.snapshot import Located

Say = Callable[[str], None]
QUICK = 0.2  # seconds between reads of the gang itself


class Interrupted(Exception):
    """SIGINT or SIGTERM during a run: undo, then stop."""


@contextmanager
def interruptible() -> Iterator[None]:
    def stop(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@dataclass
class Outcome:
    run: str
    injection: Injection
    timeline: Timeline
    deadline: float  # seconds after injection
    violations: list[Violation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)
    interrupted: str = ""
    # Why the fault never took hold ("" once confirmed, or with nothing to confirm):
    # the controller is then not judged at all.
    not_injected: str = ""
    confirmed: str = ""  # what showed that it took hold

    @property
    def passed(self) -> bool:
        return not (self.violations or self.problems or self.interrupted or self.not_injected)

    @property
    def verdict(self) -> str:
        if self.interrupted:
            return "interrupted"
        if self.violations or self.problems:
            return "failed"
        if self.not_injected:
            return "could not inject"
        return "passed"

    def as_dict(self) -> dict[str, object]:
        return {
            "experiment": self.injection.experiment,
            "run": self.run,
            "injected": self.injection.steps,
            "nodes": list(self.injection.nodes),
            "method": self.injection.method or None,
            "methodWhy": self.injection.method_why or None,
            "confirmed": self.confirmed or None,
            "notInjected": self.not_injected or None,
            "timeline": [m.as_dict() for m in self.timeline.marks],
            "expectedWithinSeconds": round(self.deadline, 1),
            "violations": [v.as_dict() for v in self.violations],
            "problems": self.problems,
            "undone": self.undone,
            "interrupted": self.interrupted or None,
            "passed": self.passed,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Scope:
    """The objects whose broken invariants fail the run (others are not its doing)."""

    names: frozenset[str]
    everything: bool = False

    def covers(self, violation: Violation) -> bool:
        return self.everything or any(o in self.names for o in violation.objects)


def scope_of(gang: GangSeen, items: list[Located], nodes: tuple[str, ...]) -> Scope:
    names = {gang.what, f"PodGroup {gang.namespace}/{gang.group_name}"}
    names |= {f"Node {n}" for n in nodes}
    queue = get(gang.group, "spec.queue", str, "") if gang.group else ""
    for item in items:
        obj = item.obj
        if (
            obj.get("kind") == "Queue"
            and get(obj, "metadata.namespace", str, "") == gang.namespace
            and get(obj, "metadata.name", str, "") == queue
        ):
            names.add(f"TeamQuota {get(obj, 'spec.teamQuota', str, '')}")
    return Scope(frozenset(names))


@dataclass
class Runner:
    gateway: gw.Gateway
    run: str
    timing: Timing
    interval: float
    say: Say
    clock: Callable[[], float] = time.time
    _confirmation: Confirmation | None = field(default=None, init=False)

    def listing(self) -> list[Located]:
        return cluster_objects(self.gateway)

    def execute(
        self, injection: Injection, gang: GangSeen, scope: Scope, deadline: float
    ) -> Outcome:
        marks = Marks(self.gateway, self.run)
        self._confirmation = None
        timeline = Timeline(
            self.clock(), gang.requeue_count, replaced_before=len(gang.replaced_nodes)
        )
        timeline.track_running = "running" in injection.expect
        timeline.track_replaced = "replaced" in injection.expect
        outcome = Outcome(self.run, injection, timeline, deadline)
        try:
            with interruptible():
                try:
                    injection.act(marks)
                except NotInjected:
                    raise  # nothing took hold: no "injected" in the timeline
                except BaseException:
                    self._injected(injection, timeline)  # part of it may have
                    raise
                self._injected(injection, timeline)
                self._watch(injection, gang, scope, outcome, marks)
        except NotInjected as why:
            outcome.not_injected = str(why)
            self.say(f"could not inject: {why}: undoing")
        except Interrupted as why:
            outcome.interrupted = str(why)
            self.say(f"interrupted by {why}: undoing")
        finally:
            outcome.undone = undo(self.gateway, run=self.run)
            for step in outcome.undone:
                self.say(f"undone: {step}")
        self._judge(outcome)
        return outcome

    def _injected(self, injection: Injection, timeline: Timeline) -> None:
        timeline.injected_at = self.clock()
        self._show(timeline.mark("injected", timeline.injected_at, "; ".join(injection.steps)))

    def _watch(
        self, injection: Injection, gang: GangSeen, scope: Scope, outcome: Outcome, marks: Marks
    ) -> None:
        """The gang at a quick pace (phases pass in a second), every invariant each interval."""
        timeline, watch = outcome.timeline, Watch()
        settle_until: float | None = None
        next_look = 0.0
        while True:
            now = self.clock()
            seen = read_gang(self.gateway, gang.namespace, gang.name, gang.kind)
            for mark in timeline.observe(seen, now):
                self._show(mark)
            injection = self._fall_back(injection, outcome)
            if not self._confirm(injection, seen, outcome, now):
                return  # the fault never took hold: nothing to judge the controller on
            if now >= next_look:
                next_look = now + self.interval
                broken = self._look(scope, watch, now)
                outcome.violations.extend(broken)
                if broken:
                    return  # the verdict is in; undo at once
                if injection.keep is not None and not timeline.reached("evicted"):
                    injection.keep(marks)
            if all(timeline.reached(p) for p in injection.expect):
                # One more cycle: a recovery that breaks something on its way out counts.
                settle_until = settle_until or now + self.timing.cycle_seconds
                if now >= settle_until:
                    return
            elif now - timeline.injected_at > outcome.deadline:
                return
            time.sleep(QUICK)

    def _fall_back(self, injection: Injection, outcome: Outcome) -> Injection:
        """A gang whose Queue replaces lost nodes, evicted saying none of its domain fit
        (core's NOT_REPLACED): judged from then on as a loss without replacement, since
        evicting it was right; an eviction that does not say so still fails the run."""
        timeline, fallback = outcome.timeline, injection.fallback
        evicted = next((m for m in timeline.marks if m.phase == "evicted"), None)
        if fallback is None or evicted is None or NOT_REPLACED not in evicted.detail:
            return injection
        self.say("no node of its domain could take the lost members: judged as an eviction")
        outcome.injection = fallback
        timeline.track_replaced = "replaced" in fallback.expect
        timeline.track_running = "running" in fallback.expect
        return fallback

    def _confirm(self, injection: Injection, seen: GangSeen, outcome: Outcome, now: float) -> bool:
        """Whether the fault holds (or may yet): False once a stopped member started."""
        timeline = outcome.timeline
        if injection.kept is None or outcome.confirmed:
            return True
        if self._confirmation is None:
            self._confirmation = Confirmation(injection.kept)
        state, detail = self._confirmation.observe(
            seen, seconds=now - timeline.injected_at, evicted=timeline.reached("evicted")
        )
        if state == "failed":
            how = f"method {injection.method}: {injection.method_why}"
            outcome.not_injected = f"{detail} ({how})" if injection.method else detail
            self.say(f"could not inject: {outcome.not_injected}")
            return False
        if state == "confirmed":
            outcome.confirmed = detail
            self._show(timeline.mark("confirmed", now, detail))
        return True

    def _look(self, scope: Scope, watch: Watch, now: float) -> list[Violation]:
        result = look(self.listing(), now=now, timing=self.timing)
        watch.update(result.violations, now)
        # A violation counts once it has held for a cycle: the objects can show a loss
        # (a lost node's pod collected) a moment before the controller's own mark of it
        # (MembersLost) dates it, and the controller is promised one cycle to act on
        # anything it sees.  One that lasts is still caught, a cycle later.
        broken = [
            v
            for v in watch.current(result.violations)
            if scope.covers(v) and now - watch.first_seen[v.key] >= self.timing.cycle_seconds
        ]
        for violation in broken:
            self.say(f"broken: {violation.invariant.value}: {violation.message}")
        return broken

    def _show(self, mark: Mark | None) -> None:
        if mark is not None:
            self.say(f"{mark.seconds:7.1f}s  {mark.phase:<11} {mark.detail}")

    def _judge(self, outcome: Outcome) -> None:
        timeline, injection = outcome.timeline, outcome.injection
        missing = [p for p in injection.expect if not timeline.reached(p)]
        unconfirmed = injection.kept is not None and not outcome.confirmed
        if unconfirmed and not (outcome.not_injected or outcome.violations or outcome.interrupted):
            outcome.not_injected = "the fault was never confirmed to hold"
        if outcome.not_injected:
            return  # the controller is not judged on a fault that never happened
        if missing and not outcome.violations and not outcome.interrupted:
            outcome.problems.append(
                f"not recovered within {outcome.deadline:.0f}s: never {', '.join(missing)}"
            )
        evicted = next((m for m in timeline.marks if m.phase == "evicted"), None)
        reason = evicted.detail.split(":", 1)[0] if evicted else ""
        if evicted and injection.reasons and reason not in injection.reasons:
            outcome.problems.append(
                f"evicted for {reason}, expected {' or '.join(injection.reasons)}"
            )
        if injection.once and evicted:
            outcome.problems.append(
                f"evicted ({evicted.detail}) and admitted again: the admission was lost"
            )
        placed_on = [n for n in injection.avoid if n in timeline.placement]
        if placed_on:
            outcome.problems.append(f"readmitted onto {', '.join(placed_on)}, which it broke")
