"""No import circle anywhere in queue_controller, ``TYPE_CHECKING`` imports included.

The graph is grimp's (the one import-linter checks), with type-only imports in it:
a circle that only annotations close still ties the modules together, and hides
behind ``TYPE_CHECKING`` until someone needs the name at run time.

Every edge counts, a package's ``__init__`` (its face) importing its own
submodules included.  Those edges alone never close a circle: Python imports a
package before its submodules, and grimp records no edge from a submodule to
its package unless the submodule imports the package by name.  If one does (a
module of ``core.placement`` writing ``from queue_controller.core import ...``
while ``core/__init__`` re-exports the cycle, which imports ``placement``), that
is a real circle: the face is half-initialised when the submodule asks it for a
name.  So a face re-exporting its submodules needs no exception, and a
submodule must import its siblings by their own paths, never through its face.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "queue_controller"


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components with a circle in them (more than one module,
    or one that imports itself), each sorted, in sorted order.  Tarjan's algorithm,
    without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(graph) | {w for targets in graph.values() for w in targets})

    def targets(v: str) -> list[str]:
        return sorted(graph.get(v, ()))

    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[str, list[str]]] = [(root, targets(root))]
        while work:
            v, pending = work[-1]
            if pending:
                w = pending.pop()
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, targets(w)))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] == index[v]:
                component: list[str] = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1 or v in graph.get(v, ()):
                    found.append(sorted(component))
    return sorted(found)


def import_graph(package: str = PACKAGE) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of ``package`` it imports directly."""
    graph = grimp.build_graph(package, cache_dir=None)
    inside = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    return {m: graph.find_modules_directly_imported_by(m) & inside for m in inside}


def test_the_cycle_finder_finds_circles() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"a"}}) == [["a"]]
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "e"}}) == [
        ["a", "b"],
        ["c", "d"],
    ]
    # A package face importing its submodules is no circle by itself.
    assert circles({"p": {"p.x", "p.y"}, "p.x": {"p.y"}, "p.y": set()}) == []
    # A submodule importing its own face is one.
    assert circles({"p": {"p.x"}, "p.x": {"p"}}) == [["p", "p.x"]]


def test_the_cycle_finder_handles_a_long_chain() -> None:
    chain = {f"m{i}": {f"m{i + 1}"} for i in range(5000)}
    assert circles(chain) == []
    chain["m5000"] = {"m0"}
    assert len(circles(chain)[0]) == 5001


def test_no_import_circle() -> None:
    found = circles(import_graph())
    assert found == [], f"import circles (TYPE_CHECKING imports included): {found}"


def test_a_type_only_back_edge_is_a_circle(tmp_path: Path) -> None:
    """On a copy of the tree, one import under ``TYPE_CHECKING`` from the bottom of the
    core to the cycle closes a circle, and the test's check finds it."""
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / PACKAGE, copy / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / PACKAGE / "core/model/resources.py"
    target.write_text(
        target.read_text()
        + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        + "    from queue_controller.core.cycle.admission import schedule  # noqa: F401\n"
    )
    probe = (
        "from tests.unit.test_no_import_cycles import circles, import_graph; "
        "print(circles(import_graph()))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), str(ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "queue_controller.core.model.resources" in done.stdout, done.stdout
    assert "queue_controller.core.cycle.admission" in done.stdout, done.stdout
