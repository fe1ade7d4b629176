"""One look at the cluster for ``check``: from the API server or from a dump.

A look translates every object once, as a controller cycle does, but an
object the translation cannot read is reported and left out rather than
stopping the check: a broken object is not a broken invariant.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from queue_controller.check.invariants import Timing, violations
from queue_controller.check.violations import Violation
from queue_controller.errors import InputError
from queue_controller.kube import kinds
from queue_controller.kube.fields import Obj, describe
from queue_controller.kube.gateway import Gateway
from queue_controller.kube.resources import POD_GROUP
from queue_controller.kube.snapshot import Located, is_supported, translate


@dataclass(frozen=True, slots=True)
class Look:
    violations: tuple[Violation, ...]
    objects: int  # how many objects were read
    unreadable: tuple[str, ...]  # objects left out, each with why


def look(items: Iterable[Located], *, now: float, timing: Timing) -> Look:
    kept = [item for item in items if is_supported(item.obj)]
    unreadable: list[str] = []

    def skip(error: InputError) -> None:
        unreadable.append(str(error))

    seen = translate(kept, now=now, skip=skip)
    groups = [item.obj for item in kept if item.obj.get("kind") == POD_GROUP.kind]
    found = violations(seen, groups, now=now, timing=timing)
    return Look(tuple(found), len(kept), tuple(unreadable))


def cluster_objects(gateway: Gateway) -> list[Located]:
    """Everything a controller cycle reads, listed from the API server."""
    return [
        Located(describe(obj), obj) for resource in kinds.WATCHED for obj in gateway.list(resource)
    ]


Source = Callable[[], list[Located]]


def from_objects(objects: Iterable[Obj]) -> Source:
    fixed = [Located(describe(obj), obj) for obj in objects]
    return lambda: fixed
