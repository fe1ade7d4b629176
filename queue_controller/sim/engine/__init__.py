"""The engine: one policy's run over the scenario, and the comparison of policies.

``compare`` runs each policy (:func:`~.compare.simulate`); ``run`` is one run's
event loop; ``preempting``, ``nodefaults`` and ``binding`` are what happens
in it besides admission, which ``admission`` models for each policy.
``preempting`` reads :mod:`..measurement` (it counts lost GPU hours), which is
why the engine sits above measurement, not beside the world.
"""
