"""Every class of failure the fuzzer found, kept as a small dump (tests/fuzz/regressions).

Each dump holds a healthy gang (``expect-admit``) and one bad object; its header
names the object and the field the error must name (``-``: a value Kubernetes
accepts too, which must only be read within the bound).  ``expect-deepen: N``: the
controller's objects get the file's deep nesting N deep, past what YAML can hold.
Both paths run over it, each within the fuzzer's bound: the controller's cycle
reports the object (to ``skip``, or as an Invalid decision of its gang) and admits
the healthy gang; ``plan`` exits 0, admits the healthy gang and names the object and
the field.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fuzz.harness import REGRESSIONS, Outcome, plan_file_isolated

DUMPS = sorted(REGRESSIONS.glob("*.yaml"))


def _header(path: Path) -> dict[str, str]:
    found = re.findall(r"^# expect-([a-z]+): (.*)$", path.read_text()[:2000], re.MULTILINE)
    return dict(found)


def _params() -> list[object]:
    return [pytest.param(path, id=path.stem) for path in DUMPS]


def test_every_regression_dump_says_what_it_expects() -> None:
    assert DUMPS, "no regression dumps"
    for path in DUMPS:
        assert {"object", "field", "admit"} <= set(_header(path)), path.name


def _names(text: str, expect: dict[str, str]) -> bool:
    if expect["object"] == "-":
        return True
    # A field may be written ``requests[cpu]`` or ``requests.cpu``: compared as dots.
    dotted = text.replace("[", ".").replace("]", "")
    return expect["object"] in text and expect["field"] in dotted


@pytest.mark.parametrize("path", _params())
def test_regression_dump_is_refused_per_object(path: Path) -> None:
    expect = _header(path)
    outcome: Outcome = plan_file_isolated(path, deepen=int(expect.get("deepen", 0)))
    problems = outcome.problems()
    assert not problems, "\n".join(problems)
    assert outcome.controller is not None
    assert outcome.plan is not None
    # The controller: the bad object left out or its gang Invalid, named with its field.
    reported = "\n".join(outcome.controller.skipped + outcome.controller.invalid)
    assert _names(reported, expect), f"the cycle did not name {expect}:\n{reported}"
    assert expect["admit"] in outcome.controller.admitted, outcome.controller.admitted
    # plan: decides the healthy gangs, names the bad object and field, exits 0.
    said = outcome.plan.output + outcome.plan.typed_error
    assert outcome.plan.exit_code == 0, said[-2000:]
    assert _names(said, expect), f"plan did not name {expect}:\n{said[-2000:]}"
    assert re.search(rf"{re.escape(expect['admit'])}\b.*Admit", said), said[-2000:]
