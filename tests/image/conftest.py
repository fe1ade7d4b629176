"""Fixtures for the tests of the container image (``make image-test``, part of ``make test``).

The image is built once per session with ``deploy/image/build.sh`` (``make image``), which
installs buildah from Debian where no builder is found and it may (root with apt-get). With
no builder, every test here is skipped, and the reason is printed in pytest's summary.

These tests start their own local cluster (the ``cluster`` fixture of tests/cluster): the
controller they run from the image must be the only one admitting there.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cluster.conftest import cluster, crds, namespace  # noqa: F401  (fixtures, shared)

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "image" / "build.sh"


@dataclass(frozen=True)
class Image:
    """A built image: its name as the builder stores it, and the builder."""

    name: str
    builder: str


def build(*, image: str = "queue-controller") -> str:
    """Run ``make image``'s script; the image's tag. Fails the test with the script's own
    words when the build fails."""
    result = subprocess.run(
        [str(BUILD)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, "IMAGE": image, "BUILDER": "buildah"},
    )
    if result.returncode != 0:
        pytest.fail(f"make image failed:\n{result.stderr}")
    print(result.stderr)  # the build's time and size, for the log
    return f"localhost/{result.stdout.strip().splitlines()[-1]}"


@pytest.fixture(scope="session")
def image() -> Iterator[Image]:
    """The image, built from this checkout; skipped (with why) where buildah cannot be had.

    The tests run the image with ``buildah run``, so they need buildah itself even where
    docker or podman could build it. QC_TEST_IMAGE names an image already built (from this
    checkout) to use instead, to iterate on these tests."""
    if built := os.environ.get("QC_TEST_IMAGE"):
        yield Image(built, "buildah")
        return
    found = subprocess.run(
        [str(BUILD), "--builder", "--install-builder"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "BUILDER": "buildah"},
    )
    if found.returncode != 0:
        pytest.skip(f"no image tests: {found.stderr.strip()}")
    yield Image(build(), "buildah")
