"""What a run cost: the queueing system's CPU and memory, and API requests by client.

CPU and peak RSS come from /proc of the system's process (user + system time of all its
threads; VmHWM, the kernel's own high-water mark of resident memory), read just before
it is stopped.  Requests come from the API server's audit log: ``apiserver_request_total``
has no client label, and every component here uses one admin identity, so the user
agent is what tells them apart.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tests.bench.e2e.apiwatch import USER_AGENT

# Logged once each, when the response is complete (a watch: when it ends); the node
# leases kwok renews for every node are left out, as are health probes.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  namespaces: [kube-node-lease]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/metrics", "/version"]
- level: Metadata
"""
PYTHON_CLIENT = "OpenAPI-Generator"  # the kubernetes Python client's default user agent


@dataclass(frozen=True)
class ProcessCost:
    cpu_seconds: float
    peak_rss_bytes: int
    rss_bytes: int = 0  # resident now (VmRSS): the over-time plot's


def process_cost(pid: int) -> ProcessCost | None:
    """CPU seconds (user + system) and peak RSS of a live process; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: count fields after its closing ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)

    def kib(field: str) -> int:
        return next(
            (int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith(field)),
            0,
        )

    return ProcessCost(round(ticks / os.sysconf("SC_CLK_TCK"), 2), kib("VmHWM:"), kib("VmRSS:"))


def client_of(user_agent: str) -> str:
    """A short client name from a user agent: ``kube-scheduler/v1.35.0 (linux/amd64) ...``
    -> ``kube-scheduler``; the Python client's default -> ``python-client``."""
    name = user_agent.split("/", 1)[0].strip() or "unknown"
    return "python-client" if name == PYTHON_CLIENT else name


def requests_by_client(audit_log: Path, since: float | None = None) -> dict[str, int] | None:
    """Requests per client in an audit log, those completed at or after ``since`` (a Unix
    time: the cluster's own start-up, node creation included, is nobody's cost); None if
    there is no log."""
    if not audit_log.exists():
        return None
    counts: Counter[str] = Counter()
    with audit_log.open(errors="replace") as handle:
        for line in handle:
            try:
                event = json.loads(line)
                stamp = event.get("stageTimestamp")
                if (
                    since is not None
                    and stamp
                    and datetime.fromisoformat(stamp).timestamp() < since
                ):
                    continue
            except ValueError:
                continue  # a line cut short as the server stopped
            counts[client_of(str(event.get("userAgent", "")))] += 1
    return dict(counts.most_common())


def per_gang(
    counts: dict[str, int] | None, admitted: int, system_clients: tuple[str, ...]
) -> dict[str, object]:
    """Requests per admitted gang: the system's own clients, everything but this harness,
    and each client."""
    if counts is None or admitted == 0:
        return {"system": None, "total": None, "by_client": counts or {}, "admitted": admitted}
    system = sum(counts.get(c, 0) for c in system_clients) if system_clients else None
    total = sum(n for c, n in counts.items() if c != USER_AGENT)
    return {
        "system": None if system is None else round(system / admitted, 2),
        "total": round(total / admitted, 2),
        "by_client": {c: round(n / admitted, 2) for c, n in counts.items()},
        "admitted": admitted,
    }
