"""The experiments: what each injects into one admitted gang, and what recovery it expects.

Each is planned from one look at the gang first, so ``--dry-run`` prints the
very steps a real run takes, and it touches only the gang's own pods and the
nodes they were planned on (or the node it is given).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from queue_controller.chaos.confirm import NotInjected
from queue_controller.chaos.marks import TAINT_KEY, Marks
from queue_controller.chaos.observe import PHASES, GangSeen
from queue_controller.core.model import UnhealthyGpu
from queue_controller.core.rules import GPU_COUNT_LABEL
from queue_controller.errors import InputError
from queue_controller.kube import gateway as gw
from queue_controller.kube import nodehealth
from queue_controller.kube.fields import Obj, get, objects, strings

GPU = "nvidia.com/gpu"
# The kube-controller-manager deletes the pods of a Node that is gone only after this
# long (its pod garbage collector's quarantine, plus one of its 20 s sweeps).
POD_GC_SECONDS = 60.0


@dataclass
class Injection:
    """One experiment, planned: its steps, what it touches, and what recovery must show."""

    experiment: str
    steps: list[str]
    nodes: tuple[str, ...]  # the nodes it changes
    act: Callable[[Marks], None]
    expect: tuple[str, ...] = PHASES
    reasons: tuple[str, ...] = ()  # eviction reasons that count (empty: any)
    avoid: tuple[str, ...] = ()  # readmission must place nothing here
    margin: float = 60.0  # seconds beyond the gang's timeout that recovery may take
    # Done again at every poll: a reporter on the node may rewrite what was injected.
    keep: Callable[[Marks], None] | None = None
    once: bool = False  # the gang must never be evicted (admitted again) on the way
    method: str = ""  # how the fault is put in place, where there is a choice
    method_why: str = ""
    # The live members it leaves alone: every other one must not start (see
    # confirm.injection_state).  None: nothing to confirm beyond the act itself.
    kept: frozenset[str] | None = None
    notes: list[str] = field(default_factory=list)
    # Judged as this instead once the gang is evicted saying that no lost node of it could
    # be replaced (core's NOT_REPLACED): its domain was full, and eviction was right.
    fallback: Injection | None = None


def too_many(gang: GangSeen, deleted: int, *, field: str) -> None:
    """Refuse to delete more bound members of a Job than its backoffLimit allows: that
    would fail the Job itself, and the run would judge the Job controller, not ours.
    Other kinds' operators make deleted members again without counting a failure."""
    if gang.kind != "Job":
        return
    backoff = get(gang.head or {}, "spec.backoffLimit", int, 6)
    if deleted > backoff:
        raise InputError(
            f"deleting {deleted} bound members would fail {gang.what} "
            f"(its backoffLimit is {backoff}); raise it, or inject before its members bind",
            field=field,
        )


def holding(gang: GangSeen) -> None:
    if gang.phase not in ("Admitted", "Running"):
        raise InputError(
            f"{gang.what} is not admitted (its PodGroup is "
            f"{gang.phase or 'not made yet'}): nothing to break",
            field="--job",
        )


def gang_node(gang: GangSeen, node: str | None) -> str:
    """The node to break: the one given, or the first that holds a member."""
    on = sorted({m.node for m in gang.live if m.node})
    if node is None:
        if not on:
            raise InputError(f"{gang.what} has no member on a node", field="--job")
        return on[0]
    if node not in on:
        raise InputError(
            f"Node {node} holds no member of {gang.what} "
            f"(they are on {', '.join(on) or 'no node'})",
            field="--node",
        )
    return node


def replaces_lost_nodes(gang: GangSeen, objs: Iterable[Any]) -> bool:
    """Whether the gang's Queue, else its TeamQuota, says ``onNodeFailure: Replace``.

    ``objs``: the listed objects (``Located``, or raw objects)."""
    raw = [getattr(o, "obj", o) for o in objs]
    # Only a gang admitted with a topology request is replaced: its PodGroup records each
    # such pod set's assignment (the domain may be "", spread over top-level domains).
    if not gang.group or not (gang.group.get("status") or {}).get("topologyAssignment"):
        return False
    queue_name = get(gang.group, "spec.queue", str, "")
    queue = next(
        (
            o
            for o in raw
            if o.get("kind") == "Queue"
            and get(o, "metadata.name", str, "") == queue_name
            and get(o, "metadata.namespace", str, "") == gang.namespace
        ),
        None,
    )
    if queue is None:
        return False
    chosen = get(queue, "spec.onNodeFailure", str, "")
    if not chosen:
        team = get(queue, "spec.teamQuota", str, "")
        quota = next(
            (
                o
                for o in raw
                if o.get("kind") == "TeamQuota" and get(o, "metadata.name", str, "") == team
            ),
            None,
        )
        chosen = get(quota, "spec.onNodeFailure", str, "") if quota else ""
    return chosen != "Evict"  # the default is Replace


