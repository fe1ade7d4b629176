"""What the journal records: :class:`Entry`, and the one table it is stored in.

The table is created by the Alembic revision in ``migrations/versions/``, never by
``metadata.create_all``; ``tests/journal`` holds the two to one shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Index, Integer, String, Text, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class JournalEvent(StrEnum):
    """What happened to a workload.  The values are stored: never change one."""

    ADMITTED = "Admitted"
    PENDING = "Pending"
    EVICTED = "Evicted"
    REQUEUED = "Requeued"
    DEACTIVATED = "Deactivated"
    FINISHED = "Finished"
    INVALID = "Invalid"
    FLAGGED = "Flagged"  # a condition set on a running gang (GPUUnhealthy, Idle)
    # A lost node of an admitted gang's plan swapped for another (reason NodeReplaced);
    # the entry holds the plan as it is now.
    REPLACED = "Replaced"


@dataclass(frozen=True, slots=True)
class Entry:
    """One decision about one workload, as the controller (or a simulation) made it."""

    at: datetime  # timezone-aware UTC
    namespace: str
    name: str  # the Job's name
    queue: str
    event: JournalEvent
    reason: str  # a stable reason: "NoNodeFit", "PodsReadyTimeout", ...
    message: str = ""
    kind: str = "Job"
    # A Job deleted and re-created under the same name is another workload: the uid tells.
    uid: str = ""
    placement: Mapping[str, int] = field(default_factory=dict)  # node -> pods, on Admitted
    requeue_count: int = 0
    source: str = "controller"  # or "simulation:<run id>"
    # The gang's queue-controller.io/runtime-class label: like gangs share runtime history.
    runtime_class: str = ""

    @property
    def workload(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_dict(self) -> dict[str, object]:
        """The ``history -o json`` shape."""
        return {
            "at": utc(self.at).isoformat().replace("+00:00", "Z"),
            "namespace": self.namespace,
            "name": self.name,
            "kind": self.kind,
            "uid": self.uid,
            "queue": self.queue,
            "event": self.event.value,
            "reason": self.reason,
            "message": self.message,
            "placement": dict(self.placement),
            "requeueCount": self.requeue_count,
            "source": self.source,
        }


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive time is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A ``timestamptz`` that always comes back timezone-aware, in UTC.

    PostgreSQL keeps the offset itself, but SQLite keeps text without one: storing
    every time as UTC makes the text sort in time order and read back unambiguously.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else utc(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else utc(value)


# SQLite gives a table an auto-incrementing key only for a column declared exactly INTEGER.
_ID = BigInteger().with_variant(Integer(), "sqlite")

TABLE = "journal_entries"
# Alembic's own bookkeeping, under a name of our own so that the journal can share a
# PostgreSQL database with other applications that use Alembic.
VERSION_TABLE = "journal_alembic_version"


class Base(DeclarativeBase):
    pass


class JournalRow(Base):
    __tablename__ = TABLE
    __table_args__ = (
        # "What happened to my job": one workload's entries in time order.
        Index("ix_journal_entries_namespace_name_at", "namespace", "name", "at"),
        # "What happened in the last hour", and pruning old entries.
        Index("ix_journal_entries_at", "at"),
    )

    id: Mapped[int] = mapped_column(_ID, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime(), nullable=False)
    namespace: Mapped[str] = mapped_column(String(253), nullable=False)
    name: Mapped[str] = mapped_column(String(253), nullable=False)
    kind: Mapped[str] = mapped_column(String(253), nullable=False)
    uid: Mapped[str] = mapped_column(String(253), nullable=False)
    queue: Mapped[str] = mapped_column(String(253), nullable=False)
    event: Mapped[str] = mapped_column(String(32), nullable=False)
    reason: Mapped[str] = mapped_column(String(253), nullable=False)
    message: Mapped[str] = mapped_column(Text, nullable=False)
    placement: Mapped[dict[str, int]] = mapped_column(JSON, nullable=False)
    requeue_count: Mapped[int] = mapped_column(Integer, nullable=False)
    source: Mapped[str] = mapped_column(String(253), nullable=False)
    runtime_class: Mapped[str] = mapped_column(String(253), nullable=False, server_default="")

    @classmethod
    def from_entry(cls, entry: Entry) -> dict[str, object]:
        """The row's column values (for one bulk INSERT per batch)."""
        return {
            "at": entry.at,
            "namespace": _text(entry.namespace, 253),
            "name": _text(entry.name, 253),
            "kind": _text(entry.kind, 253),
            "uid": _text(entry.uid, 253),
            "queue": _text(entry.queue, 253),
            "event": _text(str(entry.event), 32),
            "reason": _text(entry.reason, 253),
            "message": _text(entry.message, None),
            "placement": {
                _text(str(node), None): int(pods) for node, pods in entry.placement.items()
            },
            "requeue_count": int(entry.requeue_count),
            "source": _text(entry.source, 253),
            "runtime_class": _text(entry.runtime_class, 253),
        }

    def to_entry(self) -> Entry:
        return Entry(
            at=utc(self.at),
            namespace=self.namespace,
            name=self.name,
            queue=self.queue,
            event=JournalEvent(self.event),
            reason=self.reason,
            message=self.message,
            kind=self.kind,
            uid=self.uid,
            placement=dict(self.placement or {}),
            requeue_count=self.requeue_count,
            source=self.source,
            runtime_class=self.runtime_class or "",
        )


def _text(value: str, limit: int | None) -> str:
    # PostgreSQL refuses NUL in text and a string longer than its VARCHAR; either would
    # fail the whole batch, so a stray character must not cost the entry.
    value = value.replace("\x00", "\ufffd")
    return value if limit is None else value[:limit]
