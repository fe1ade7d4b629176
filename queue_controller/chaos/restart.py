"""controller-restart: kill the controller at the moment a gang is admitted or evicted.

It waits (reading the gang five times a second) for the moment, then kills the
controller: a local process by PID (SIGKILL; it cannot start it again itself, so
``--restart-command`` does, or the operator or a supervisor), or the controller's
pods in the cluster (their Deployment creates them again).  Recovery is the gang
ending Running, admitted once: never evicted and admitted again, and check's
AdmittedTwice never firing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from queue_controller.chaos.experiments import Injection
from queue_controller.chaos.marks import Marks
from queue_controller.chaos.observe import PHASES, GangSeen, read_gang
from queue_controller.errors import InputError
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import get

DURING = ("admission", "eviction")
QUICK = 0.2


@dataclass(frozen=True)
class Target:
    """The controller: a local process, or pods in the cluster."""

    pid: int | None = None
    selector: str = ""
    namespace: str = ""

    def describe(self) -> str:
        if self.pid is not None:
            return f"PID {self.pid}"
        return f"the Pods {self.selector} in {self.namespace}"


def the_moment(gang: GangSeen, during: str, requeues_before: int) -> bool:
    """Whether the gang is where the kill should hit it."""
    if during == "admission":
        return gang.phase == "Admitted"
    evicted = gang.condition("Evicted")
    return (
        gang.requeue_count > requeues_before
        and evicted is not None
        and evicted.get("status") == "True"
    )


def controller_restart(
    gang: GangSeen,
    *,
    during: str,
    target: Target,
    pods: list[str],
    wait: float,
    restart_command: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Injection:
    """Plan the kill; ``pods`` are the controller pods a selector matches now."""
    if during not in DURING:
        raise InputError(f"--during must be one of {', '.join(DURING)}", field="--during")
    if during == "admission" and gang.phase == "Running":
        raise InputError(
            f"{gang.what} already runs: start the experiment before it is "
            "admitted (while it waits in its queue, or suspended)",
            field="--job",
        )
    if target.pid is not None:
        try:
            os.kill(target.pid, 0)
        except ProcessLookupError:
            raise InputError(f"no process {target.pid}", field="--pid") from None
        except PermissionError:
            raise InputError(f"not allowed to signal process {target.pid}", field="--pid") from None
    elif not pods:
        raise InputError(
            f"no Pod in {target.namespace} matches {target.selector}", field="--pod-selector"
        )
    moment = (
        "it is Admitted, before all its members run"
        if during == "admission"
        else "it is Evicted (by whatever evicts it)"
    )
    steps = [f"wait (at most {wait:.0f}s) until {gang.what}: {moment}"]
    if target.pid is not None:
        steps.append(f"kill the controller, PID {target.pid}, with SIGKILL")
        steps.append(
            f"run `{restart_command}` to start it again"
            if restart_command
            else "wait for the operator or a supervisor to start it again"
        )
    else:
        steps += [
            f"delete Pod {target.namespace}/{p} (its Deployment creates it again)" for p in pods
        ]
    before = gang.requeue_count

    def act(marks: Marks) -> None:
        until = clock() + wait
        seen = read_gang(marks.gateway, gang.namespace, gang.name, gang.kind)
        while not the_moment(seen, during, before):
            if clock() > until:
                raise InputError(
                    f"{gang.what} never reached the moment ({moment}) "
                    f"within {wait:.0f}s: it is {seen.phase or 'not admitted'}",
                    field="--wait",
                )
            if during == "admission" and seen.phase == "Running":
                break  # admitted and running between two reads: kill now all the same
            time.sleep(QUICK)
            seen = read_gang(marks.gateway, gang.namespace, gang.name, gang.kind)
        running = sum(1 for m in seen.live if m.phase == "Running")
        injection.steps[0] = (
            f"caught {gang.what} {seen.phase}: {len(seen.live)} members made, {running} running"
        )
        kill(marks.gateway, target)
        if target.pid is not None and restart_command:
            subprocess.Popen(
                restart_command,
                shell=True,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    expect = ("injected", "running") if during == "admission" else (*PHASES, "running")
    injection = Injection(
        "controller-restart",
        steps,
        (),
        act,
        expect=expect,
        once=during == "admission",
        notes=[
            "the controller is down until it is started again: recovery includes its start "
            "and its leader election"
        ],
    )
    return injection


def kill(gateway: gw.Gateway, target: Target) -> None:
    if target.pid is not None:
        try:
            os.kill(target.pid, signal.SIGKILL)
        except ProcessLookupError:
            raise InputError(f"process {target.pid} is gone already", field="--pid") from None
        return
    for pod in gateway.list(gw.POD, namespace=target.namespace, label_selector=target.selector):
        gateway.delete(gw.POD, target.namespace, get(pod, "metadata.name", str, ""))
