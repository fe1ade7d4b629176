"""``queue-controller chaos``: break one admitted gang on purpose, watch the controller
recover with ``check`` running throughout, and undo the break whatever happens."""

from queue_controller.chaos.confirm import (
    METHODS,
    Confirmation,
    Method,
    NotInjected,
    choose_method,
    tolerates,
)
from queue_controller.chaos.experiments import (
    Injection,
    free_gpus,
    gang_node,
    gpu_fault,
    gpu_steal,
    node_loss,
    replaces_lost_nodes,
)
from queue_controller.chaos.marks import LABEL, TAINT_KEY, new_run_id, undo
from queue_controller.chaos.observe import PHASES, GangSeen, gang_seen
from queue_controller.chaos.placement import partial_placement
from queue_controller.chaos.restart import DURING, Target, controller_restart
from queue_controller.chaos.runner import Outcome, Runner, Scope, scope_of

__all__ = [
    "DURING",
    "LABEL",
    "METHODS",
    "PHASES",
    "TAINT_KEY",
    "Confirmation",
    "GangSeen",
    "Injection",
    "Method",
    "NotInjected",
    "Outcome",
    "Runner",
    "Scope",
    "Target",
    "choose_method",
    "controller_restart",
    "free_gpus",
    "gang_node",
    "gang_seen",
    "gpu_fault",
    "gpu_steal",
    "new_run_id",
    "node_loss",
    "partial_placement",
    "replaces_lost_nodes",
    "scope_of",
    "tolerates",
    "undo",
]
