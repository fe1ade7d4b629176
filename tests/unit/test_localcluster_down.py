"""`local-cluster down` stops a controller that `make run` started, and only that."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from queue_controller.localcluster.cluster import LocalCluster
from queue_controller.localcluster.state import Layout, State


def _layout(tmp_path: Path) -> Layout:
    return Layout(bin_dir=tmp_path / "bin", state_dir=tmp_path / "state", stages=tmp_path)


def _sleeper(*argv: str) -> subprocess.Popen[bytes]:
    # The trailing words are what tells a controller apart: `... queue_controller ... run`.
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *argv])
    # Popen returns as soon as exec starts; the kernel shows the new command line a
    # moment later (under load, long enough for a test to read an empty one).
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 10
    while b"time.sleep" not in cmdline.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    return process


def test_down_stops_the_recorded_controller_and_removes_the_state(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    layout.state_dir.mkdir()
    controller = _sleeper("queue_controller", "run")
    try:
        State(controller_pid=controller.pid).save(layout.state_file)
        stopped = LocalCluster(layout, report=lambda _: None).down()
        assert stopped == ["queue-controller"]
        assert controller.wait(timeout=5) == -15  # SIGTERM, not SIGKILL
        assert not layout.state_dir.exists()
    finally:
        controller.kill()


def test_down_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    layout.state_dir.mkdir()
    stranger = _sleeper("something-else")
    try:
        State(controller_pid=stranger.pid).save(layout.state_file)
        assert LocalCluster(layout, report=lambda _: None).down() == []
        assert stranger.poll() is None
    finally:
        stranger.kill()
