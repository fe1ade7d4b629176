"""Print uv's pip requirement, pinned to the version and wheel hashes that uv.lock holds.

The Makefile bootstraps a new .venv with it: pip installs uv with ``--require-hashes``, and uv
then installs everything else from the same lock. So the one lock pins the installer too, and
no unpinned download ever enters the environment.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

LOCK = Path(__file__).resolve().parents[2] / "uv.lock"


def main() -> int:
    with LOCK.open("rb") as lock:
        packages = tomllib.load(lock)["package"]
    found = [p for p in packages if p["name"] == "uv"]
    if not found:
        print(f"{LOCK}: no uv package in the lock (is uv still a dev dependency?)", file=sys.stderr)
        return 1
    uv = found[0]
    hashes = " ".join(f"--hash={wheel['hash']}" for wheel in uv["wheels"])
    print(f"uv=={uv['version']} {hashes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
