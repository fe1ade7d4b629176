"""What translating an unchanged object gave last cycle, kept for the next (issue 16).

The controller translates every object its watches hold at every cycle.  At a
thousand nodes that costs ten times the core's own decisions, and almost all of it
re-reads objects that did not change.  A :class:`TranslationMemo` keeps each
object's typed piece under its ``(kind, namespace, name)`` with the
``resourceVersion`` it was read at, and hands it back while that version holds.  A
Node whose heartbeat alone moved keeps the version it was read at
(:data:`CYCLE_VERSION`, set by the controller's state), so 2,000 nodes beating every
few minutes are not read again.  A
cycle's cost then follows what changed, plus one pass over the rest to look them up.

A gang's reading (its kind's ``read`` and its workload) is kept the same way: it is
reused while its head is at the same version, its members are the very pieces the
pod memo handed back (the same objects, so ``is`` tells), and its PodGroup view is
the same.

An object without a ``resourceVersion`` (a dump's, a test's) is never kept.  A
piece that could not be read (an :class:`~queue_controller.errors.InputError`) is
not kept either: it is read, and reported, again.  Pieces of objects a cycle did
not see are dropped at :meth:`TranslationMemo.end_cycle`.

The memo is also each object's error boundary (issue 22): any other exception a
reader raises (a bug: a ``ValueError``, a ``RecursionError``) becomes an
:class:`~queue_controller.errors.UnreadableObject` naming the object, so it is one
bad object and never a failed cycle.  That failure *is* kept at the object's
version, so a reader that took a deep recursion to fail is not run again every
cycle; and its traceback is logged once, not at every cycle it stays broken.

Safe because every piece is immutable (frozen views, tuples) and a translation
never depends on the time; one memo serves one cycle at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from queue_controller.errors import InputError, UnreadableObject, plain

log = logging.getLogger(__name__)
Obj = Mapping[str, Any]

T = TypeVar("T")
_Key = tuple[str, str, str]


# The version of a held object's last change that a cycle reads, where the controller's
# state keeps one apart from resourceVersion (a Node whose heartbeat alone moved:
# controller/state.py).  No API object has such a key: the API's are camelCase words.
CYCLE_VERSION = "_cycleVersion"


def _version(obj: Obj) -> str | None:
    marked = obj.get(CYCLE_VERSION)
    if isinstance(marked, str) and marked:
        return marked
    meta = obj.get("metadata")
    # ``type(...) is dict`` first: held objects are dicts, and an ABC's isinstance is
    # slow enough to show in a cycle that looks up every object (tens of thousands).
    if type(meta) is dict or isinstance(meta, Mapping):
        version = meta.get("resourceVersion")
    else:
        version = None
    return version if isinstance(version, str) and version else None


def key_of(obj: Obj) -> _Key | None:
    """(kind, namespace, name), or None for an object that cannot be named."""
    meta = obj.get("metadata")
    if not (type(meta) is dict or isinstance(meta, Mapping)):
        return None
    namespace, name = meta.get("namespace") or "", meta.get("name")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return None
    kind = obj.get("kind", "")
    # A kind that is not a string (a 5,000-digit number, say) is quoted short.
    return plain(kind), namespace, name


@dataclass(frozen=True, slots=True)
class _Failed:
    """A reading that failed with a bug, kept so that it fails the same way, at once."""

    error: UnreadableObject


def _describe(key: _Key | None) -> str:
    if key is None:
        return "an object without a name"
    kind, namespace, name = key
    return "/".join(p for p in (kind, namespace, name) if p)


def _same(held: Sequence[Any], now: Sequence[Any]) -> bool:
    return len(held) == len(now) and all(a is b for a, b in zip(held, now, strict=True))


class TranslationMemo:
    def __init__(self, *, log_bugs: bool = False) -> None:
        # The controller logs a reader's bug with its traceback (``plan`` and ``check``
        # say it in one line, and their users get no traceback).
        self.log_bugs = log_bugs
        # Objects whose reading failed with a bug -> what was logged for it.
        self._logged: dict[_Key, str] = {}
        self._next_logged: dict[_Key, str] = {}
        self._pieces: dict[_Key, tuple[str, Any]] = {}
        self._next_pieces: dict[_Key, tuple[str, Any]] = {}
        # (kind name, namespace, gang name) -> (head version, members, group, reading)
        self._gangs: dict[_Key, tuple[str | None, tuple[Any, ...], Any, Any]] = {}
        self._next_gangs: dict[_Key, tuple[str | None, tuple[Any, ...], Any, Any]] = {}
        # id(object) -> (the object, its key, its version, its piece).  The controller's
        # state hands a cycle the very dict it held last cycle for an unchanged object,
        # so the common case is one lookup by identity and a look at the version (an
        # object changed in place, as tests do, still says so by its version), without
        # reading its key again.  The object is kept, so its id is not reused meanwhile.
        self._same: dict[int, tuple[Obj, _Key, str, Any]] = {}
        self._next_same: dict[int, tuple[Obj, _Key, str, Any]] = {}
        # id(source) -> (source, extra, what was made of them): see derived().
        self._derived: dict[int, tuple[object, object, Any]] = {}
        self._next_derived: dict[int, tuple[object, object, Any]] = {}
        self.hits = 0  # pieces handed back unchanged since the memo was made
        self.misses = 0  # pieces read afresh

    def piece(self, obj: Obj, read: Callable[[], T]) -> T:
        """``read()``'s result for ``obj``, reused while ``obj`` is at the same version."""
        same = self._same.get(id(obj))
        if same is not None and same[0] is obj and same[2] == _version(obj):
            self.hits += 1
            self._next_same[id(obj)] = same
            self._next_pieces[same[1]] = (same[2], same[3])
            return self._unless_failed(same[1], same[3])  # type: ignore[no-any-return]
        version, key = _version(obj), key_of(obj)
        if version is None or key is None:
            return self._read(key, read)
        held = self._pieces.get(key)
        if held is not None and held[0] == version:
            self.hits += 1
            value: T = held[1]
        else:
            self.misses += 1
            try:
                value = self._read(key, read)
            except UnreadableObject as error:
                value = _Failed(error)  # type: ignore[assignment]
        self._next_pieces[key] = (version, value)
        self._next_same[id(obj)] = (obj, key, version, value)
        return self._unless_failed(key, value)

    def gang(
        self,
        key: _Key,
        head: Obj | None,
        members: tuple[Any, ...],
        group: Any,
        read: Callable[[], T],
    ) -> T:
        """``read()``'s reading of a gang, reused while its head's version, its members
        and its PodGroup view are the same."""
        version = _version(head) if head is not None else None
        held = self._gangs.get(key)
        if (
            held is not None
            and (head is None or version is not None)
            and held[0] == version
            and held[2] is group
            and _same(held[1], members)
        ):
            self.hits += 1
            value: T = held[3]
        else:
            self.misses += 1
            try:
                value = self._read(key, read)
            except UnreadableObject as error:
                value = _Failed(error)  # type: ignore[assignment]
        self._next_gangs[key] = (version, members, group, value)
        return self._unless_failed(key, value)

    def derived(self, source: object, extra: object, make: Callable[[], T]) -> T:
        """``make()``, reused while ``source`` is the very object it was made from (a
        piece this memo handed back: immutable) and ``extra`` is equal.  What a cycle
        makes of each piece (a bound pod as the core sees it) is then made once."""
        held = self._derived.get(id(source))
        if held is not None and held[0] is source and held[1] == extra:
            value: T = held[2]
        else:
            value = make()
        self._next_derived[id(source)] = (source, extra, value)
        return value

    def _read(self, key: _Key | None, read: Callable[[], T]) -> T:
        """``read()``, with every exception but an InputError made an UnreadableObject."""
        try:
            return read()
        except InputError:
            raise
        except Exception as bug:  # the boundary: not BaseException (KeyboardInterrupt)
            raise self.unreadable(key, bug) from bug

    def unreadable(self, key: _Key | None, bug: Exception) -> UnreadableObject:
        """``bug``, raised reading the object ``key``, as the object's own error; its
        traceback logged once while the object stays unreadable the same way."""
        error = UnreadableObject.of(bug, where=_describe(key))
        if key is not None:
            self._next_logged[key] = error.detail
        if self.log_bugs and (key is None or self._logged.get(key) != error.detail):
            log.error("%s %s", error.where, error.detail, exc_info=bug)
        return error

    def _unless_failed(self, key: _Key, value: T) -> T:
        if isinstance(value, _Failed):
            if key in self._logged:
                self._next_logged.setdefault(key, self._logged[key])
            raise value.error
        return value

    def end_cycle(self) -> None:
        """Keep what this cycle saw, drop the rest (objects deleted since)."""
        self._pieces, self._next_pieces = self._next_pieces, {}
        self._same, self._next_same = self._next_same, {}
        self._derived, self._next_derived = self._next_derived, {}
        self._gangs, self._next_gangs = self._next_gangs, {}
        self._logged, self._next_logged = self._next_logged, {}

    def __len__(self) -> int:
        return len(self._pieces) + len(self._gangs)
