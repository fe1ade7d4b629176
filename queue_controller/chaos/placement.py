"""partial-placement: stop some members of an admitted gang from ever starting.

Two ways, chosen from the pods at hand (:func:`~.confirm.choose_method`):

* ``taint``: taint the members' planned nodes NoSchedule and delete those already
  there, so that their replacements meet the taint;
* ``placeholder``: for members that tolerate that taint (``tolerations:
  [{operator: Exists}]`` is common on GPU nodes), a pod outside any queue takes the
  GPUs they were planned on.  It is created first, pending (it asks for the GPUs the
  node has free once the members there are gone, and only the scheduler places it),
  and the members are deleted after: it has waited longer than their replacements,
  which are made only then and are held by the admission gate until the controller
  releases them, so it gets the GPUs first.  The node is never over-committed.

Either way the run then confirms that the fault took hold (:mod:`.confirm`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from queue_controller.chaos.confirm import MethodName, NotInjected, choose_method
from queue_controller.chaos.experiments import (
    GPU,
    Injection,
    create_placeholder,
    free_gpus,
    holding,
    too_many,
)
from queue_controller.chaos.marks import TAINT_KEY, Marks
from queue_controller.chaos.observe import GangSeen, Member
from queue_controller.errors import InputError
from queue_controller.kube import gateway as gw
from queue_controller.kube.fields import Obj, get, objects

# How long a placeholder may take to be placed once the members on its node are deleted
# (they go first: a deletion's grace period, then the scheduler's next try).
PLACED_SECONDS = 90.0


def _tolerations(gang: GangSeen, chosen: Sequence[Member]) -> list[Mapping[str, object]]:
    """What the stopped members, and the replacements their head makes, tolerate."""
    own = [dict(t) for m in chosen for t in m.tolerations]
    template = [t for spec in gang.pod_specs for t in objects(spec, "tolerations")]
    return [*own, *template]


def waiting_placeholder(name: str, node: str, gpus: int) -> dict[str, Any]:
    """A pod outside any queue that only the scheduler places, and only on ``node``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            # No priorityClassName: the namespace's default (0 where none is global), so
            # it preempts nothing of the gang's priority or above (preemptionPolicy itself
            # comes only from a PriorityClass).
            "tolerations": [{"operator": "Exists"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node]}
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "placeholder",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}},
                }
            ],
        },
    }


def partial_placement(
    gang: GangSeen,
    *,
    members: int,
    run: str = "<run>",
    nodes: Mapping[str, Obj] | None = None,
    pods: Sequence[Obj] = (),
    method: MethodName | None = None,
    placeholder_namespace: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Injection:
    """Plan stopping ``members`` members; ``nodes`` and ``pods`` (as listed now) size the
    placeholders in the plan's steps, ``method`` forces one way, and the placeholders go
    in ``placeholder_namespace`` (default: the gang's)."""
    holding(gang)
    live = gang.live
    if not 1 <= members < len(live):
        raise InputError(
            f"--members must be at least 1 and fewer than the gang's {len(live)} live members",
            field="--members",
        )
    # Members not running yet first: stopping them costs the Job no failure.
    chosen = sorted(live, key=lambda m: (m.phase == "Running", m.name))[:members]
    others = {m.node for m in live if m not in chosen and m.node}
    targets = {m.node for m in chosen if m.node}
    if any(not m.node for m in chosen):
        free = {n for n in gang.placement if n not in others}
        targets |= free or set(gang.placement)
    bound = [m for m in chosen if m.node]
    too_many(gang, len(bound), field="--members")
    taint = {"key": TAINT_KEY, "value": run, "effect": "NoSchedule"}
    chosen_method = choose_method(_tolerations(gang, chosen), taint, forced=method)
    kept = frozenset(m.name for m in live if m not in chosen)
    order = sorted(targets)
    if chosen_method.name == "taint":
        steps = [f"taint Node {n} {TAINT_KEY}=<run>:NoSchedule" for n in order]
        steps += [
            f"delete Pod {gang.namespace}/{m.name} on {m.node}: its replacement meets the taint"
            for m in bound
        ]

        def act(marks: Marks) -> None:
            for node in order:
                marks.taint(node)
            for member in bound:
                marks.gateway.delete(gw.POD, gang.namespace, member.name)

    else:
        where = placeholder_namespace or gang.namespace
        names = {n: f"chaos-{run}-{i}"[:63] for i, n in enumerate(order)}
        leaving = {n: [f"{gang.namespace}/{m.name}" for m in bound if m.node == n] for n in order}
        steps = []
        for node in order:
            known = (nodes or {}).get(node)
            size = f" ({free_gpus(known, pods, leaving=leaving[node])} now)" if known else ""
            steps.append(
                f"create placeholder Pod {where}/{names[node]} (outside any queue, "
                f"for Node {node} only), asking for every GPU free there once the members "
                f"there are gone{size}"
            )
        steps += [
            f"delete Pod {gang.namespace}/{m.name} on {m.node}: the placeholder takes its GPUs"
            for m in bound
        ]
        steps += [f"wait until each placeholder runs on its node (at most {PLACED_SECONDS:.0f}s)"]

        def act(marks: Marks) -> None:
            for node in order:
                _place(marks, where, names[node], node, leaving[node])
            for member in bound:
                marks.gateway.delete(gw.POD, gang.namespace, member.name)
            for node in order:
                _placed(marks.gateway, where, names[node], node, clock)

    return Injection(
        "partial-placement",
        steps,
        tuple(order),
        act,
        reasons=("PodsReadyTimeout", "MembersLost"),
        avoid=tuple(order),
        method=chosen_method.name,
        method_why=chosen_method.why,
        kept=kept,
        notes=[f"method {chosen_method.name}: {chosen_method.why}"],
    )


def _place(marks: Marks, namespace: str, name: str, node: str, leaving: list[str]) -> None:
    current = marks.gateway.get(gw.NODE, "", node)
    want = free_gpus(current, marks.gateway.list(gw.POD), leaving=leaving)
    if want <= 0:
        raise NotInjected(f"Node {node} has no GPU for a placeholder to take")
    made = create_placeholder(marks, namespace, waiting_placeholder(name, node, want))
    gates = [g.get("name", "") for g in objects(made, "spec.schedulingGates")]
    if gates:
        # A webhook holds it (a namespace whose pods are all queued): it would queue, not
        # take the GPUs.  It is deleted with the rest of the run.
        raise NotInjected(
            f"the placeholder Pod {namespace}/{name} was held by the scheduling gates "
            f"{', '.join(gates)}: pods in {namespace} are queued"
        )


def _placed(
    gateway: gw.Gateway, namespace: str, name: str, node: str, clock: Callable[[], float]
) -> None:
    until = clock() + PLACED_SECONDS
    while True:
        pod = gateway.get(gw.POD, namespace, name)
        if get(pod, "spec.nodeName", str, "") == node:
            return
        if clock() > until:
            why = next(
                (
                    str(c.get("message") or c.get("reason") or "")
                    for c in objects(pod, "status.conditions")
                    if c.get("type") == "PodScheduled"
                ),
                "",
            )
            raise NotInjected(
                f"the placeholder Pod {namespace}/{name} was not placed on {node} within "
                f"{PLACED_SECONDS:.0f}s" + (f": {why}" if why else "")
            )
        time.sleep(0.2)
