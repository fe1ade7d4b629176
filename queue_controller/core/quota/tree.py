"""The cohort tree: what each node holds of a resource, lends, and has in use.

Kueue's hierarchical cohorts (KEP-79), with Kueue's arithmetic.  Every TeamQuota
is a leaf; its ``spec.cohort`` names its parent; a Cohort's ``parent`` names its
own.  For a node ``n`` and a resource:

* ``subtree(n)``: a TeamQuota's nominal; a cohort's own nominal plus what each
  child lends it, ``subtree(child) - guaranteed(child)``;
* ``guaranteed(n)``: what ``n`` keeps for itself and never lends upwards,
  ``subtree(n) - lendingLimit`` (none without a lending limit);
* ``usage(n)``: a TeamQuota's usage; a cohort's, what its children use beyond
  what they keep, ``sum(max(0, usage(child) - guaranteed(child)))``;
* what ``n`` may still take: what is left of its guarantee, plus what its parent
  may still give, bounded by ``n``'s borrowing limit: at most
  ``subtree(n) + borrowingLimit`` beyond its guarantee in all.  A root has
  ``subtree - usage``.

A one-level tree is the flat cohort: a pool of the members' lendable nominal.
A resource a TeamQuota does not name is not limited by it and draws nothing from
its cohort.  Cycles in ``parent`` are broken where they close (the adapter
refuses such cohorts and names the cycle, see :func:`cycles`), so the tree is
always a forest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from queue_controller.core.model.objects import Cohort, ResourceQuota, TeamQuota


@dataclass(eq=False, slots=True)
class Node:
    """A TeamQuota (a leaf) or a Cohort in the tree."""

    name: str
    cohort: bool
    limits: Mapping[str, ResourceQuota]
    weight: int = 1000  # spec.fairSharing.weight, in thousandths
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    subtree: dict[str, int] = field(default_factory=dict)
    usage: dict[str, int] = field(default_factory=dict)
    # guaranteed(), per resource: the subtree's quota does not change in a cycle, and
    # every charge asks it at every level.
    keep: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{'cohort' if self.cohort else 'TeamQuota'} {self.name}"

    def guaranteed(self, resource: str) -> int:
        """What the node keeps for itself: never lent to its parent."""
        return self.keep.get(resource, 0)

    def settle(self) -> None:
        """Work out what the node keeps, once its subtree's quota is known."""
        self.keep = {
            resource: max(0, self.subtree.get(resource, 0) - limits.lending_limit)
            for resource, limits in self.limits.items()
            if limits.lending_limit is not None
        }

    def draws_on_parent(self, resource: str) -> bool:
        # A TeamQuota draws on its cohort only for what it names; a cohort, always.
        return self.parent is not None and (self.cohort or resource in self.limits)

    def path(self) -> Iterator[Node]:
        """The node, then its ancestors up to the root."""
        node: Node | None = self
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node


def cycles(cohorts: Iterable[Cohort]) -> list[tuple[str, ...]]:
    """Each cycle of ``parent`` links among ``cohorts``, as the names around it, from
    its smallest name (so the same cycle is always written the same way)."""
    parent = {c.name: c.parent for c in cohorts}
    found: dict[tuple[str, ...], None] = {}
    done: set[str] = set()
    for start in sorted(parent):
        seen: list[str] = []
        name = start
        while name in parent and name not in done and name not in seen:
            seen.append(name)
            name = parent[name]
        if name in seen:
            loop = seen[seen.index(name) :]
            first = loop.index(min(loop))
            found[tuple(loop[first:] + loop[:first])] = None
        done.update(seen)
    return list(found)


