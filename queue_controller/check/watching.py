"""``check --watch``: look again and again, and remember since when each violation held.

A violation's ``since`` is the earliest of what the objects say and when this
watch first saw it; one that clears and comes back starts afresh.  Every
violation seen during the watch is kept for the final verdict, so a watch
that saw a broken invariant exits 1 even if it healed before the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from queue_controller.check.violations import Violation


@dataclass
class Watch:
    first_seen: dict[tuple[str, tuple[str, ...]], float] = field(default_factory=dict)
    ever: dict[tuple[str, tuple[str, ...]], Violation] = field(default_factory=dict)

    def update(
        self, found: tuple[Violation, ...], now: float
    ) -> tuple[list[Violation], list[Violation]]:
        """This look's violations with their ``since``: (new ones, ones that cleared)."""
        current = {v.key: v for v in found}
        cleared = [self.ever[key] for key in self.first_seen if key not in current]
        for key in [k for k in self.first_seen if k not in current]:
            del self.first_seen[key]
        new = []
        for key, violation in current.items():
            if key not in self.first_seen:
                self.first_seen[key] = now
                new.append(self._dated(violation))
            self.ever[key] = self._dated(violation)
        return new, cleared

    def _dated(self, violation: Violation) -> Violation:
        seen = self.first_seen[violation.key]
        since = seen if violation.since is None else min(seen, violation.since)
        return replace(violation, since=since)

    def current(self, found: tuple[Violation, ...]) -> list[Violation]:
        return [self._dated(v) for v in found if v.key in self.first_seen]
