"""The experiments: what each injects into one admitted gang, and what recovery it expects.

Each is planned from one look at the gang first, so ``--dry-run`` prints the
very steps a real run takes, and it touches only the gang's own pods and the
nodes they were planned on (or the node it is given).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from queue_controller.chaos.marks import TAINT_KEY, Marks
from queue_controller.chaos.observe import PHASES, GangSeen
from queue_controller.core.gpuhealth import GPU_COUNT_LABEL
from queue_controller.core.model import UnhealthyGpu
from queue_controller.errors import InputError
from queue_controller.kube import gateway as gw
from queue_controller.kube import nodehealth
from queue_controller.kube.fields import Obj, get, strings

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
    notes: list[str] = field(default_factory=list)


def _holding(gang: GangSeen) -> None:
    if gang.phase not in ("Admitted", "Running"):
        raise InputError(
            f"Job {gang.namespace}/{gang.name} is not admitted (its PodGroup is "
            f"{gang.phase or 'not made yet'}): nothing to break",
            field="--job",
        )


def partial_placement(gang: GangSeen, *, members: int) -> Injection:
    """Stop ``members`` members from ever running: taint their planned nodes NoSchedule,
    and delete those already there, so that their replacements meet the taint."""
    _holding(gang)
    live = gang.live
    if not 1 <= members < len(live):
        raise InputError(
            f"--members must be at least 1 and fewer than the gang's {len(live)} live members",
            field="--members",
        )
    # Members not running yet first: stopping them costs the Job no failure.
    chosen = sorted(live, key=lambda m: (m.phase == "Running", m.name))[:members]
    others = {m.node for m in live if m not in chosen and m.node}
    nodes = {m.node for m in chosen if m.node}
    if any(not m.node for m in chosen):
        free = {n for n in gang.placement if n not in others}
        nodes |= free or set(gang.placement)
    bound = [m for m in chosen if m.node]
    backoff = get(gang.job or {}, "spec.backoffLimit", int, 6)
    if len(bound) > backoff:
        raise InputError(
            f"deleting {len(bound)} bound members would fail Job {gang.namespace}/{gang.name} "
            f"(its backoffLimit is {backoff}); raise it, or inject before its members bind",
            field="--members",
        )
    steps = [f"taint Node {n} {TAINT_KEY}=<run>:NoSchedule" for n in sorted(nodes)]
    steps += [
        f"delete Pod {gang.namespace}/{m.name} on {m.node}: its replacement meets the taint"
        for m in bound
    ]

    def act(marks: Marks) -> None:
        for node in sorted(nodes):
            marks.taint(node)
        for member in bound:
            marks.gateway.delete(gw.POD, gang.namespace, member.name)

    return Injection(
        "partial-placement",
        steps,
        tuple(sorted(nodes)),
        act,
        reasons=("PodsReadyTimeout", "MembersLost"),
        avoid=tuple(sorted(nodes)),
    )


def gang_node(gang: GangSeen, node: str | None) -> str:
    """The node to break: the one given, or the first that holds a member."""
    on = sorted({m.node for m in gang.live if m.node})
    if node is None:
        if not on:
            raise InputError(
                f"Job {gang.namespace}/{gang.name} has no member on a node", field="--job"
            )
        return on[0]
    if node not in on:
        raise InputError(
            f"Node {node} holds no member of Job {gang.namespace}/{gang.name} "
            f"(they are on {', '.join(on) or 'no node'})",
            field="--node",
        )
    return node


def node_loss(gang: GangSeen, node: Obj, *, keep_in: str) -> Injection:
    """Delete the Node (as a machine that is gone): its pods go with it, in time."""
    _holding(gang)
    name = get(node, "metadata.name", str, "")
    steps = [
        f"keep Node {name} in ConfigMap {keep_in}/chaos-<run>-{name} (to create it again)",
        f"delete Node {name}",
    ]

    def act(marks: Marks) -> None:
        marks.keep_deleted_node(node, keep_in)
        marks.gateway.delete(gw.NODE, "", name)

    return Injection(
        "node-loss",
        steps,
        (name,),
        act,
        reasons=("MembersLost", "PodsReadyTimeout"),
        avoid=(name,),
        margin=60.0 + POD_GC_SECONDS,
        notes=[f"the cluster deletes the pods of a lost node after about {POD_GC_SECONDS:.0f}s"],
    )


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
