"""The Job and Pod watch streams that feed a Recorder, from outside every system.

One thread per stream, each with its own API client (user agent ``bench-e2e``, so the
audit log tells the harness's own requests from the system's).  Objects arrive as plain
dicts: deserializing thousands of pod updates into client models would cost the 2-core
machine more than the systems under test.  A stream that breaks (timeout, 410 Gone, the
API server busy) lists again and carries on; a list's items are taken as events.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.bench.e2e.watch import Recorder

USER_AGENT = "bench-e2e"
JOB_LABEL = "batch.kubernetes.io/job-name"
Clock = Callable[[], float]


def api_client(kubeconfig: Path) -> client.ApiClient:
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    api.user_agent = USER_AGENT
    return api


def _condition(obj: dict[str, Any], kind: str) -> bool:
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


class ApiWatch:
    def __init__(
        self, kubeconfig: Path, recorder: Recorder, clock: Clock, namespaces: set[str]
    ) -> None:
        self.kubeconfig, self.recorder, self.clock = kubeconfig, recorder, clock
        self.namespaces = namespaces
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[watch.Watch] = []
        self.restarts = 0

    def start(self) -> None:
        jobs = client.BatchV1Api(api_client(self.kubeconfig))
        pods = client.CoreV1Api(api_client(self.kubeconfig))
        streams: list[tuple[str, Callable[..., Any], Callable[[dict[str, Any], bool], None]]] = [
            ("jobs", jobs.list_job_for_all_namespaces, self._job),
            ("pods", pods.list_pod_for_all_namespaces, self._pod),
        ]
        for name, lister, handle in streams:
            thread = threading.Thread(
                target=self._run, args=(lister, handle), name=f"watch-{name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for stream in self._watches:
            stream.stop()  # type: ignore[no-untyped-call]
        for thread in self._threads:
            thread.join(timeout=10)

    # -- handlers ---------------------------------------------------------------------

    def _job(self, obj: dict[str, Any], deleted: bool) -> None:
        meta = obj["metadata"]
        if meta["namespace"] not in self.namespaces or deleted:
            return
        complete = _condition(obj, "Complete") or _condition(obj, "Failed")
        self.recorder.job(
            f"{meta['namespace']}/{meta['name']}",
            self.clock(),
            suspended=bool(obj.get("spec", {}).get("suspend")),
            complete=complete,
        )

    def _pod(self, obj: dict[str, Any], deleted: bool) -> None:
        meta = obj["metadata"]
        job = (meta.get("labels") or {}).get(JOB_LABEL)
        if job is None or meta["namespace"] not in self.namespaces:
            return
        phase = obj.get("status", {}).get("phase")
        self.recorder.pod(
            f"{meta['namespace']}/{job}",
            meta["name"],
            self.clock(),
            bound=bool(obj.get("spec", {}).get("nodeName")),
            running=phase in ("Running", "Succeeded"),
            done=deleted or phase in ("Succeeded", "Failed"),
            gated=bool(obj.get("spec", {}).get("schedulingGates")),
        )

    # -- the stream loop --------------------------------------------------------------

    def _run(
        self, lister: Callable[..., Any], handle: Callable[[dict[str, Any], bool], None]
    ) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = json.loads(lister(_preload_content=False).data)
                    for item in listed["items"]:
                        handle(item, False)
                    version = listed["metadata"]["resourceVersion"]
                stream = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
                self._watches.append(stream)
                for event in stream.stream(  # type: ignore[no-untyped-call]
                    lister,
                    resource_version=version,
                    timeout_seconds=60,
                    allow_watch_bookmarks=True,
                ):
                    if self._stop.is_set():
                        break
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        version = None  # 410 Gone and the like: list again
                        break
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        handle(obj, event["type"] == "DELETED")
                self._watches.remove(stream)
            except ApiException as error:
                if error.status == 410:
                    version = None
                self.restarts += 1
                time.sleep(0.5)
            except Exception:  # the API server restarting or refusing: try again
                if self._stop.is_set():
                    return
                self.restarts += 1
                time.sleep(0.5)
