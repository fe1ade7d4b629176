"""Tables for people (rich); the JSON forms live beside the data they render."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from queue_controller.controller.status import topology_domain
from queue_controller.core import Decision, Snapshot, Verdict

_STYLE = {
    Verdict.ADMIT: "green",
    Verdict.PREEMPT: "magenta",
    Verdict.PENDING: "yellow",
    Verdict.INVALID: "red",
}


def _placement(decision: Decision) -> str:
    nodes = ", ".join(f"{node}: {pods}" for node, pods in decision.placement.items())
    # A gang that asked for a topology: where it goes, as its PodGroup's Domain will say.
    if not decision.domains:
        return nodes
    where = topology_domain(decision.domains) or "several top-level domains"
    how = "; ".join(sorted(set(decision.spread.values())))
    return f"in {where} ({how}): {nodes}" if how else f"in {where}: {nodes}"


def decisions_table(
    decisions: Sequence[Decision],
    *,
    snapshot: Snapshot,
    skipped: int,
    left_out: int = 0,
    console: Console | None = None,
) -> None:
    # Only a console of our own is widened; a caller's is used as it is.
    piped = console is None
    console = console or Console()
    piped = piped and not console.is_terminal
    table = Table(box=None, header_style="bold", pad_edge=False, expand=False)
    table.add_column("#", justify="right")
    table.add_column("WORKLOAD", no_wrap=True)
    table.add_column("QUEUE", no_wrap=True)
    table.add_column("DECISION", no_wrap=True)
    table.add_column("REASON", no_wrap=True)
    # Fold long words rather than cut them to "Insufficie…": the reason is the point.
    table.add_column("PLACEMENT / WHY", overflow="fold")
    for number, decision in enumerate(decisions, start=1):
        style = _STYLE[decision.verdict]
        detail = _placement(decision) if decision.verdict is Verdict.ADMIT else decision.message
        if decision.verdict is Verdict.PREEMPT:
            evicts = ", ".join(key.split("/", 1)[1] for key, _ in decision.victims)
            detail = f"{_placement(decision)} once it evicts {evicts}"
        table.add_row(
            str(number),
            escape(decision.workload),
            escape(decision.queue),
            f"[{style}]{decision.verdict.value}[/]",
            decision.reason.value,
            escape(detail),
        )
    if piped:
        # Piped or redirected (a log, grep, CI): there is no screen to fit, so every row
        # is printed whole on one line instead of squeezed into rich's default 80 columns.
        natural = Measurement.get(console, console.options.update(width=1 << 16), table)
        console = Console(width=max(natural.maximum, console.width))
    console.print(table)
    counts = Counter(d.verdict for d in decisions)
    summary = (
        f"{len(decisions)} pending gangs over {len(snapshot.nodes)} nodes: "
        f"{counts[Verdict.ADMIT]} admit, "
        + (f"{counts[Verdict.PREEMPT]} preempt, " if counts[Verdict.PREEMPT] else "")
        + f"{counts[Verdict.PENDING]} pending, {counts[Verdict.INVALID]} invalid"
    )
    notes = []
    if skipped:
        notes.append(f"{skipped} objects of other kinds skipped")
    if left_out:
        notes.append(f"{left_out} objects left out, named above")
    if notes:
        summary += f" ({'; '.join(notes)})"
    console.print(summary)
