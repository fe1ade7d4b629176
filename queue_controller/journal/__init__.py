"""The decision journal: every admission, pending reason, eviction, requeue,
deactivation and finish, kept in a database so that "what happened to my job, and
why" has an answer after its PodGroup is gone.

The controller writes through :class:`Journal`, which buffers and never gets in its
way; ``queue-controller history`` reads through :func:`read_history`.  SQLite by
default, PostgreSQL (``postgresql+psycopg://...``) when several replicas share it.
"""

from queue_controller.journal.database import DEFAULT_URL
from queue_controller.journal.history import read_history
from queue_controller.journal.migrate import migrate
from queue_controller.journal.model import Entry, JournalEvent
from queue_controller.journal.retention import Retention
from queue_controller.journal.runtimes import finished_runtimes
from queue_controller.journal.writer import Journal

__all__ = [
    "DEFAULT_URL",
    "Entry",
    "Journal",
    "JournalEvent",
    "Retention",
    "finished_runtimes",
    "migrate",
    "read_history",
]