# What recovery shows when the gang's Queue (or TeamQuota) says onNodeFailure: Replace:
# the lost node replaced inside its domain, the gang running again, never evicted.
REPLACED_PHASES = ("injected", "replaced", "running")


def node_loss(gang: GangSeen, node: Obj, *, keep_in: str, replaces: bool = False) -> Injection:
    """Delete the Node (as a machine that is gone): its pods go with it, in time.

    ``replaces``: the gang's Queue replaces lost nodes; the lost members must come back
    on a replacement node of the same domain, and the gang must never be evicted, unless
    its eviction says that no node of the domain could take them (then it is judged as
    a node loss without replacement: evicted, requeued, admitted again elsewhere)."""
    holding(gang)
    name = get(node, "metadata.name", str, "")
    steps = [
        f"keep Node {name} in ConfigMap {keep_in}/chaos-<run>-{name} (to create it again)",
        f"delete Node {name}",
    ]

    def act(marks: Marks) -> None:
        marks.keep_deleted_node(node, keep_in)
        marks.gateway.delete(gw.NODE, "", name)

    evicts = Injection(
        "node-loss",
        steps,
        (name,),
        act,
        reasons=("MembersLost", "PodsReadyTimeout"),
        avoid=(name,),
        margin=60.0 + POD_GC_SECONDS,
        notes=[f"the cluster deletes the pods of a lost node after about {POD_GC_SECONDS:.0f}s"],
    )
    if replaces:
        return Injection(
            "node-loss",
            steps,
            (name,),
            act,
            expect=REPLACED_PHASES,
            avoid=(name,),
            once=True,
            margin=60.0 + POD_GC_SECONDS,
            notes=[
                f"the cluster deletes the pods of a lost node after about {POD_GC_SECONDS:.0f}s",
                "the Queue replaces lost nodes (onNodeFailure: Replace, the default): expects "
                "NodeReplaced; an eviction that says no node of the domain fits is judged as "
                "a node loss without replacement",
            ],
            fallback=evicts,
        )
    return evicts


def gpu_fault(node: Obj, *, gpu: int, xid: int, run: str, now: float) -> Injection:
    """Publish an XID on one GPU of the node in the Node health format, as the node agent
    or DCGM would; every older GPU pod there counts as hit (no per-device map)."""
    name = get(node, "metadata.name", str, "")
    label = strings(node, "metadata.labels").get(GPU_COUNT_LABEL, "")
    count = int(label) if label.isdigit() else None
    fault = UnhealthyGpu(
        index=gpu,
        reason="XidCriticalError",
        xids=(xid,),
        since=now,
        last_seen=now,
        message=f"injected by queue-controller chaos run {run}",
    )
    steps = [
        f"publish on Node {name}: {nodehealth.CONDITION}=False (XidCriticalError), "
        f"GPU {gpu} XID {xid} in {nodehealth.ANNOTATION}"
    ]
    previous = strings(node, "metadata.annotations").get(nodehealth.ANNOTATION)
    notes = []
    if previous and '"source":"chaos"' not in previous.replace(" ", ""):
        notes.append(
            f"Node {name} has a GPU health reporter: the fault is published again each poll"
        )

    def act(marks: Marks) -> None:
        current = marks.gateway.get(gw.NODE, "", name)
        meta, status = nodehealth.report_patches(
            current, source="chaos", unhealthy=[fault], gpus=count, now=now
        )
        marks.gpu_fault(name, meta=meta, status=status)

    def keep(marks: Marks) -> None:
        current = marks.gateway.get(gw.NODE, "", name)
        report = nodehealth.gpu_health(current)
        if report is None or (not report.unhealthy and not report.whole_node):
            act(marks)

    return Injection(
        "gpu-fault", steps, (name,), act, reasons=("GPUUnhealthy",), keep=keep, notes=notes
    )


# How long gpu-steal waits for the members it deleted to be gone before it counts what is free.
GONE_SECONDS = 60.0


def pod_gpus(pod: Obj) -> int:
    """The GPUs a pod asks for (an extended resource's request defaults to its limit)."""
    total = 0
    for container in objects(pod, "spec.containers"):
        resources = get(container, "resources", dict, {})
        amount = strings(resources, "requests").get(GPU) or strings(resources, "limits").get(GPU)
        total += int(amount) if amount and amount.isdigit() else 0
    return total


