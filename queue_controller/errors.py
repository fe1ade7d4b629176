"""One rooted exception tree.

Every error a user can cause derives from :class:`InputError` and carries the
object and the field it is about, so the CLI can print one clear line instead
of a traceback.  Anything else that escapes is a bug in this program.
"""

from __future__ import annotations

import reprlib


class QueueControllerError(Exception):
    """Root of every error this package raises on purpose."""


class InputError(QueueControllerError):
    """Something the user gave us is wrong: a file, an object, a field or a setting.

    ``where`` names the object (``Node/gpu-1``, ``document 3``) and ``field`` the
    path inside it (``status.allocatable.cpu``); either may be empty when the
    problem is with the whole input.
    """

    def __init__(self, detail: str, *, where: str = "", field: str = "") -> None:
        self.detail = detail
        self.where = where
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        parts = [p for p in (self.where, self.field) if p]
        prefix = ": ".join(parts)
        return f"{prefix}: {self.detail}" if prefix else self.detail

    def located(self, *, where: str = "", field_prefix: str = "") -> InputError:
        """The same error, placed inside a larger object (used while descending a document)."""
        field = ".".join(p for p in (field_prefix, self.field) if p)
        located = type(self).__new__(type(self))
        InputError.__init__(located, self.detail, where=where or self.where, field=field)
        return located


class QuantityError(InputError):
    """A Kubernetes quantity that does not parse (``1.5.3``, ``ten``)."""


class InvalidSpecError(InputError):
    """A pod template that Kubernetes would reject, or that could never be admitted."""


class DumpError(InputError):
    """A cluster dump that cannot be read: bad YAML, an unknown kind, a malformed object."""


class JournalUnavailable(QueueControllerError):
    """The decision journal's database could not be reached or read: not a mistake in
    the input, so it exits 1, still with one line."""


class UnreadableObject(InputError):
    """An object whose reading failed with something other than an :class:`InputError`.

    That is a bug in a reader (a ``ValueError`` from ``int()``, a ``RecursionError``
    deep in a CEL selector), not a mistake this program recognised; but the object is
    still only one object.  A cycle leaves it out, or marks its gang ``InvalidSpec``,
    like any other bad object, so that it cannot stop every other team's admissions.
    ``bug`` keeps the original exception for the one log line with its traceback.
    """

    bug: BaseException | None = None

    @classmethod
    def of(cls, bug: Exception, *, where: str = "") -> UnreadableObject:
        said = str(bug)
        said = said if len(said) <= 200 else f"{said[:197]}..."
        error = cls(f"could not be read (bug: {type(bug).__name__}: {said})", where=where)
        error.bug = bug
        return error

    def located(self, *, where: str = "", field_prefix: str = "") -> InputError:
        located = super().located(where=where, field_prefix=field_prefix)
        if isinstance(located, UnreadableObject):
            located.bug = self.bug
        return located


class _Bounded(reprlib.Repr):
    """``repr`` cut short in depth, width and length.

    A tenant's value may be 5,000 levels deep (``repr`` then exhausts the stack) or
    an integer of thousands of digits (Python refuses to turn it into text), and a
    message quoting it must still be one short line.
    """

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple = 3, 4, 4, 4
        self.maxstring, self.maxother = 80, 60

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 64:
            return f"<an integer of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_BOUNDED = _Bounded()


def shown(value: object) -> str:
    """A user's value as an error message quotes it: at most 100 characters, never deep."""
    text = _BOUNDED.repr(value)
    return text if len(text) <= 100 else f"{text[:97]}..."


def plain(value: object) -> str:
    """A string as written (a name, a kind), anything else as :func:`shown` quotes it."""
    return value if isinstance(value, str) else shown(value)
