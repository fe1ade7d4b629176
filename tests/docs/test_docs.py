"""The documentation keeps up with the code, and nothing committed names a machine's paths.

`make docs-check` (``mkdocs build --strict``) fails on a broken link or anchor between pages and
on a page left out of the navigation.  These tests hold what it cannot see:

* every package of ``queue_controller/`` is on the architecture page (a new package fails until
  it is described there);
* every stable reason of the core is in ``plan``'s table of them;
* every repository path a page writes as code (pages cannot link outside ``docs/``) exists;
* the README opens with the two commands, stays short, and its links resolve;
* no text file under ``examples/`` or ``docs/``, nor the README, names an absolute path of the
  machine that wrote it (reports name their inputs relative to the repository).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from queue_controller.core import Reason

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
ARCHITECTURE = DOCS / "architecture.md"
PACKAGE = ROOT / "queue_controller"

README_MAX_LINES = 250
TWO_COMMANDS = (
    "# queue-controller\n"
    "\n"
    "```sh\n"
    "make run    # a local GPU cluster + the controller: example gangs queued and admitted, "
    "watched live\n"
    "make test   # everything: ruff, mypy --strict, import-linter, the docs, unit, PostgreSQL, "
    "cluster and image tests\n"
    "```\n"
)

# Absolute paths that only exist on the machine that wrote them: home and work directories,
# pytest's and tempfile's temporary directories, a Windows drive.  The look-behind keeps
# ``https://example.com/home/`` and ``../shared`` out.
MACHINE_PATH = re.compile(
    r"(?<![\w.~/-])"
    r"(?:/work/|/home/|/Users/|/root/|/tmp/pytest|/tmp/tmp|/private/var/|/var/folders/"
    r"|[A-Za-z]:\\)"
)


def packages() -> list[str]:
    """Every package under queue_controller/ (a directory with an __init__.py), slash-named."""
    return sorted(
        init.parent.relative_to(ROOT).as_posix()
        for init in PACKAGE.rglob("__init__.py")
        if init.parent != PACKAGE and "__pycache__" not in init.parts
    )


def names_package(text: str, package: str) -> bool:
    """Whether ``text`` names ``package`` itself: ``queue_controller/kube/kinds`` or
    ``queue_controller.kube.kinds``, not a module of the same name (``.../model.py``)."""
    slash = re.escape(package) + r"/?(?![\w.])"
    dotted = re.escape(package.replace("/", ".")) + r"(?![\w]|\.\w)"
    return re.search(rf"(?<![\w./])(?:{slash}|{dotted})", text) is not None


def section(markdown: str, heading: str) -> str:
    """The text under ``heading`` (a line of its own), up to the next heading of its level."""
    level = heading.split(" ")[0]
    start = markdown.index(f"\n{heading}\n") + len(heading) + 2
    end = markdown.find(f"\n{level} ", start)
    return markdown[start : end if end >= 0 else len(markdown)]


@pytest.mark.parametrize("package", packages())
def test_every_package_is_on_the_architecture_page(package: str) -> None:
    layers = section(ARCHITECTURE.read_text(), "## Packages and their layers")
    assert names_package(layers, package), (
        f"{package} is a package, but docs/architecture.md does not describe it: add it to the "
        "table of packages and their layers"
    )


def test_the_package_names_are_matched_as_packages() -> None:
    assert names_package("| `queue_controller/kube/kinds` | 5 |", "queue_controller/kube/kinds")
    assert names_package("see queue_controller.kube.kinds.", "queue_controller/kube/kinds")
    assert not names_package("`queue_controller/core/model.py`", "queue_controller/core/model")
    assert not names_package("`queue_controller/kube/kindsx`", "queue_controller/kube/kinds")
    assert not names_package("queue_controller.core.model.Workload", "queue_controller/core/model")
    assert packages(), "no package found under queue_controller/"
    assert "queue_controller/kube/kinds" in packages()


def test_plan_page_lists_every_stable_reason() -> None:
    table = section((DOCS / "plan.md").read_text(), "## Stable reasons")
    # | Decision | Reason | Meaning |: the reasons are the code spans of the second column.
    listed = {
        name
        for row in table.splitlines()
        if row.startswith("| ")
        for name in re.findall(r"`(\w+)`", row.split("|")[2])
    }
    missing = [reason.value for reason in Reason if reason.value not in listed]
    assert not missing, f"docs/plan.md's stable reasons lack {missing}"


def repository_paths(text: str) -> Iterator[str]:
    """The repository paths a page writes as code: `examples/jobs.yaml`, `tests/cluster/`."""
    for match in re.finditer(
        r"`((?:queue_controller|tests|examples|deploy|crds|policies)/[^`\s]*)`", text
    ):
        path = match.group(1).split("#")[0]
        if not re.search(r"[<>*{}]", path):  # a pattern such as kube/kinds/<kind>.py
            yield path


def test_every_repository_path_in_the_docs_exists() -> None:
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in sorted(DOCS.glob("*.md"))
        for path in repository_paths(page.read_text())
        if not (ROOT / path).exists()
    ]
    assert not missing, "pages name repository paths that do not exist:\n" + "\n".join(missing)


def test_readme_opens_with_the_two_commands_and_stays_short() -> None:
    text = README.read_text()
    assert text.startswith(TWO_COMMANDS)
    lines = text.count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to a page "
        "under docs/ and link to it"
    )


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found, fenced = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6} (.*)", line)):
            found.add(github_anchor(heading.group(1)))
    return found


def test_readme_links_resolve() -> None:
    text = README.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else README
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no such heading in {file.relative_to(ROOT)}")
    assert not broken, "README.md links that do not resolve:\n" + "\n".join(broken)


def text_files(*roots: Path) -> Iterator[Path]:
    """The text files under ``roots`` (files themselves, or folders walked without following
    links, so docs/assets/examples is not read twice)."""
    for root in roots:
        if root.is_file():
            yield root
            continue
        for folder, _, names in os.walk(root):
            for name in sorted(names):
                path = Path(folder) / name
                if path.is_symlink():
                    continue
                data = path.read_bytes()
                if b"\0" in data:
                    continue
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    continue
                yield path


def machine_paths(files: Iterable[Path], base: Path) -> list[str]:
    """``file:line: text`` for every line that names an absolute path of a machine."""
    found = []
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(base)}:{number}: {line.strip()}")
    return found


def test_no_machine_paths_in_examples_docs_or_readme() -> None:
    found = machine_paths(text_files(ROOT / "examples", DOCS, README), ROOT)
    assert not found, (
        "absolute machine paths in committed text (name inputs relative to the repository, "
        "such as ../shared/data/openb):\n" + "\n".join(found)
    )


def test_the_machine_path_scan_finds_them(tmp_path: Path) -> None:
    (tmp_path / "report.md").write_text(
        "- Trace: openb (../shared/data/openb), seed 1\n"
        "see https://example.com/home/page and ~/work/x\n"
        "- Trace: openb (/work/shared/data/openb), seed 1\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "run.json").write_text(
        '{"out": "C:\\\\Users\\\\me", "t": "/tmp/pytest-of-x"}\n'
    )
    (tmp_path / "plot.png").write_bytes(b"\x89PNG\0/home/x")
    assert machine_paths(text_files(tmp_path), tmp_path) == [
        "report.md:3: - Trace: openb (/work/shared/data/openb), seed 1",
        'sub/run.json:1: {"out": "C:\\\\Users\\\\me", "t": "/tmp/pytest-of-x"}',
    ]
