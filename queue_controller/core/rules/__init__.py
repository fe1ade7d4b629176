"""What the objects mean before anything is placed.

A pod's effective requests (``requests``), which nodes are usable and what
they have free (``nodes``, with ``gpuhealth``), the order of the queue
(``ordering``) and requeue backoff (``requeue``), what a gang's topology
request asks (``topology``: its levels, not the domains that satisfy it,
which are :mod:`..placement.topology`), and the gangs prepared for a cycle
(``prepared``, which uses the others and :mod:`..devices.dims`).
"""
