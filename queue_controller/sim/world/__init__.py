"""The modelled world: the simulated cluster (``cluster``), the state of a run
(``runstate``), faults (``faults``) and the events of the event queue (``events``).

Above :mod:`..scenario`, which it is built from; below :mod:`..measurement`,
which reads it.
"""
