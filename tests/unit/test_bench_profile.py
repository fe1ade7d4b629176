"""`make bench-e2e ... --profile` (tests/bench/e2e/profile.py) on a small process of its own:
py-spy samples it from outside while memray records it, and the memory report names the
line that held the bytes at the peak."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.bench.e2e import profile

BUSY = """
import time
held = []
end = time.time() + 6
while time.time() < end:
    held.append(bytearray(100_000))  # the peak's bytes: about 10 MB held at once
    if len(held) > 100:
        del held[:50]
    sum(range(10_000))
"""


def test_a_profiled_process_gives_cpu_profiles_and_its_memory_peak(tmp_path: Path) -> None:
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    process = subprocess.Popen(
        [*profile.memray_launcher(tmp_path), str(script)], stdout=subprocess.DEVNULL
    )
    try:
        time.sleep(1.0)
        cpu = profile.CpuProfile.start(process.pid, tmp_path)
        time.sleep(2.0)
        written = cpu.stop()
        assert profile.stop_process(process.pid, timeout=30)
    finally:
        process.kill()
        process.wait()
    assert {p.name for p in written} == {profile.CPU_SVG, profile.CPU_SPEEDSCOPE}
    assert "busy.py" in (tmp_path / profile.CPU_SPEEDSCOPE).read_text()
    lines = profile.memory_report(tmp_path, top=5)
    assert lines[0].startswith("peak: ")
    top_site = lines[3]  # the first line under "by our innermost frame"
    assert "busy.py:6 <module>" in top_site, "\n".join(lines)
    assert (tmp_path / profile.MEMORY_HTML).exists()
    assert (tmp_path / profile.MEMORY_PEAK).read_text().startswith("peak: ")
    # Reports are committed: none names the folder it was written in, nor the checkout.
    for name in (profile.CPU_SVG, profile.CPU_SPEEDSCOPE, profile.MEMORY_PEAK):
        text = (tmp_path / name).read_text(errors="replace")
        assert f"{tmp_path.resolve()}/" not in text, name
        assert f"{profile.REPOSITORY}/" not in text, name
