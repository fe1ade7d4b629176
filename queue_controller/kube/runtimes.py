"""Each gang's runtime estimate, made once per workload and journal history.

What a gang asks (its kind reads the annotation, the deadline and the runtime class:
kinds/runtime.py) and like gangs' finished runtimes (the journal, refreshed by the
controller every few minutes) make the core's :class:`RuntimeEstimate`.  The memo keys
it by the workload and the history, so a cycle with neither changed makes none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from queue_controller.core.model import Workload
from queue_controller.kube.kinds import KindGang
from queue_controller.kube.kinds.runtime import RuntimeHistory, estimate
from queue_controller.kube.memo import TranslationMemo


@dataclass(frozen=True, slots=True)
class Runtimes:
    """Each gang's runtime estimate, from what it asks and the journal's history."""

    history: RuntimeHistory
    min_history: int

    def of(self, gang: KindGang, workload: Workload, memo: TranslationMemo) -> Workload:
        """``workload`` with its estimate: made once per workload and history (the
        history is refreshed every few minutes, not per cycle)."""
        ask = gang.facts.runtime

        def made() -> Workload:
            found = estimate(
                ask,
                namespace=workload.namespace,
                queue=workload.queue,
                name=workload.name,
                history=self.history,
                min_history=self.min_history,
            )
            return replace(workload, runtime=found)

        return memo.derived(workload, (self.history, self.min_history), made)
