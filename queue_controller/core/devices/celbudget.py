"""A cost budget for one run of a CEL selector, as Kubernetes keeps one.

The API server refuses a DRA selector whose cost could pass a limit, and stops
one that passes it while running; cel-python has neither.  Ten nested
``[0, ..., 9].all(x, ...)`` macros are 10**10 steps within the length and nesting
bounds, and ``["a"].map(a, [a + a].map(b, ...))`` doubles a string at each
level: one tenant's selector would hang every cycle or fill the memory.

So every run counts the tree nodes it evaluates, macros' bodies included, and
stops past :data:`MAX_STEPS`; and a value it builds (a string, bytes, a list or
a map) may hold at most :data:`MAX_VALUE_SIZE` characters or elements.  Real
selectors compare a few attributes: a few dozen steps, and short values.
"""

from __future__ import annotations

from typing import Any

import celpy
import lark
from celpy.evaluation import Context, Evaluator

# Steps (tree nodes evaluated) per run: a thousand turns of a small macro body.
# cel-python takes about 9 µs a step here (measured), so a run past the budget is
# stopped within about 0.2 s; the verdict is cached, so that is paid once.
MAX_STEPS = 20_000
# Characters or elements of any one value built while running.
MAX_VALUE_SIZE = 64 * 1024


class OverBudget(Exception):
    """The run went past the budget.  cel-python catches only the errors it knows
    (TypeError, KeyError...), so this one reaches the caller whatever it was doing."""


class _Budgeted(Evaluator):
    """cel-python's evaluator, counting each node it visits against a shared budget."""

    def __init__(self, ast: lark.Tree[Any], activation: Any, left: list[int]) -> None:
        super().__init__(ast, activation)
        self._left = left  # one cell shared with the macros' sub-evaluators

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _Budgeted(ast, self.activation, self._left)

    def _visit_tree(self, tree: lark.Tree[Any]) -> Any:
        self._left[0] -= 1
        if self._left[0] < 0:
            raise OverBudget(f"it runs past {MAX_STEPS:,} steps")
        value = super()._visit_tree(tree)
        if isinstance(value, str | bytes | list | dict) and len(value) > MAX_VALUE_SIZE:
            raise OverBudget(f"it builds a value of more than {MAX_VALUE_SIZE:,} items")
        return value


class BudgetedRunner(celpy.InterpretedRunner):
    """An interpreted runner whose every run has a fresh budget (:class:`OverBudget`)."""

    def evaluate(self, context: Context) -> celpy.celtypes.Value:
        evaluator = _Budgeted(self.ast, self.new_activation(), [MAX_STEPS])
        return evaluator.evaluate(context)
