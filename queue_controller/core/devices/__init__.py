"""DRA matching: which devices a claim's requests and CEL selectors take.

``dracel`` compiles and evaluates device selectors (under ``celbudget``'s step
and size budget); ``asks`` reads what a pod's claims ask for, ``offers`` what
a node's ResourceSlices offer, and ``dims`` turns both into dimensions of the
placer's resource vectors.

Above :mod:`..model`, below :mod:`..rules` (a prepared gang carries device
dimensions).  The cycle's catalog of devices, which also reads the usage that
:mod:`..rules.prepared` counts, is :mod:`..cycle.devicecatalog`.
"""
