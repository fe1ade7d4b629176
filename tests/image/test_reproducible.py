"""Two builds from one commit and one lock install the same packages: the same ``pip freeze``
inside both images, and every version the one that uv.lock pins."""

from __future__ import annotations

import subprocess
import tomllib

import pytest

from tests.image.conftest import ROOT, Image, build

pytestmark = pytest.mark.image


def pip_freeze(image: str) -> list[str]:
    container = subprocess.run(
        ["buildah", "from", image], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        frozen = subprocess.run(
            [
                "buildah",
                "run",
                "--isolation",
                "chroot",
                "--user",
                "65532:65532",
                container,
                "--",
                "pip",
                "freeze",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    return frozen.stdout.splitlines()


def locked_versions() -> dict[str, set[str]]:
    """Each package's versions in the lock: one, or several where the universal lock forks
    by Python version (numpy for 3.11 and for 3.12 and later, say)."""
    with (ROOT / "uv.lock").open("rb") as lock:
        packages = tomllib.load(lock)["package"]
    versions: dict[str, set[str]] = {}
    for package in packages:
        if "version" in package:
            versions.setdefault(package["name"], set()).add(package["version"])
    return versions


def test_a_second_build_installs_exactly_the_same_packages(image: Image) -> None:
    again = build(image="queue-controller-rebuild")
    try:
        first, second = pip_freeze(image.name), pip_freeze(again)
    finally:
        subprocess.run(["buildah", "rmi", again], capture_output=True, check=False)
    assert first == second
    locked = locked_versions()
    # Our own package is installed from its wheel file: "queue-controller @ file:///...whl".
    ours = [line for line in first if " @ " in line]
    assert len(ours) == 1, ours
    assert ours[0].startswith("queue-controller @ "), ours
    (version,) = locked["queue-controller"]
    assert f"queue_controller-{version}-" in ours[0]
    installed = dict(line.split("==", 1) for line in first if line not in ours)
    normalise = str.maketrans("_.", "--")
    names = {name: name.lower().translate(normalise) for name in installed}
    for name, installed_version in installed.items():
        assert installed_version in locked[names[name]], name
    # The runtime dependencies, and nothing of the dev extra (pytest, mypy, uv ...).
    assert "pytest" not in names.values()
    assert "uv" not in names.values()
    assert {"kopf", "kubernetes", "pydantic", "sqlalchemy"} <= set(names.values())
