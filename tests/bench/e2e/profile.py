"""``--profile``: where the controller's CPU time and memory go during a benchmark run.

CPU: py-spy samples the running controller from outside, changing nothing in it, while
the run is measured: a flame graph (``profile-cpu.svg``) and the same samples for
speedscope (``profile-cpu.speedscope.json``; open it at https://www.speedscope.app).

Memory: the controller runs under memray, which records every allocation.  Once it has
exited, the allocations that were live at its peak are written as a flame graph
(``profile-memory.html``) and as text, the largest sites first
(``profile-memory-peak.txt``: memray's ``tree`` report).

A profiled run is slower, and memray holds memory of its own: its CPU seconds and peak
RSS are not the benchmark's figures.  Compare runs made without ``--profile``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CPU_SVG = "profile-cpu.svg"
CPU_SPEEDSCOPE = "profile-cpu.speedscope.json"
MEMORY_CAPTURE = "profile-memory.bin"
MEMORY_HTML = "profile-memory.html"
MEMORY_PEAK = "profile-memory-peak.txt"
# Samples a second: enough for a run of minutes, little enough not to slow it much.
RATE = 50
# memray writes its capture when the process exits; a large one takes a while.
EXIT_SECONDS = 180.0


def memray_launcher(folder: Path) -> tuple[str, ...]:
    """How to start the controller under memray (``python -m memray run ... -m pkg``)."""
    capture = folder.resolve() / MEMORY_CAPTURE
    return (sys.executable, "-m", "memray", "run", "--force", "--output", str(capture))


def _py_spy() -> str:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else "py-spy"


@dataclass
class CpuProfile:
    """Two py-spy samplers of one process, one per output format.  ``--nonblocking``:
    they read its memory without stopping it, so two can run at once."""

    folder: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def start(cls, pid: int, folder: Path) -> CpuProfile:
        profile = cls(folder)
        for fmt, name in (("flamegraph", CPU_SVG), ("speedscope", CPU_SPEEDSCOPE)):
            command = [
                _py_spy(), "record", "--pid", str(pid), "--rate", str(RATE), "--nonblocking",
                "--format", fmt, "--output", str(folder / name),
            ]  # fmt: skip
            log = (folder / f"py-spy-{fmt}.log").open("wb")
            profile.processes.append(
                subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            )
            log.close()
        return profile

    def stop(self) -> list[Path]:
        """Stop sampling (py-spy writes its output on SIGINT); the files written."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in self.processes:
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
        written = [p for p in (self.folder / CPU_SVG, self.folder / CPU_SPEEDSCOPE) if p.exists()]
        for path in written:
            relative_paths(path, self.folder)
        return written


# The repository: profiles name its files, and their own folder, relative to it.
REPOSITORY = Path(__file__).resolve().parents[3]


def relative_paths(path: Path, folder: Path) -> None:
    """Rewrite ``path`` so that it names no absolute path of this machine: its own folder
    (py-spy writes its command line into the flame graph) and the repository (every
    frame's file) become relative, as committed reports must be."""
    text = path.read_text(errors="replace")
    fixed = text.replace(f"{folder.resolve()}/", "").replace(f"{REPOSITORY}/", "")
    if fixed != text:
        path.write_text(fixed)


def _alive(pid: int) -> bool:
    """Running: not gone, and not a zombie waiting for its parent (this process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def stop_process(pid: int, timeout: float = EXIT_SECONDS) -> bool:
    """SIGTERM, then wait for it to go (memray writes its capture as it exits)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        if not _alive(pid):
            return True
        time.sleep(0.2)
    return False


def _ours(stack: list[tuple[str, str, int]]) -> str:
    """The innermost frame of the stack in our own package (who asked for the bytes),
    else the innermost frame."""
    for function, path, line in stack:
        if "/queue_controller/" in path:
            return f"{path.rpartition('/queue_controller/')[2]}:{line} {function}"
    function, path, line = stack[0] if stack else ("?", "?", 0)
    return f"{path}:{line} {function}"


def memory_report(folder: Path, top: int = 25) -> list[str]:
    """The peak's flame graph (memray's HTML), and its largest sites as text, read with
    memray's own reader: first by our innermost frame (who asked), then the biggest
    stacks.  Returns the text's lines."""
    import memray  # a dev dependency, needed only with --profile

    capture = folder / MEMORY_CAPTURE
    if not capture.exists():
        return [f"no memory capture at {capture}"]
    subprocess.run(
        [sys.executable, "-m", "memray", "flamegraph", "--force", "--output",
         str(folder / MEMORY_HTML), str(capture)],
        check=False,
        capture_output=True,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    reader = memray.FileReader(str(capture))
    records = list(reader.get_high_watermark_allocation_records(merge_threads=True))
    peak = reader.metadata.peak_memory
    by_site: dict[str, int] = {}
    stacks = []
    for record in records:
        stack = record.stack_trace(max_stacks=8)
        by_site[_ours(stack)] = by_site.get(_ours(stack), 0) + record.size
        stacks.append((record.size, record.n_allocations, stack))
    mib = 2**20
    lines = [f"peak: {peak / mib:.1f} MiB live in {len(records):,} allocation sites", ""]
    lines.append("by our innermost frame (who asked for the bytes):")
    for site, size in sorted(by_site.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {size / mib:8.1f} MiB  {100 * size / max(peak, 1):5.1f}%  {site}")
    lines += ["", "biggest stacks (innermost frame first):"]
    for size, count, stack in sorted(stacks, key=lambda s: -s[0])[:top]:
        lines.append(f"  {size / mib:8.1f} MiB in {count:,} allocations")
        lines += [f"      {path}:{line} {function}" for function, path, line in stack[:6]]
    (folder / MEMORY_PEAK).write_text("\n".join(lines) + "\n")
    for path in (folder / MEMORY_PEAK, folder / MEMORY_HTML):
        if path.exists():
            relative_paths(path, folder)
    return lines
