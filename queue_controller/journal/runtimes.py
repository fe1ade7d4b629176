"""Like gangs' runtimes, for reservation's runtime estimates (``History``).

A gang's runtime is from its last ``Admitted`` entry to the ``Finished`` one that
follows it with reason ``Succeeded``: a gang that failed or was deleted says little of
how long its like run, and a short failed run would make backfills promise too much.
The controller reads this every few minutes, in a thread of its own, never per cycle.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import inspect, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from queue_controller.errors import JournalUnavailable
from queue_controller.journal.database import describe, make_engine, parse_url, shown
from queue_controller.journal.model import TABLE, JournalEvent, JournalRow

# (runtime class, workload name) -> what like gangs share ("class:gpu-sweep", "name:sweep").
KeyOf = Callable[[str, str], str]
# (namespace, queue, key) -> runtimes in seconds, oldest first.
Runtimes = dict[tuple[str, str, str], tuple[float, ...]]
# The newest runs kept per key: enough for a median, bounded however long the journal.
PER_KEY = 50
SUCCEEDED = "Succeeded"


def finished_runtimes(
    url: str, *, key_of: KeyOf, since: datetime | None = None, source: str = "controller"
) -> Runtimes:
    """Runtimes of the gangs that succeeded, grouped by (namespace, queue, key_of(...)).

    Raises :class:`~queue_controller.errors.JournalUnavailable` when the journal cannot be
    read; a journal with no table yet has no history.
    """
    parsed = parse_url(url)
    query = (
        select(
            JournalRow.namespace,
            JournalRow.queue,
            JournalRow.kind,
            JournalRow.name,
            JournalRow.uid,
            JournalRow.runtime_class,
            JournalRow.event,
            JournalRow.reason,
            JournalRow.at,
        )
        .where(JournalRow.source == source)
        .where(JournalRow.event.in_([JournalEvent.ADMITTED.value, JournalEvent.FINISHED.value]))
        .order_by(JournalRow.at, JournalRow.id)
    )
    if since is not None:
        query = query.where(JournalRow.at >= since)
    engine = make_engine(parsed, writer=False)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table(TABLE):
                return {}
            rows = Session(connection).execute(query).all()
    except SQLAlchemyError as error:
        raise JournalUnavailable(
            f"cannot read the journal at {shown(parsed)}: {describe(error)}"
        ) from None
    finally:
        engine.dispose()
    admitted: dict[tuple[str, str, str, str], datetime] = {}
    out: defaultdict[tuple[str, str, str], list[float]] = defaultdict(list)
    for namespace, queue, kind, name, uid, runtime_class, event, reason, at in rows:
        workload = (namespace, kind, name, uid)
        if event == JournalEvent.ADMITTED.value:
            admitted[workload] = at
            continue
        started = admitted.pop(workload, None)
        if started is None or reason != SUCCEEDED:
            continue
        seconds = (at - started).total_seconds()
        if seconds >= 0:
            out[(namespace, queue, key_of(runtime_class or "", name))].append(seconds)
    return {key: tuple(runs[-PER_KEY:]) for key, runs in out.items()}
