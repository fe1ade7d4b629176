"""The what-if simulator behind ``queue-controller simulate``.

:func:`queue_controller.sim.engine.simulate` replays a :class:`~.scenario.Scenario`
(cluster, Queues, TeamQuotas, workload) under ``gang-fit`` (the core, as the
controller runs it) and two baselines, and returns a
:class:`~.results.SimulationReport`; :mod:`.report` writes it out.
"""
