"""``queue-controller check``, run in the background through every cluster test.

Each test that runs the controller is watched: once a second the checker looks
at the test's namespace and the cluster-scoped objects (Nodes, TeamQuotas,
Cohorts, PriorityClasses) and records any broken invariant, and the test fails
at teardown if one was seen.  A test that breaks an invariant on purpose says
so with ``@pytest.mark.breaks_invariants("why")``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from queue_controller.check import Timing, Violation, look
from queue_controller.kube import kinds
from queue_controller.kube.credentials import api_client
from queue_controller.kube.fields import describe
from queue_controller.kube.gateway import Gateway, GatewayError
from queue_controller.kube.snapshot import Located

# The controller under test ticks every 5 s; on a loaded 2-core CI machine a cycle's
# writes can lag, so the checker allows two.
TIMING = Timing(cycle_seconds=10, pods_ready_timeout_seconds=300)
# A violation counts once it has held this long, look after look.  What the objects
# cannot date has a blind window: a member the pod GC deleted is simply gone until
# the Job controller makes its replacement (a second or two), and until then the gang
# looks partly placed since it started.  A real breach outlasts the window.
PERSISTS_SECONDS = 5.0


class BackgroundCheck:
    def __init__(self, kubeconfig: Path, namespace: str, *, interval: float = 1.0) -> None:
        self.gateway = Gateway(api_client(kubeconfig))
        self.namespace = namespace
        self.interval = interval
        self.seen: dict[tuple[str, tuple[str, ...]], Violation] = {}
        self._first: dict[tuple[str, tuple[str, ...]], float] = {}
        self.looks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="invariants", daemon=True)

    def __enter__(self) -> BackgroundCheck:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _objects(self) -> list[Located]:
        out = []
        for resource in kinds.WATCHED:
            for obj in self.gateway.list(resource):
                namespace = obj.get("metadata", {}).get("namespace")
                if resource.namespaced and namespace != self.namespace:
                    continue
                out.append(Located(describe(obj), obj))
        return out

    def look_once(self) -> None:
        try:
            objects = self._objects()
        except GatewayError:
            return  # the API server restarting in a test: look again next time
        now = time.time()
        found = {v.key: v for v in look(objects, now=now, timing=TIMING).violations}
        self._first = {key: self._first.get(key, now) for key in found}
        for key, violation in found.items():
            if now - self._first[key] >= PERSISTS_SECONDS:
                self.seen.setdefault(key, violation)
        self.looks += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.look_once()
