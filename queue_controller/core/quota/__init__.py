"""Quota: the ledger of what each team quota guarantees, lends and borrows (``ledger``),
and fair share within a cohort (``fairshare``, over the prepared gangs).  Beside
``fairshare``, ``admissionfair``: a TeamQuota's Queues ordered by their decayed usage
(Kueue's Admission Fair Sharing), which needs no ledger.

Independent of :mod:`..placement`: only preemption and the cycle use both.
"""

from queue_controller.core.quota.ledger import (
    QuotaLedger,
    guaranteed,
    lendable,
)

__all__ = [
    "QuotaLedger",
    "guaranteed",
    "lendable",
]
