"""Quota: the cohort tree (``tree``), the ledger of what each team quota guarantees,
lends and borrows through it (``ledger``), and fair share at every level of the tree
(``fairshare``, over the prepared gangs).  Beside ``fairshare``, ``admissionfair``: a
TeamQuota's Queues ordered by their decayed usage (Kueue's Admission Fair Sharing),
which needs no ledger.

Independent of :mod:`..placement`: only preemption and the cycle use both.
"""

from queue_controller.core.quota.ledger import (
    QuotaLedger,
    guaranteed,
    lendable,
)
from queue_controller.core.quota.tree import QuotaTree, cycles, roots_of

__all__ = [
    "QuotaLedger",
    "QuotaTree",
    "cycles",
    "guaranteed",
    "lendable",
    "roots_of",
]
