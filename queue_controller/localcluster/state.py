"""What a local cluster records and how its processes are told apart: the layout of its
files, the state kept in ``state.json`` (PIDs, ports, what runs), and the checks that a
PID is still the process it was (PIDs get reused)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    """Where the binaries, the kwok stages and the state live."""

    bin_dir: Path
    state_dir: Path
    stages: Path

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def lock_file(self) -> Path:
        return self.state_dir.with_name(self.state_dir.name + ".lock")

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def absolute(self) -> Layout:
        """The same layout with absolute paths: each component runs in the state directory."""
        return Layout(self.bin_dir.resolve(), self.state_dir.resolve(), self.stages.resolve())


@dataclass
class State:
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    nodes: int = 0
    started: float = 0.0
    startup_seconds: float = 0.0
    # A controller started by `make run` (a Python process, told by its command line).
    controller_pid: int | None = None
    # The API server's audit policy, if it keeps an audit log (kept for `restart`).
    audit_policy: str | None = None
    # Workload operators running against it (operators.py), by name; their PIDs are
    # in ``pids`` under their binaries' names.
    operators: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> State | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))


@dataclass(frozen=True)
class Status:
    running: dict[str, bool]
    state: State | None

    @property
    def up(self) -> bool:
        return bool(self.running) and all(self.running.values())

    @property
    def partly_up(self) -> bool:
        return any(self.running.values()) and not self.up


def free_ports(names: Iterable[str]) -> dict[str, int]:
    """A free loopback port for each name, all different.

    Every socket stays bound until all are chosen: asked one at a time, the kernel may
    hand out a port it has just freed again, and two components would then race for
    one port (the second dies with "address already in use").
    """
    with contextlib.ExitStack() as stack:
        ports = {}
        for name in names:
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports[name] = int(sock.getsockname()[1])
        return ports


CONTROLLER_MARKER = ("queue_controller", "run")


def controller_alive(pid: int | None) -> bool:
    """Whether ``pid`` is a `queue-controller run` started for this cluster."""
    if pid is None:
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    words = [a.decode(errors="replace") for a in argv]
    return all(any(marker in word for word in words) for marker in CONTROLLER_MARKER)


def ours(pid: int, binary: Path) -> bool:
    """Whether ``pid`` is alive and still runs ``binary`` (PIDs get reused)."""
    try:
        exe = Path(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return False
    return exe.name.removesuffix(" (deleted)") == binary.name and exe.parent == binary.parent