class QuotaTree:
    """The forest of cohorts and TeamQuotas, with usage kept as admissions change it."""

    def __init__(
        self,
        quotas: Iterable[TeamQuota],
        cohorts: Iterable[Cohort],
        usage: Mapping[str, Mapping[str, int]],
    ) -> None:
        cohorts = list(cohorts)
        self._potential: dict[tuple[int, str], int] = {}
        self._members: dict[int, list[str]] = {}
        self._paths: dict[int, list[Node]] = {}
        # Bumped by every change of usage: what a share read earlier is still good for.
        self.version = 0
        self.cohorts: dict[str, Node] = {
            c.name: Node(c.name, True, c.resources, c.fair_weight) for c in cohorts
        }
        self.quotas: dict[str, Node] = {
            q.name: Node(
                q.name,
                False,
                q.resources,
                q.fair_weight,
                subtree={r: limits.nominal for r, limits in q.resources.items()},
            )
            for q in quotas
        }
        broken = {name for loop in cycles(cohorts) for name in loop}
        for c in cohorts:
            if c.parent and c.name not in broken:
                self._link(self.cohorts[c.name], self._cohort(c.parent))
        for q in quotas:
            if q.cohort:
                self._link(self.quotas[q.name], self._cohort(q.cohort))
        for leaf in self.quotas.values():
            leaf.settle()
        for root in [n for n in self.cohorts.values() if n.parent is None]:
            self._sum_up(root)
        for name, used in usage.items():
            charged = self.quotas.get(name)
            if charged is not None:
                for resource, amount in used.items():
                    self.add(charged, resource, amount)

    def _cohort(self, name: str) -> Node:
        """A cohort by name; one that no Cohort object defines is a bare root."""
        node = self.cohorts.get(name)
        if node is None:
            node = self.cohorts[name] = Node(name, True, {})
        return node

    @staticmethod
    def _link(child: Node, parent: Node) -> None:
        child.parent = parent
        parent.children.append(child)

    def _sum_up(self, node: Node) -> None:
        node.subtree = {r: limits.nominal for r, limits in node.limits.items()}
        for child in node.children:
            if child.cohort:
                self._sum_up(child)
            for resource, amount in child.subtree.items():
                lent = amount - child.guaranteed(resource)
                node.subtree[resource] = node.subtree.get(resource, 0) + lent
        node.settle()

    def add(self, node: Node, resource: str, amount: int) -> None:
        """Change ``node``'s usage by ``amount`` (negative: give back), and its
        ancestors' by what it moves beyond their guarantees."""
        self.version += 1
        while amount:
            usage = node.usage
            before = usage.get(resource, 0)
            after = before + amount
            usage[resource] = after
            # draws_on_parent and guaranteed, inlined: every admission and every victim
            # tried charges every level of its tree.
            parent = node.parent
            if parent is None or not (node.cohort or resource in node.limits):
                return
            keep = node.keep.get(resource, 0)
            amount = max(0, after - keep) - max(0, before - keep)
            node = parent

    def usage_with(self, node: Node, leaf: Node, resource: str, amount: int) -> int:
        """``node``'s usage of ``resource`` were ``amount`` more used at ``leaf`` below it
        (what :meth:`add` would make it), worked out without changing anything."""
        current = leaf
        while current is not node:
            used = current.usage.get(resource, 0)
            if not amount or not current.draws_on_parent(resource):
                return node.usage.get(resource, 0)
            keep = current.guaranteed(resource)
            amount = max(0, used + amount - keep) - max(0, used - keep)
            assert current.parent is not None
            current = current.parent
        return node.usage.get(resource, 0) + amount

    def available(self, node: Node, resource: str) -> int:
        """What ``node`` may still take of ``resource``: negative only at a root that
        is overdrawn (quota taken away under admitted gangs, or a member moved)."""
        used = node.usage.get(resource, 0)
        if node.parent is None or not node.draws_on_parent(resource):
            return node.subtree.get(resource, 0) - used
        keep = node.guaranteed(resource)
        from_parent = self.available(node.parent, resource)
        limits = node.limits.get(resource)
        if limits is not None and limits.borrowing_limit is not None:
            stored = node.subtree.get(resource, 0) - keep
            drawn = max(0, used - keep)
            from_parent = min(from_parent, stored - drawn + limits.borrowing_limit)
        # Overdrawn above (quota shrank under admitted gangs): the guarantee still holds.
        return max(0, keep - used) + max(0, from_parent)

    def potential(self, node: Node, resource: str) -> int:
        """What ``node`` could take of ``resource`` were nothing in use (Kueue's
        ``potentialAvailable``): what fair sharing divides a borrowed amount by.
        Usage does not change it, so it is worked out once per node and resource."""
        key = (id(node), resource)
        known = self._potential.get(key)
        if known is not None:
            return known
        if node.parent is None:
            total = node.subtree.get(resource, 0)
        else:
            total = node.guaranteed(resource) + self.potential(node.parent, resource)
            limits = node.limits.get(resource)
            if limits is not None and limits.borrowing_limit is not None:
                total = min(total, node.subtree.get(resource, 0) + limits.borrowing_limit)
        self._potential[key] = total
        return total

    def borrowed_above(self, node: Node, resource: str, amount: int) -> list[tuple[Node, int]]:
        """For ``amount`` more used at ``node``: each ancestor it borrows from, with how
        much, nearest first.  A node borrows from its parent what it uses beyond its
        subtree's quota, so this is what each level on the path would use beyond its
        own subtree's quota that it does not already."""
        path = [n for n in node.path() if n.parent is not None]

        def over() -> list[int]:
            return [max(0, n.usage.get(resource, 0) - n.subtree.get(resource, 0)) for n in path]

        before = over()
        self.add(node, resource, amount)
        try:
            after = over()
        finally:
            self.add(node, resource, -amount)
        out = []
        for n, was, now in zip(path, before, after, strict=True):
            if now <= was:
                break
            assert n.parent is not None
            out.append((n.parent, now - was))
        return out

    def leaves(self, node: Node) -> Iterator[Node]:
        """The TeamQuotas in ``node``'s subtree."""
        if not node.cohort:
            yield node
            return
        for child in node.children:
            yield from self.leaves(child)

    def path(self, node: Node) -> list[Node]:
        """``node`` and its ancestors, listed once: the tree does not change in a cycle."""
        known = self._paths.get(id(node))
        if known is None:
            known = self._paths[id(node)] = list(node.path())
        return known

    def members(self, root: Node) -> list[str]:
        """The names of the TeamQuotas of a tree, sorted; the trees do not change in a
        cycle, so each is listed once."""
        known = self._members.get(id(root))
        if known is None:
            known = self._members[id(root)] = sorted(leaf.name for leaf in self.leaves(root))
        return known


def roots_of(quotas: Iterable[TeamQuota], cohorts: Iterable[Cohort]) -> dict[str, str]:
    """Each TeamQuota with a cohort, and the root cohort of its tree (a cohort in a
    cycle is its own root, as the tree breaks the cycle there)."""
    cohorts = list(cohorts)
    parent = {c.name: c.parent for c in cohorts}
    broken = {name for loop in cycles(cohorts) for name in loop}
    out = {}
    for quota in quotas:
        if not quota.cohort:
            continue
        name = quota.cohort
        while name not in broken and parent.get(name):
            name = parent[name]
        out[quota.name] = name
    return out