def free_gpus(node: Obj, pods: Iterable[Obj], *, leaving: Iterable[str] = ()) -> int:
    """The node's allocatable GPUs less what its live pods hold (those ``leaving`` aside)."""
    name = get(node, "metadata.name", str, "")
    gone = set(leaving)
    allocatable = strings(node, "status.allocatable").get(GPU, "0")
    held = sum(
        pod_gpus(p)
        for p in pods
        if get(p, "spec.nodeName", str, "") == name
        and get(p, "status.phase", str, "") not in ("Succeeded", "Failed")
        and f"{get(p, 'metadata.namespace', str, '')}/{get(p, 'metadata.name', str, '')}"
        not in gone
    )
    return (int(allocatable) if allocatable.isdigit() else 0) - held


def placeholder(name: str, node: str, gpus: int) -> dict[str, Any]:
    """A pod outside any queue, bound straight to the node (no scheduler), holding GPUs."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "steal",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}},
                }
            ],
        },
    }


def create_placeholder(marks: Marks, namespace: str, body: dict[str, Any]) -> Obj:
    """Create a placeholder pod, or say why the fault cannot be injected with one.

    A quota or an admission policy may refuse it: in a managed namespace the chart's
    policies refuse an accelerator pod with no queue label, and one with
    ``spec.nodeName``.  Then nothing takes the GPUs, and the run must not judge the
    controller for a fault that never happened."""
    name = get(body, "metadata.name", str, "")
    try:
        return marks.pod(namespace, body)
    except gw.NotFound:
        raise NotInjected(f"no namespace {namespace} for the placeholder Pod") from None
    except gw.TransportError:
        raise
    except gw.GatewayError as refused:
        why = (
            f"the placeholder Pod {namespace}/{name} was refused: {refused} "
            "(give --placeholder-namespace, a namespace where it may run)"
        )
        raise NotInjected(why) from None


def gpu_steal(
    gang: GangSeen,
    node: Obj,
    pods: list[Obj],
    *,
    run: str,
    placeholder_namespace: str | None = None,
    clock: Callable[[], float] = time.time,
) -> Injection:
    """A pod outside any queue takes the GPUs the gang planned on the node before its
    members bind there: the node is tainted while the members bound there are deleted and
    the placeholder is bound (sized to exactly the GPUs free then, so that no node is ever
    over-committed), then the taint comes off and the members meet a full node.  The
    placeholder goes to ``placeholder_namespace`` (default: the gang's)."""
    holding(gang)
    name = get(node, "metadata.name", str, "")
    bound = [m for m in gang.live if m.node == name]
    planned = gang.placement.get(name, 0)
    if not bound and not planned:
        raise InputError(
            f"{gang.what} has no member planned on Node {name} "
            f"(its placement: {', '.join(sorted(gang.placement)) or 'none'})",
            field="--node",
        )
    too_many(gang, len(bound), field="--job")
    leaving = [f"{gang.namespace}/{m.name}" for m in bound]
    free = free_gpus(node, pods, leaving=leaving)
    if free <= 0:
        raise InputError(f"Node {name} has no GPU free to steal", field="--node")
    pod_name = f"chaos-{run}"[:63]
    where = placeholder_namespace or gang.namespace
    steps = [f"taint Node {name} {TAINT_KEY}=<run>:NoSchedule (members cannot bind meanwhile)"]
    steps += [f"delete Pod {gang.namespace}/{m.name} on {name}" for m in bound]
    steps += [
        f"bind placeholder Pod {where}/{pod_name} (outside any queue) to {name}, "
        f"requesting every GPU free there ({free} now)",
        f"remove the taint from Node {name}: the gang's members meet a node without free GPUs",
    ]

    def act(marks: Marks) -> None:
        marks.taint(name)
        for member in bound:
            marks.gateway.delete(gw.POD, gang.namespace, member.name)
        _gone(marks.gateway, gang.namespace, [m.name for m in bound], clock)
        current = marks.gateway.get(gw.NODE, "", name)
        now_free = free_gpus(current, marks.gateway.list(gw.POD))
        if now_free <= 0:
            raise NotInjected(f"Node {name} has no GPU free to steal any more")
        create_placeholder(marks, where, placeholder(pod_name, name, now_free))
        marks.untaint(name)

    return Injection(
        "gpu-steal",
        steps,
        (name,),
        act,
        reasons=("PodsReadyTimeout", "MembersLost"),
        avoid=(name,),
        notes=["the placeholder runs until the run ends; readmission must go elsewhere"],
    )


def _gone(
    gateway: gw.Gateway, namespace: str, names: list[str], clock: Callable[[], float]
) -> None:
    until = clock() + GONE_SECONDS
    for name in names:
        while clock() < until:
            try:
                gateway.get(gw.POD, namespace, name)
            except gw.NotFound:
                break
            time.sleep(0.2)
