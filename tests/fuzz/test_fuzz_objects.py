"""No object, however malformed, fails a cycle or ``plan``, or hangs them (issue 22).

Each example takes a real dump (tests/plan/dumps, the examples), breaks one to
three places in its objects (tests/fuzz/mutations.py) and runs the controller's
translation and cycle, and ``plan``, over it (tests/fuzz/harness.py).  Both must
return, each within SECONDS_PER_PATH: the controller reporting a bad object to its
``skip`` as an InputError that names it, ``plan`` deciding or refusing the dump
with one typed error.  Anything else escaping either path fails the example.

Budget: the ``fuzz-ci`` profile (fixed examples, derandomized, so CI is repeatable)
unless QC_FUZZ_EXAMPLES is set; ``make fuzz`` sets it, with a random seed.

The cycle's error boundary turns a reader's own exception (a ValueError from
``int()``) into an UnreadableObject: typed, so the property holds, but still a
reader's bug, with no field named.  CI counts those (in the statistics);
QC_FUZZ_STRICT=1 (``make fuzz``) fails on them, to find the next class of bug.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from hypothesis import HealthCheck, event, given, settings

from tests.fuzz.harness import Outcome, run_isolated, seeds
from tests.fuzz.mutations import Mutation, cel_mutations, mutated_dumps

_COMMON: dict[str, Any] = {
    # Our own bound (harness.SECONDS_PER_PATH) times each path; hypothesis' deadline
    # would time the fork and the shrinking too.
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("fuzz-ci", max_examples=100, derandomize=True, database=None, **_COMMON)
settings.register_profile(
    "fuzz-long", max_examples=int(os.environ.get("QC_FUZZ_EXAMPLES") or 20_000), **_COMMON
)
STRICT = os.environ.get("QC_FUZZ_STRICT") == "1"
UNREADABLE = "could not be read (bug: "  # errors.UnreadableObject's detail
FUZZ = settings.get_profile("fuzz-long" if os.environ.get("QC_FUZZ_EXAMPLES") else "fuzz-ci")
CEL_FUZZ = settings(FUZZ, max_examples=max(FUZZ.max_examples // 3, 30))

SEEDS = seeds()


def _mutated(name: str, mutations: list[Mutation]) -> list[dict[str, Any]]:
    objs = copy.deepcopy(list(SEEDS[name]))
    for mutation in mutations:
        mutation.apply(objs)
    return objs


def _check(outcome: Outcome) -> None:
    problems = outcome.problems()
    assert not problems, "\n".join(problems)
    assert outcome.controller is not None
    for problem in outcome.controller.skipped:
        # Each one names the object it left out ("Kind/namespace/name: field: ...").
        assert "/" in problem.split(":", 1)[0], problem
        if UNREADABLE in problem:
            event("a reader's own exception, caught by the boundary")
            assert not STRICT, problem
    event(f"controller left out {min(len(outcome.controller.skipped), 3)}+ objects")
    if outcome.plan is not None:
        event(f"plan exit {outcome.plan.exit_code}")
        if outcome.plan.exit_code:
            # Refused: one line naming the dump's document and, from it, the object.
            assert outcome.plan.typed_error.startswith("<stdin>"), outcome.plan.typed_error


@FUZZ
@given(mutated_dumps(SEEDS))
def test_any_mutation_of_a_real_dump_is_refused_per_object(
    case: tuple[str, list[Mutation]],
) -> None:
    name, mutations = case
    event(f"dump {name}")
    _check(run_isolated(_mutated(name, mutations)))


@CEL_FUZZ
@given(cel_mutations(SEEDS))
def test_any_dra_selector_is_refused_per_object(case: tuple[str, list[Mutation]]) -> None:
    name, mutations = case
    _check(run_isolated(_mutated(name, mutations)))
