"""One look at the cluster for ``check``: from the API server or from a dump.

A look translates every object once, as a controller cycle does, but an
object the translation cannot read (or one without a name, or the same object
twice in a dump) is reported and left out rather than stopping the check: a
broken object is not a broken invariant.  It is not a clean bill either: what
was left out was not checked, and ``check`` says so with its own exit code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from queue_controller.check.invariants import Timing, violations
from queue_controller.check.violations import Violation
from queue_controller.dump import LeftOut, distinct, translate_all
from queue_controller.kube import watched
from queue_controller.kube.fields import Obj, describe
from queue_controller.kube.gateway import Gateway
from queue_controller.kube.resources import POD_GROUP
from queue_controller.kube.snapshot import Located, is_supported


@dataclass(frozen=True, slots=True)
class Look:
    violations: tuple[Violation, ...]
    objects: int  # how many objects were read
    left_out: tuple[LeftOut, ...]  # objects that could not be read, each with why

    @property
    def unreadable(self) -> tuple[str, ...]:
        """Each object left out, as one line."""
        return tuple(str(item) for item in self.left_out)


def look(items: Iterable[Located], *, now: float, timing: Timing) -> Look:
    supported = [item for item in items if is_supported(item.obj)]
    # The PodGroups are counted as read, a second copy of one left out with the rest.
    kept, left_out = distinct(supported)
    seen, unread = translate_all(kept, now=now)
    groups = [item.obj for item in kept if item.obj.get("kind") == POD_GROUP.kind]
    found = violations(seen, groups, now=now, timing=timing)
    return Look(tuple(found), len(supported), (*left_out, *unread))


def cluster_objects(gateway: Gateway) -> list[Located]:
    """Everything a controller cycle reads, listed from the API server."""
    return [Located(describe(obj), obj) for obj in watched.list_all(gateway)]


Source = Callable[[], list[Located]]


def from_objects(objects: Iterable[Obj]) -> Source:
    fixed = [Located(describe(obj), obj) for obj in objects]
    return lambda: fixed
