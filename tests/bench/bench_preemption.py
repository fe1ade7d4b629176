"""What considering preemption adds to an admission cycle, at scale.

    python -m tests.bench.bench_preemption           # 1,000 and 5,000 nodes
    python -m tests.bench.bench_preemption --quick   # 1,000 nodes only

A cluster of N 8-GPU nodes, every GPU held by running one-pod 4-GPU gangs of team
"borrower" (2N gangs), half of them on GPUs borrowed from team "lender" in the same
cohort; and 2N pending 8-GPU gangs, half of the lender's (within its nominal) and
half of the borrower's.  With reclaim, N/2 of the lender's gangs preempt in the one
cycle (each evicting the two gangs of one node), the worst case for the search.  The same
cycle is timed with the lender's ``reclaimWithinCohort: Any`` and with ``Never``,
in CPU seconds, best of ``--repeat``; the target is at most 2x.  The same cycle
once more with the cohort's fair sharing on (a Cohort object): the same
preemptions, chosen quota by quota under the share rule.

Then all three once more in a three-level cohort tree (issue 24): org <- dept-a <-
group-a (the lender's cohort) and org <- dept-b <- group-b (the borrower's), with
the tree's shares judged at every level, against the same tree without preemption.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from functools import partial

from rich.console import Console
from rich.table import Table

from queue_controller.core import Cohort, Verdict, WorkloadPhase, schedule
from queue_controller.core.model.objects import Preemption, ReclaimPolicy, Snapshot, TeamQuota
from tests.bench.timing import best_cpu_seconds_each
from tests.builders import GPU, gang, gpu_node, gpus, queue, running_pod, snapshot

TREE = (
    Cohort("org"),
    Cohort("dept-a", parent="org"),
    Cohort("dept-b", parent="org"),
    Cohort("group-a", parent="dept-a"),
    Cohort("group-b", parent="dept-b"),
)


def in_tree(flat: Snapshot, *, fair: bool) -> Snapshot:
    """The same cluster, the two quotas three levels below org (fair sharing from the root)."""
    lender, borrower = flat.quotas
    cohorts = (replace(TREE[0], fair_sharing=fair), *TREE[1:])
    quotas = (replace(lender, cohort="group-a"), replace(borrower, cohort="group-b"))
    return replace(flat, quotas=quotas, cohorts=cohorts)


def cluster(nodes: int, policy: Preemption) -> Snapshot:
    node_list = [gpu_node(f"n{i:05d}", 8) for i in range(nodes)]
    running, pods = [], []
    created = 0.0
    for node in node_list:
        for half in range(2):
            created += 1
            workload = gang(
                f"run-{node.name}-{half}",
                1,
                4,
                queue="more",
                phase=WorkloadPhase.ADMITTED,
                created=created,
                placement={node.name: 1},
            )
            running.append(workload)
            pods.append(running_pod(node.name, 4, name=f"{workload.name}-0", workload=workload.key))
    pending = [
        gang(f"want-{i}", 1, 8, queue="own" if i % 2 == 0 else "more", created=10_000_000.0 + i)
        for i in range(2 * nodes)
    ]
    return snapshot(
        nodes=node_list,
        pods=pods,
        workloads=[*running, *pending],
        quotas=[
            TeamQuota("lender", {GPU: gpus(4 * nodes)}, "c", policy),
            TeamQuota("borrower", {GPU: gpus(4 * nodes)}, "c"),
        ],
        queues=[queue("own", "lender"), queue("more", "borrower")],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 nodes only")
    parser.add_argument(
        "--repeat", type=int, default=5, help="best of this many rounds, each cycle once a round"
    )
    args = parser.parse_args()
    table = Table(title="an admission cycle with preemption considered (CPU s, best of runs)")
    columns = ("nodes", "running", "pending", "without", "with", "ratio")
    columns += ("fair", "ratio", "preempt")
    for column in columns:
        table.add_column(column, justify="right")
    tree = Table(title="the same, in a three-level cohort tree (CPU s, best of runs)")
    for column in ("nodes", "without", "with", "ratio", "fair", "ratio", "preempt"):
        tree.add_column(column, justify="right")
    for nodes in [1_000] if args.quick else [1_000, 5_000]:
        never = cluster(nodes, Preemption())
        reclaim = cluster(nodes, Preemption(reclaim_within_cohort=ReclaimPolicy.ANY))
        fair = replace(reclaim, cohorts=(Cohort("c", fair_sharing=True),))
        tree_never = in_tree(never, fair=False)
        tree_reclaim = in_tree(reclaim, fair=False)
        tree_fair = in_tree(reclaim, fair=True)
        cycles = {
            "without": never,
            "with": reclaim,
            "fair": fair,
            "tree without": tree_never,
            "tree with": tree_reclaim,
            "tree fair": tree_fair,
        }
        # In turns, one of each per round: the ratios compare runs of the same spell.
        timed = best_cpu_seconds_each(
            {name: partial(schedule, cycle) for name, cycle in cycles.items()}, args.repeat
        )
        without_s, with_s, fair_s = (timed[n][0] for n in ("without", "with", "fair"))
        result = timed["with"][1]
        preempting = sum(1 for d in result.decisions if d.verdict is Verdict.PREEMPT)
        table.add_row(
            f"{nodes:,}",
            f"{2 * nodes:,}",
            f"{2 * nodes:,}",
            f"{without_s:.2f}",
            f"{with_s:.2f}",
            f"{with_s / without_s:.2f}x",
            f"{fair_s:.2f}",
            f"{fair_s / without_s:.2f}x",
            f"{preempting:,}",
        )
        t_without, t_with, t_fair = (
            timed[n][0] for n in ("tree without", "tree with", "tree fair")
        )
        t_result = timed["tree with"][1]
        tree.add_row(
            f"{nodes:,}",
            f"{t_without:.2f}",
            f"{t_with:.2f}",
            f"{t_with / t_without:.2f}x",
            f"{t_fair:.2f}",
            f"{t_fair / t_without:.2f}x",
            f"{sum(1 for d in t_result.decisions if d.verdict is Verdict.PREEMPT):,}",
        )
    Console().print(table)
    Console().print(tree)


if __name__ == "__main__":
    main()
