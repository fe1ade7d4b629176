"""Quota: the ledger of what each team quota guarantees, lends and borrows (``ledger``),
and fair share within a cohort (``fairshare``, over the prepared gangs).

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
