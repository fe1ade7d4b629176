"""The what-if simulator behind ``queue-controller simulate``, in packages by feature.

:func:`queue_controller.sim.engine.compare.simulate` replays a
:class:`~.scenario.spec.Scenario` (cluster, Queues, TeamQuotas, workload) under
``gang-fit`` (the core, as the controller runs it) and two baselines, and returns
a :class:`~.measurement.results.SimulationReport`; :mod:`.report` writes it out.

* :mod:`.engine`: the event loop of one policy's run, its admission, binding,
  node faults and preemption, and the comparison of the policies;
* :mod:`.report`: report.json, report.md and the plots (it reads only the results);
* :mod:`.measurement`: what a run measures and the report's data;
* :mod:`.world`: the modelled cluster and the state of a run;
* :mod:`.scenario`: the scenario and its inputs (files, generated workloads,
  policy presets).

Each package looks only downward (``engine`` and ``report`` know nothing of each
other); import-linter enforces it, one exhaustive contract over the packages and
one over each package's modules.  These packages have no faces: the CLI imports
their modules lazily, one at a time, so that other commands stay light.
"""
